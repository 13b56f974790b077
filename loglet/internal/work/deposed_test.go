package work

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// TestDeposedFenceOfSettledEpoch: an incumbent halts, and before its
// recovery fence runs, a successor has minted past its epoch, settled it,
// deleted its slots and dropped its cut from both the epoch record and the
// trim cursor. The fence cannot find the cut any more, but it can tell the
// incumbent is deposed: the chain dies, its unreleased batch outcome
// unknown (its slot may be below the successor's cut), its acked batch
// untouched. Before, the fence failed with a plain error the succession
// retried for ever: the incumbent never learnt it was deposed and its
// appends never got an outcome.
func TestDeposedFenceOfSettledEpoch(t *testing.T) {
	t.Run("cut-lost", func(t *testing.T) { deposedFenceOfSettledEpoch(t, false) })
	t.Run("cut-kept", func(t *testing.T) { deposedFenceOfSettledEpoch(t, true) })
}

// deposedFenceOfSettledEpoch is TestDeposedFenceOfSettledEpoch. keepCut:
// epoch 3's record still carries epoch 1's cut, as a successor's does for
// the last deposedCuts epochs whatever settlement did: then the incumbent
// learns its unreleased batch (at the cut) is definitely not committed.
func deposedFenceOfSettledEpoch(t *testing.T, keepCut bool) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	cfg := coreConfig(64<<10, chaincore.DefaultFrameLimits(4<<20))
	cfg.Owner, cfg.Window = "p1", 4
	ms := metastore.NewMem()
	env := &Env{Star: cfg.Star, Class: cfg.Class, Owner: cfg.Owner, Stores: []objstore.Store{objstore.NewMem()}, Names: cfg.Buckets,
		W: 1, Meta: ms, Codec: envelope.CodecNone, Frames: cfg.Frames, Now: func() time.Time { return now },
		Retry: chain.RetryPolicy{MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}}
	c := chaincore.New(cfg, now)
	var (
		outcomes []*chaincore.Batch
		dead     *chaincore.Fate
		stopped  bool
		fences   int
		lastWarn string
		failPuts bool // the bucket is cut off: every copy fails
		// beforeFence runs once, before the first fence is executed.
		beforeFence func()
	)
	drive := func() {
		for i := 0; i < 10000; i++ {
			rd := c.Ready()
			c.Advance(rd)
			outcomes = append(outcomes, rd.Outcomes...)
			if rd.Dead != nil {
				dead = rd.Dead
			}
			stopped = stopped || rd.Stopped
			for _, lg := range rd.Logs {
				if lg.Level >= slog.LevelWarn {
					lastWarn = lg.Msg
					for _, a := range lg.Attrs {
						if a.Key == "err" {
							lastWarn += ": " + a.Value.String()
						}
					}
				}
			}
			if rd.Empty() {
				return
			}
			for _, req := range rd.Requests {
				switch r := req.(type) {
				case chaincore.PutCopy:
					if failPuts {
						c.Step(now, chaincore.CopyDone{Upload: r.Upload, Result: chain.CopyResult{Bucket: r.Bucket, Status: chain.CopyFailed, Err: errors.New("bucket unreachable")}})
						continue
					}
				case chaincore.Fence:
					fences++
					if beforeFence != nil {
						beforeFence()
						beforeFence = nil
					}
				}
				c.Step(now, env.Do(ctx, req))
			}
		}
		t.Fatal("the core never went quiet")
	}
	drive() // opens: epoch 1
	if c.Epoch() != 1 {
		t.Fatalf("opened at epoch %d, want 1", c.Epoch())
	}
	a := batch(c.Stream("a"), 1, "acked")
	if err := c.Admit(now, a, nil, nil, true); err != nil {
		t.Fatal(err)
	}
	now = now.Add(cfg.FlushDeadline)
	c.Step(now, chaincore.Tick{})
	drive()
	if a.Fate.Kind != chaincore.Acked {
		t.Fatalf("first batch: %v, want acked", a.Fate.Kind)
	}

	// The bucket is cut off: the next flight's copy fails and the epoch
	// halts at slot 1. Meanwhile (before the recovery's fence runs) a
	// successor p2 fenced epoch 1 at slot 1 and minted epoch 2, settled
	// and deleted epoch 1, halted and minted epoch 3 without epoch 1's
	// cut: its slots are gone, and so is its cut, from both records.
	failPuts = true
	beforeFence = func() {
		rec, ver, err := chain.ReadEpoch(ctx, ms, cfg.Star, cfg.Class)
		if err != nil {
			t.Fatal(err)
		}
		two := chain.EpochRecord{Owner: "p2", Window: rec.Window, K: rec.K, W: rec.W, Buckets: rec.Buckets, Cuts: []chain.Cut{{Epoch: 1, Slot: 1}}}
		rec, ver, err = chain.MintNext(ctx, ms, cfg.Star, cfg.Class, rec, ver, two)
		if err != nil {
			t.Fatal(err)
		}
		three := two
		if !keepCut {
			three.Cuts = nil
		}
		if _, _, err := chain.MintNext(ctx, ms, cfg.Star, cfg.Class, rec, ver, three); err != nil {
			t.Fatal(err)
		}
		trim := chain.TrimCursor{At: chain.Position{Epoch: 2, Next: 5}, Deleted: chain.Position{Epoch: 2, Next: 5}, Owner: "p2"}
		if _, err := ms.Put(ctx, chain.TrimKey(cfg.Star, cfg.Class), trim.Encode(), metastore.NoVersion); err != nil {
			t.Fatal(err)
		}
	}
	b := batch(c.Stream("a"), 1, "unreleased")
	if err := c.Admit(now, b, nil, nil, true); err != nil {
		t.Fatal(err)
	}
	now = now.Add(cfg.FlushDeadline)
	c.Step(now, chaincore.Tick{})
	drive()
	// The core backs a failing fence off: step its wake-ups, a bounded
	// number of times.
	for dead == nil && fences < 20 {
		wake := c.Ready().WakeAt
		if wake.IsZero() {
			break
		}
		now = wake
		c.Step(now, chaincore.Tick{})
		drive()
	}
	if dead == nil {
		t.Fatalf("after %d fences the deposed incumbent still does not know it is deposed (last warning: %s)", fences, lastWarn)
	}
	if dead.Deposed == nil || dead.Deposed.Leader != "p2" || dead.Deposed.Epoch != 3 {
		t.Fatalf("dead: %+v, want deposed by p2 at epoch 3", dead)
	}
	if a.Fate.Kind != chaincore.Acked {
		t.Fatalf("acked batch became %v", a.Fate.Kind)
	}
	if keepCut {
		// Epoch 1's cut, slot 1, is recorded: the unreleased batch's
		// slot is at it, so definitely not committed.
		if b.Fate.Kind != chaincore.NotCommitted || b.Fate.Deposed == nil {
			t.Fatalf("unreleased batch: %v (%v), want not committed, deposed", b.Fate.Kind, b.Fate.Cause)
		}
	} else if b.Fate.Kind != chaincore.OutcomeUnknown || !errors.Is(b.Fate.Cause, chaincore.ErrDeposed) || b.Fate.Deposed == nil {
		// The successor's cut is lost: slot 1 may be below it (committed)
		// or not. Never not committed.
		t.Fatalf("unreleased batch: %v (%v), want outcome unknown, deposed", b.Fate.Kind, b.Fate.Cause)
	}
	if len(outcomes) != 2 || outcomes[0] != a || outcomes[1] != b {
		t.Fatalf("%d outcomes, want a's then b's", len(outcomes))
	}
	// A batch refused now was never admitted: definitely not committed,
	// whatever the chain's unreleased batches ended as.
	var de *chaincore.DeadError
	if err := c.Admit(now, batch(c.Stream("a"), 1, "refused"), nil, nil, true); !errors.As(err, &de) || de.Fate.Kind != chaincore.NotCommitted || de.Fate.Deposed == nil {
		t.Fatalf("admit after deposition: %v, want a *chaincore.DeadError, not committed, deposed", err)
	}
	// A deposed chain closes at once, and cleanly: its outcomes are decided.
	c.Close(now)
	drive()
	if !stopped {
		t.Fatal("close did not stop the deposed core")
	}
	if err := c.CloseError(); err != nil {
		t.Fatalf("close error: %v", err)
	}
}
