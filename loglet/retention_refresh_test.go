package loglet

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/metastore"
)

// slowRecords is a metastore whose Gets of stream records take delay once
// it is set (under synctest, on the bubble's clock).
type slowRecords struct {
	metastore.Store
	delay atomic.Int64 // a time.Duration
}

func (m *slowRecords) Get(ctx context.Context, key string) (metastore.Item, error) {
	if d := time.Duration(m.delay.Load()); d > 0 && strings.HasPrefix(key, "streams/") {
		time.Sleep(d)
	}
	return m.Store.Get(ctx, key)
}

// TestRetentionNotHeldBackByTheRefresh: a pass trims the streams that have
// retention before it re-reads the records of those that have none
// (refreshRetention), and re-reads those several at a time. The simulation
// (seed 31 of TestSim) found a star of 2,000 streams whose refresh, one
// read at a time, took two minutes before the pass reached its retained
// streams: retention lagged the interval by that much, and trimmed after
// the run's final reads. Here 100 streams at 100 ms a read held the trim
// back 10 s.
func TestRetentionNotHeldBackByTheRefresh(t *testing.T) {
	synctest.Test(t, testRetentionNotHeldBackByTheRefresh)
}

func testRetentionNotHeldBackByTheRefresh(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	slow := &slowRecords{}
	p, err := w.open("a", func(c *Config) {
		// The test runs the pass; settlement's liveness reads records too.
		c.RetentionInterval, c.SettleInterval, c.CoarseWakeups = -1, -1, true
		slow.Store = c.Meta
		c.Meta = slow
	})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := p.star.CreateStream(ctx, "aged", StreamOptions{Class: Standard, Star: "s1", Retention: Retention{MaxAge: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	// seq i is stamped now − (10−i)·20min: seqs 7, 8, 9 are within the hour.
	stamp := func(seq int) int64 { return now.Add(-time.Duration(10-seq) * 20 * time.Minute).UnixMilli() }
	appendN(t, p.star, "aged", 10, 1, stamp)
	for i := range 100 {
		name := fmt.Sprintf("q%03d", i)
		if _, err := p.star.CreateStream(ctx, name, StreamOptions{Class: Standard, Star: "s1"}); err != nil {
			t.Fatal(err)
		}
		appendN(t, p.star, name, 1, 1, nil)
	}
	waitAbsorbed(t, p.star)

	// The first pass refreshes every stream without retention (it has no
	// generation yet): 100 reads of 100 ms each.
	slow.delay.Store(int64(100 * time.Millisecond))
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.star.runRetention(ctx, now)
	}()
	time.Sleep(time.Second)
	synctest.Wait()
	got := trimSeqOf(t, w.meta, "aged")
	<-done // the pass ends before the test does, either way
	if got != 7 {
		t.Fatalf("1 s into the pass, the retained stream is trimmed to %d, want 7: the pass re-read the other streams' records first", got)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the pass took %v to re-read 100 records at 100 ms each, want them read several at a time (under 2 s)", took)
	}
}

// TestRetentionRefreshSkipsDeletedStreams: a cached stream whose record is
// gone (deleted by another process, which finished the delete's marker
// too) is no failed read: the pass after the one that found it gone reads
// no record while the catalogue generation stands still. Counting it a
// failure made every pass re-read every record for as long as the deleted
// stream stayed cached (the simulation's deposed leader re-read 90 records
// every pass, 5 s of its 2 s interval).
func TestRetentionRefreshSkipsDeletedStreams(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	cm := &countGets{}
	p, err := w.open("a", func(c *Config) {
		c.RetentionInterval, c.SettleInterval = -1, -1
		cm.Store = c.Meta
		c.Meta = cm
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"x", "y", "z"} {
		if _, err := p.star.CreateStream(ctx, name, StreamOptions{Class: Standard, Star: "s1"}); err != nil {
			t.Fatal(err)
		}
		appendN(t, p.star, name, 1, 1, nil)
	}
	p.star.runRetention(ctx, time.Now())
	cm.take()

	// Another process deletes y and has finished with its marker: the
	// record goes, and the generation moves, in one Commit.
	y, _ := recordOf(t, w.meta, "y")
	if _, err := w.meta.Commit(ctx, []metastore.Op{
		{Kind: metastore.OpDelete, Key: chain.StreamRecordKey("y"), Expect: metastore.AnyVersion},
		catalogGenOp("s1", y.id()),
	}); err != nil {
		t.Fatal(err)
	}
	p.star.runRetention(ctx, time.Now())
	if n := cm.take(); n != 3 {
		t.Fatalf("the pass after the delete read %d stream records, want the 3 it holds", n)
	}
	for i := range 2 {
		p.star.runRetention(ctx, time.Now())
		if n := cm.take(); n != 0 {
			t.Fatalf("pass %d after the one that found y deleted read %d stream records, want none (nothing changed)", i+1, n)
		}
	}
}
