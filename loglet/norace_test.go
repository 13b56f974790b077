//go:build !race

package loglet

// raceBuild is true under the race detector (see race_test.go).
const raceBuild = false
