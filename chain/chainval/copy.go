package chainval

import (
	"fmt"
	"time"

	"github.com/flightlog/flightlog/envelope"
)

// Flight is one rendered transit bundle and the slot it is written to.
type Flight struct {
	Key   string         // SlotKey(star, class, Epoch, Slot)
	Obj   []byte         // the whole object, envelope first; not modified
	Epoch uint64         // the writer's epoch
	Slot  uint64         // the claimed slot
	Nonce envelope.Nonce // the writer's nonce for this slot, in Obj's envelope
}

// CopyStatus is how one bucket's copy of a flight resolved.
type CopyStatus uint8

const (
	// CopyOurs: the bucket holds this writer's copy (created by this call,
	// or by an earlier attempt whose response was lost: a ghost PUT).
	CopyOurs CopyStatus = iota + 1
	// CopyForeign: the bucket holds something else at the slot key (a
	// fencer's poison, another writer's flight, an unreadable object). The
	// epoch must halt.
	CopyForeign
	// CopyFailed: the copy could not be resolved before ctx ended (a down
	// bucket, persistent errors). Its outcome is unknown.
	CopyFailed
)

// String names the status.
func (s CopyStatus) String() string {
	switch s {
	case CopyOurs:
		return "ours"
	case CopyForeign:
		return "foreign"
	case CopyFailed:
		return "failed"
	}
	return fmt.Sprintf("CopyStatus(%d)", uint8(s))
}

// CopyResult is the resolution of one bucket's copy.
type CopyResult struct {
	Bucket   int
	Status   CopyStatus
	Ghost    bool               // ours, recognised by nonce after ErrExists
	Occupant *envelope.Envelope // foreign: the occupant's envelope, nil if unreadable
	Attempts int                // PutIfAbsent calls made
	Latency  time.Duration      // from the start of the write to resolution
	Err      error              // failed: the last error; foreign: why
}

// RetryPolicy paces retries of ambiguous failures.
type RetryPolicy struct {
	MinBackoff time.Duration // first wait (default 5ms)
	MaxBackoff time.Duration // cap (default 500ms)
	// Jitter, if set, returns the random part of a wait: a duration in
	// [0, max]. Nil draws it uniformly from math/rand/v2. A test that must
	// replay exactly (the simulation) sets a deterministic one.
	Jitter func(max time.Duration) time.Duration
}

// Tally counts one flight's copy results against its quorum. It is pure.
type Tally struct {
	K, W                  int
	Ours, Foreign, Failed int
}

// Add counts r and reports whether this result made the slot durable (the
// W-th copy of ours).
func (t *Tally) Add(r CopyResult) (nowDurable bool) {
	switch r.Status {
	case CopyOurs:
		t.Ours++
		return t.Ours == t.W
	case CopyForeign:
		t.Foreign++
	default:
		t.Failed++
	}
	return false
}

// Durable reports whether W copies are ours.
func (t *Tally) Durable() bool { return t.Ours >= t.W }

// Reachable reports whether W copies of ours can still be reached by the
// copies not yet resolved.
func (t *Tally) Reachable() bool { return t.Ours+(t.K-t.Ours-t.Foreign-t.Failed) >= t.W }

// Resolved reports whether every copy has resolved.
func (t *Tally) Resolved() bool { return t.Ours+t.Foreign+t.Failed == t.K }
