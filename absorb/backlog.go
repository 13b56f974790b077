package absorb

import (
	"context"
	"fmt"
	"sync"
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

type token struct {
	slot  uint64
	bytes int64
	at    time.Time
}

// Backlog bounds a chain's claimed-but-unabsorbed flights and their bytes
// (invariant 5's backlog half). The flusher calls Acquire before claiming a
// slot and Add after; the absorb calls Release as the checkpoint passes
// slots. Safe for concurrent use.
type Backlog struct {
	maxFlights int
	maxBytes   int64
	diagnose   func() StallCause
	onStall    func(StallCause, int, int64)

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on each release or close
	tokens  []token       // in slot order
	bytes   int64
	closed  bool

	stalls       [numCauses]uint64
	stalledNanos int64
	stalling     int        // Acquire calls blocked now
	stallCause   StallCause // the cause of the current stall, as last diagnosed
	stallStart   time.Time
}

// NewBacklog returns a backlog bounded by maxFlights and maxBytes. diagnose
// names the cause when a stall begins; onStall (may be nil) is told once
// per stall, e.g. to log it.
func NewBacklog(maxFlights int, maxBytes int64, diagnose func() StallCause, onStall func(cause StallCause, flights int, bytes int64)) *Backlog {
	return &Backlog{maxFlights: maxFlights, maxBytes: maxBytes, diagnose: diagnose, onStall: onStall, changed: make(chan struct{})}
}

// Acquire blocks until one more flight of up to need bytes fits, ctx ends
// (its error is returned) or the backlog closes (nil: the caller's own
// shutdown handles it). A wait that blocks is one stall. onStall is told
// when it begins, with the cause diagnosed then; the cause is re-diagnosed
// every rediagnose interval while it lasts, and the stall is counted when it
// ends under the most specific cause seen (metastore slow, then epoch
// settling, then absorb lagging), so a stall that began while the absorb
// was merely pacing and went on because the metastore was down counts as
// "metastore slow".
func (b *Backlog) Acquire(ctx context.Context, need int64) error {
	b.mu.Lock()
	if b.fits(need) || b.closed {
		b.mu.Unlock()
		return nil
	}
	cause := b.diagnose()
	flights, bytes := len(b.tokens), b.bytes
	start := time.Now()
	b.stalling++
	b.stallCause, b.stallStart = cause, start
	b.mu.Unlock()
	if b.onStall != nil {
		b.onStall(cause, flights, bytes)
	}
	defer func() {
		b.mu.Lock()
		b.stalls[cause]++
		b.stalledNanos += int64(time.Since(start))
		b.stalling--
		b.mu.Unlock()
	}()
	tick := time.NewTicker(rediagnose)
	defer tick.Stop()
	for {
		b.mu.Lock()
		if b.fits(need) || b.closed {
			b.mu.Unlock()
			return nil
		}
		ch := b.changed
		b.mu.Unlock()
		select {
		case <-ch:
		case <-tick.C:
			if c := b.diagnose(); precedence(c) > precedence(cause) {
				cause = c
				b.mu.Lock()
				b.stallCause = c
				b.mu.Unlock()
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// rediagnose is how often a stall's cause is re-examined.
const rediagnose = 100 * time.Millisecond

func precedence(c StallCause) int {
	switch c {
	case CauseMetastoreSlow:
		return 2
	case CauseEpochSettling:
		return 1
	}
	return 0
}

func (b *Backlog) fits(need int64) bool {
	return len(b.tokens) < b.maxFlights && (len(b.tokens) == 0 || b.bytes+need <= b.maxBytes)
}

// Add takes the tokens of a claimed slot holding bytes of payload.
func (b *Backlog) Add(slot uint64, bytes int64) {
	b.mu.Lock()
	b.tokens = append(b.tokens, token{slot, bytes, time.Now()})
	b.bytes += bytes
	b.mu.Unlock()
}

// Release frees the tokens of every slot below upTo.
func (b *Backlog) Release(upTo uint64) {
	b.mu.Lock()
	i := 0
	for i < len(b.tokens) && b.tokens[i].slot < upTo {
		b.bytes -= b.tokens[i].bytes
		i++
	}
	if i > 0 {
		b.tokens = append(b.tokens[:0], b.tokens[i:]...)
		close(b.changed)
		b.changed = make(chan struct{})
	}
	b.mu.Unlock()
}

// Close wakes every blocked Acquire.
func (b *Backlog) Close() {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.changed)
		b.changed = make(chan struct{})
	}
	b.mu.Unlock()
}

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

// Stats returns the backlog's figures.
func (b *Backlog) Stats() BacklogStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := BacklogStats{Flights: len(b.tokens), Bytes: b.bytes, MaxFlights: b.maxFlights, MaxBytes: b.maxBytes,
		Stalls: map[string]uint64{}, StalledNanos: b.stalledNanos}
	if len(b.tokens) > 0 {
		s.OldestAge = time.Since(b.tokens[0].at)
	}
	for c := StallCause(0); c < numCauses; c++ {
		s.Stalls[c.String()] = b.stalls[c]
	}
	if b.stalling > 0 {
		s.Stalling, s.StallingCause, s.StallingFor = true, b.stallCause.String(), time.Since(b.stallStart)
	}
	return s
}
