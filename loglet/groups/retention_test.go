package groups_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/groups"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// trimSeqOf reads stream's trim point from its record.
func trimSeqOf(t *testing.T, meta metastore.Store, stream string) uint64 {
	t.Helper()
	it, err := meta.Get(context.Background(), chain.StreamRecordKey(stream))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		TrimSeq uint64 `json:"trim_seq"`
	}
	if err := json.Unmarshal(it.Value, &rec); err != nil {
		t.Fatal(err)
	}
	return rec.TrimSeq
}

// A retention pass rewrites a stream's record (its trim point), the
// incarnation staying the same: a group session on a retention stream goes
// on acknowledging across passes, and an offset read before a pass commits
// after it. The passes run on the bubble's clock, every 10 minutes.
func TestOffsetsAcrossRetention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		meta := metastore.NewMem()
		star, err := loglet.Open(ctx, loglet.Config{
			Star: "s1", Meta: meta, Logger: slog.New(slog.DiscardHandler),
			CoarseWakeups: true, RetentionInterval: 10 * time.Minute, // under synctest: no precise sleepers
			Standard: loglet.ClassConfig{Stores: []objstore.Store{objstore.NewMem()}},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer star.Close(ctx)
		if _, err := star.CreateStream(ctx, "aged", loglet.StreamOptions{Class: loglet.Standard, Retention: loglet.Retention{MaxAge: time.Hour}}); err != nil {
			t.Fatal(err)
		}
		// seq i is stamped now − (10−i)·20min + 15min: seqs 7, 8, 9 are
		// within the hour at the first pass (now + 10min), none is at the
		// seventh (now + 70min).
		now := time.Now()
		for i := range 10 {
			ts := now.Add(-time.Duration(10-i)*20*time.Minute + 15*time.Minute).UnixMilli()
			if _, err := star.Append(ctx, "aged", loglet.Batch{Records: []loglet.Record{{Body: fmt.Appendf(nil, "r%d", i), Timestamp: ts}}}); err != nil {
				t.Fatal(err)
			}
		}

		o := groups.OffsetsOf(star)
		prev, err := o.Get(ctx, "audit", "aged")
		if err != nil {
			t.Fatal(err)
		}
		g, err := groups.Open(ctx, star, "billing", "aged", groups.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		for g.Next() < 10 {
			if _, err := g.Recv(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := g.Ack(ctx, 2); err != nil {
			t.Fatal(err)
		}

		time.Sleep(now.Add(11 * time.Minute).Sub(time.Now())) // the bubble's clock: past the first pass
		synctest.Wait()
		if got := trimSeqOf(t, meta, "aged"); got != 7 {
			t.Fatalf("retention trimmed to %d, want 7", got)
		}
		if err := g.Ack(ctx, 7); err != nil {
			t.Fatalf("group ack after a retention pass: %v", err)
		}
		two, err := o.Commit(ctx, prev, 2)
		if err != nil {
			t.Fatalf("commit of an offset read before a retention pass: %v", err)
		}

		time.Sleep(now.Add(71 * time.Minute).Sub(time.Now())) // the bubble's clock: every record is over the hour
		synctest.Wait()
		if got := trimSeqOf(t, meta, "aged"); got != 10 {
			t.Fatalf("a later pass trimmed to %d, want 10", got)
		}
		if err := g.Ack(ctx, 9); err != nil {
			t.Fatalf("group ack after a later retention pass: %v", err)
		}
		if _, err := o.Commit(ctx, two, 10); err != nil {
			t.Fatalf("second commit after a later retention pass: %v", err)
		}
		again, err := groups.Open(ctx, star, "billing", "aged", groups.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer again.Close()
		if again.Next() != 10 {
			t.Fatalf("the group resumes at %d, want 10", again.Next())
		}
	})
}
