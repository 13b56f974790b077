package gocloud_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// starProc is one process's star over shared storage, through fault
// wrappers so the test can make its storage unreachable (a crash).
type starProc struct {
	star *loglet.Star
	meta *metastore.FaultStore
	bkts []*objstore.FaultStore
	dead bool
}

func (p *starProc) kill() {
	p.dead = true
	p.meta.SetDown(true)
	for _, b := range p.bkts {
		b.SetDown(true)
	}
}

// openStar opens a star named "s" over meta, one Standard bucket and
// three Express buckets (K=3, W=2), as owner.
func openStar(t *testing.T, owner string, meta metastore.Store, std objstore.Store, exp [3]objstore.Store) *starProc {
	t.Helper()
	p := &starProc{meta: metastore.WithFaults(meta, 1)}
	wrap := func(s objstore.Store) objstore.Store {
		f := objstore.WithFaults(s, uint64(len(p.bkts)+1))
		p.bkts = append(p.bkts, f)
		return f
	}
	cfg := loglet.Config{
		Star: "s", Owner: owner, Meta: p.meta, CreateOnAppend: true,
		Logger:   slog.New(slog.DiscardHandler),
		Standard: loglet.ClassConfig{Stores: []objstore.Store{wrap(std)}, FlushDeadline: time.Millisecond},
		Express:  loglet.ClassConfig{Stores: []objstore.Store{wrap(exp[0]), wrap(exp[1]), wrap(exp[2])}, W: 2},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := loglet.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("%s: loglet.Open: %v", owner, err)
	}
	p.star = s
	t.Cleanup(func() {
		// A killed process cannot reach its storage: its Close only
		// stops its goroutines, so it gets a short deadline.
		timeout := 10 * time.Second
		if p.dead {
			timeout = time.Second
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := s.Close(ctx); err != nil && !p.dead {
			t.Errorf("%s: Close: %v", owner, err)
		}
	})
	return p
}

// readAll reads stream from 0 to its end.
func readAll(t *testing.T, s *loglet.Star, stream string) []loglet.SequencedRecord {
	t.Helper()
	var out []loglet.SequencedRecord
	next := uint64(0)
	for {
		res, err := s.Read(context.Background(), stream, loglet.ReadQuery{Start: loglet.AtSeq(next), MaxRecords: 500})
		if err != nil {
			t.Fatalf("read %s from %d: %v", stream, next, err)
		}
		if len(res.Records) == 0 {
			return out
		}
		out = append(out, res.Records...)
		next = res.Next
	}
}

// runStar appends to a Standard and an Express stream through the adapter,
// kills the process (its storage goes unreachable, nothing is closed),
// opens a successor on the same buckets, which fences and takes over, and
// checks that every acked record reads back and both streams continue.
func runStar(t *testing.T, std objstore.Store, exp [3]objstore.Store) {
	meta := metastore.NewMem()
	ctx := context.Background()
	p1 := openStar(t, "p1", meta, std, exp)
	if _, err := p1.star.CreateStream(ctx, "e", loglet.StreamOptions{Class: loglet.Express}); err != nil {
		t.Fatalf("create Express stream: %v", err)
	}
	acked := map[string]map[uint64]string{"a": {}, "e": {}}
	appendOne := func(s *loglet.Star, stream, body string) loglet.Ack {
		t.Helper()
		ack, err := s.Append(ctx, stream, loglet.Batch{Records: []loglet.Record{{Body: []byte(body)}}})
		if err != nil {
			t.Fatalf("append %q to %s: %v", body, stream, err)
		}
		if old, dup := acked[stream][ack.Start]; dup {
			t.Fatalf("%s seq %d acked twice: %q and %q", stream, ack.Start, old, body)
		}
		acked[stream][ack.Start] = body
		return ack
	}
	verify := func(s *loglet.Star, who string) {
		t.Helper()
		for stream, want := range acked {
			got := readAll(t, s, stream)
			for i, r := range got {
				if r.Seq != uint64(i) {
					t.Fatalf("%s: %s: record %d has seq %d", who, stream, i, r.Seq)
				}
			}
			for seq, body := range want {
				if seq >= uint64(len(got)) || string(got[seq].Body) != body {
					t.Fatalf("%s: %s: acked seq %d (%q) not read back (read %d records)", who, stream, seq, body, len(got))
				}
			}
		}
	}
	for i := range 20 {
		for _, st := range []string{"a", "e"} {
			appendOne(p1.star, st, fmt.Sprintf("p1-%s-%d", st, i))
		}
	}
	verify(p1.star, "p1")
	p1.kill()

	p2 := openStar(t, "p2", meta, std, exp) // fences p1's chains and takes over
	verify(p2.star, "p2 after takeover")
	for _, st := range []string{"a", "e"} {
		tail, err := p2.star.CheckTail(ctx, st)
		if err != nil {
			t.Fatalf("CheckTail(%s): %v", st, err)
		}
		if ack := appendOne(p2.star, st, "p2-"+st); ack.Start != tail.Seq {
			t.Fatalf("%s: append after takeover at %d, tail was %d", st, ack.Start, tail.Seq)
		}
	}
	verify(p2.star, "p2")
}

func TestStarMemblob(t *testing.T) {
	h := memHarness()
	runStar(t, h.New(t), [3]objstore.Store{h.New(t), h.New(t), h.New(t)})
}

func TestStarGCS(t *testing.T) {
	h := gcsHarness(t)
	runStar(t, h.New(t), [3]objstore.Store{h.New(t), h.New(t), h.New(t)})
}

func TestStarAzure(t *testing.T) {
	h := azureHarness(t)
	runStar(t, h.New(t), [3]objstore.Store{h.New(t), h.New(t), h.New(t)})
}
