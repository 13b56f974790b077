package absorbval

import (
	"fmt"
	"time"
)

// StallCause is the diagnosed reason the backlog is full.
type StallCause uint8

// The causes a stall is counted under.
const (
	// CauseAbsorbLagging: rounds commit, but slower than flights release.
	CauseAbsorbLagging StallCause = iota
	// CauseMetastoreSlow: a round's commit is slow or failing.
	CauseMetastoreSlow
	// CauseEpochSettling: the absorb is paused while an epoch settles
	// (halt recovery, takeover).
	CauseEpochSettling
	numCauses
)

// String names the cause as logs and Stats show it.
func (c StallCause) String() string {
	switch c {
	case CauseAbsorbLagging:
		return "absorb lagging"
	case CauseMetastoreSlow:
		return "metastore slow"
	case CauseEpochSettling:
		return "epoch settling"
	}
	return fmt.Sprintf("cause(%d)", uint8(c))
}

// precedence orders causes by how specific they are: a stall is counted
// under the most specific cause seen while it lasted.
func (c StallCause) precedence() int {
	switch c {
	case CauseMetastoreSlow:
		return 2
	case CauseEpochSettling:
		return 1
	}
	return 0
}

type token struct {
	pos   uint64
	bytes int64
	at    time.Time
}

// Backlog accounts a chain's claimed-but-unabsorbed flights and their bytes
// (invariant 5's backlog half) and its stalls. It is pure bookkeeping (no
// clock, no blocking, not safe for concurrent use): the chain's core asks
// Fits before each claim and, at the bound, holds the claim back and
// records a stall with its diagnosed cause; it Adds a token per claimed
// flight, keyed by a claim position that only grows, and Releases tokens as
// the absorb's checkpoint passes them.
type Backlog struct {
	maxFlights int
	maxBytes   int64
	tokens     []token // in claim order
	bytes      int64

	stalls       [numCauses]uint64
	stalledNanos int64
	stalling     bool
	stallCause   StallCause
	stallStart   time.Time
}

// NewBacklog returns a backlog bounded by maxFlights and maxBytes.
func NewBacklog(maxFlights int, maxBytes int64) *Backlog {
	return &Backlog{maxFlights: maxFlights, maxBytes: maxBytes}
}

// Fits reports whether one more flight of up to need bytes fits. An empty
// backlog always fits one flight, so a flight larger than the byte bound
// still leaves.
func (b *Backlog) Fits(need int64) bool {
	return len(b.tokens) < b.maxFlights && (len(b.tokens) == 0 || b.bytes+need <= b.maxBytes)
}

// Add takes the token of a flight claimed at position pos, holding bytes.
func (b *Backlog) Add(pos uint64, bytes int64, at time.Time) {
	b.tokens = append(b.tokens, token{pos, bytes, at})
	b.bytes += bytes
}

// Release frees the tokens of every position below upTo and reports how
// many it freed.
func (b *Backlog) Release(upTo uint64) int {
	i := 0
	for i < len(b.tokens) && b.tokens[i].pos < upTo {
		b.bytes -= b.tokens[i].bytes
		i++
	}
	if i > 0 {
		n := copy(b.tokens, b.tokens[i:])
		b.tokens = b.tokens[:n]
	}
	return i
}

// Stall records that a claim is held back at the bound, diagnosed as
// cause. It reports whether this began a stall (the caller then logs it);
// while one lasts, a more specific cause replaces the one diagnosed first.
func (b *Backlog) Stall(cause StallCause, now time.Time) (began bool) {
	if !b.stalling {
		b.stalling, b.stallCause, b.stallStart = true, cause, now
		return true
	}
	if cause.precedence() > b.stallCause.precedence() {
		b.stallCause = cause
	}
	return false
}

// Stalling reports whether a stall is under way.
func (b *Backlog) Stalling() bool { return b.stalling }

// EndStall ends the stall under way, if any, counting it under its cause.
func (b *Backlog) EndStall(now time.Time) {
	if !b.stalling {
		return
	}
	b.stalls[b.stallCause]++
	b.stalledNanos += int64(now.Sub(b.stallStart))
	b.stalling = false
}

// Len returns the flights and bytes held.
func (b *Backlog) Len() (flights int, bytes int64) { return len(b.tokens), b.bytes }

// MaxFlights is the bound on the flights it holds.
func (b *Backlog) MaxFlights() int { return b.maxFlights }

// BacklogStats are the backlog's gauges and counters.
type BacklogStats struct {
	Flights    int
	Bytes      int64
	MaxFlights int
	MaxBytes   int64
	OldestAge  time.Duration // age of the oldest unabsorbed claimed flight
	// Stalls counts ended stalls by cause; StalledNanos is their total.
	Stalls       map[string]uint64
	StalledNanos int64
	// Stalling: publishes are blocked now, since StallingFor, for
	// StallingCause (as diagnosed so far).
	Stalling      bool
	StallingCause string
	StallingFor   time.Duration
}

// Stats returns the backlog's figures as of now.
func (b *Backlog) Stats(now time.Time) BacklogStats {
	s := BacklogStats{Flights: len(b.tokens), Bytes: b.bytes, MaxFlights: b.maxFlights, MaxBytes: b.maxBytes,
		Stalls: map[string]uint64{}, StalledNanos: b.stalledNanos}
	if len(b.tokens) > 0 {
		s.OldestAge = now.Sub(b.tokens[0].at)
	}
	for c := StallCause(0); c < numCauses; c++ {
		s.Stalls[c.String()] = b.stalls[c]
	}
	if b.stalling {
		s.Stalling, s.StallingCause, s.StallingFor = true, b.stallCause.String(), now.Sub(b.stallStart)
	}
	return s
}
