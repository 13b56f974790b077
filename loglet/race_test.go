//go:build race

package loglet

// raceBuild is true under the race detector, which makes some tests too
// slow for the suite's race run; the suite also runs this package without
// it (with -tags invariants).
const raceBuild = true
