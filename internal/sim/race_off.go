package sim

// raceBuild once kept race builds from sampling Stats during a recovery
// (loglet read the lane's epoch without its lock; fixed, see
// TestBugStatsRacesRecovery). The sampler now runs in every build.
const raceBuild = false
