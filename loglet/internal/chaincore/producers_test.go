package chaincore

import (
	"errors"
	"fmt"
	"testing"
	"time"

	absorb "github.com/flightlog/flightlog/absorb/absorbval"
)

// TestProducerWindow drives the window's decisions on one stream: a new
// batch is admitted, a retry in flight waits, a committed one is answered
// with its range, one older than the remembered batches is refused, and
// the age and producer bounds forget.
func TestProducerWindow(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	c := &Core{now: t0, cfg: Config{ProducerWindow: ProducerWindow{Producers: 2, Age: time.Minute}}}
	st := &Stream{name: "s", durable: Tail{Seq: 100}}
	next := uint64(0)
	admit := func(id string, seq uint64) (*Batch, error) {
		b := &Batch{Stream: st, Count: 2, Producer: ProducerID{id, seq}}
		if err := c.admitProducer(st, b); err != nil {
			return nil, err
		}
		b.Start, next = next, next+2
		st.window().inflight[b.Producer] = b
		return b, nil
	}
	b, err := admit("p", 1)
	if err != nil {
		t.Fatal(err)
	}
	var in *InFlightError
	if _, err := admit("p", 1); !errors.As(err, &in) || in.Batch != b {
		t.Fatalf("retry in flight: %v, want an InFlightError naming the attempt", err)
	}
	c.producerDecided(b, Fate{Kind: Acked})
	var dup *DuplicateError
	if _, err := admit("p", 1); !errors.As(err, &dup) || dup.Ack.Start != 0 || dup.Ack.End != 2 || dup.Ack.Tail.Seq != 100 {
		t.Fatalf("retry of a committed batch: %v, want a duplicate of [0, 2)", err)
	}
	// A batch not committed is forgotten: its retry is admitted.
	nb, _ := admit("p", 2)
	c.producerDecided(nb, Fate{Kind: NotCommitted})
	if _, err := admit("p", 2); err != nil {
		t.Fatalf("retry of a not-committed batch: %v", err)
	}
	// ProducerBatches later batches push batch 1 out: its retry is refused.
	for s := uint64(3); s < 3+ProducerBatches; s++ {
		b, err := admit("p", s)
		if err != nil {
			t.Fatal(err)
		}
		c.producerDecided(b, Fate{Kind: Acked})
	}
	var win *ProducerWindowError
	if _, err := admit("p", 1); !errors.As(err, &win) || win.Oldest != 3 {
		t.Fatalf("retry past the window: %v, want a ProducerWindowError (oldest 3)", err)
	}
	// Two producers at most: a third forgets the least recent.
	c.now = t0.Add(time.Second)
	for _, id := range []string{"q", "r"} {
		b, _ := admit(id, 1)
		c.producerDecided(b, Fate{Kind: Acked})
	}
	if _, ok := st.prod.byID["p"]; ok || len(st.prod.byID) != 2 {
		t.Fatalf("producers remembered: %v, want q and r", st.prod.byID)
	}
	// Past the age, a producer is forgotten.
	c.now = t0.Add(2 * time.Minute)
	if _, err := admit("q", 1); err != nil {
		t.Fatalf("a retry past the age is admitted as new (the Producer refuses it first): %v", err)
	}
}

// TestProducerTailsBound: the tails keep, per stream, the most recent
// producers, their last ProducerBatches batches, none past the age, and
// one entry per batch.
func TestProducerTailsBound(t *testing.T) {
	var ts []absorb.ProducerTail
	for s := uint64(1); s <= ProducerBatches+3; s++ {
		ts = append(ts, absorb.ProducerTail{ID: "a", Seq: s, At: 100 + int64(s)})
	}
	ts = append(ts, absorb.ProducerTail{ID: "a", Seq: 5, At: 999}) // the same batch again
	ts = append(ts, absorb.ProducerTail{ID: "old", Seq: 1, At: 10}, absorb.ProducerTail{ID: "b", Seq: 1, At: 50}, absorb.ProducerTail{ID: "c", Seq: 1, At: 60})
	got := boundProducerTails(ts, 20, 2)
	var ids []string
	for _, t := range got {
		ids = append(ids, fmt.Sprint(t.ID, t.Seq))
	}
	want := "[a4 a5 a6 a7 a8 a9 a10 a11 c1]"
	if fmt.Sprint(ids) != want {
		t.Fatalf("bounded tails %v, want %s", ids, want)
	}
}
