// Package invariants holds what only tests switch on: expensive assertions
// of "cannot happen" conditions, and the planted bugs the simulation proves
// its checker catches. Both compile away in a production build.
//
// Build with -tags invariants to enable them (scripts/test.sh runs the
// planted-bug tests so). Without the tag, Enabled is the constant false, so
// `if invariants.Enabled && ...` costs nothing, every Bug.On reads false,
// and Plant fails the test that calls it.
package invariants
