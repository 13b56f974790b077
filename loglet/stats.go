package loglet

import "github.com/flightlog/flightlog/loglet/stats"

// Stats is a point-in-time view of a star: one plain struct, cheap to take.
type Stats struct {
	Star     string
	Standard *ClassStats // nil when the class is disabled
	Express  *ClassStats
	// ReadCacheBytes is the decoded frames history reads keep now, within
	// ReadCacheBoundBytes (Config.ReadCacheMiB); hits and misses count
	// lookups.
	ReadCacheBytes, ReadCacheBoundBytes int64
	ReadCacheHits, ReadCacheMisses      uint64
}

// ClassStats are one chain's gauges, counters and histograms, defined in
// package stats (which documents them) and filled by the chain's core
// directly. contrib/prometheus and contrib/otel export them.
type ClassStats = stats.Class

// MemoryStats accounts for what one chain holds on behalf of producers
// beyond its pool and backlog, each part against its bound (see
// stats.Memory, and ClassStats.HeldBytes for the sum of every part).
type MemoryStats = stats.Memory

// SettleStats are one chain's settlement figures (see stats.Settle).
type SettleStats = stats.Settle

// Stats returns the star's current figures.
func (s *Star) Stats() Stats {
	out := Stats{Star: s.cfg.Star, ReadCacheBoundBytes: s.hist.frames.bound()}
	out.ReadCacheBytes, out.ReadCacheHits, out.ReadCacheMisses = s.hist.frames.stats()
	if l := s.lane(Standard); l != nil {
		out.Standard = l.snapshot()
	}
	if l := s.lane(Express); l != nil {
		out.Express = l.snapshot()
	}
	return out
}
