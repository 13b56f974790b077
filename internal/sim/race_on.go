//go:build race

package sim

// raceBuild: loglet's Stats races with a halt recovery (l.epoch is read
// without the lane lock, loglet/stats.go:76, and written under it,
// loglet/recover.go:131), so race builds do not sample Stats while the
// workload runs (the bounds sampler, corruption's slot choice); see
// TestBugStatsRacesRecovery.
const raceBuild = true
