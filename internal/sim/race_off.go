//go:build !race

package sim

// raceBuild: see race_on.go.
const raceBuild = false
