package loglet

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/metastore"
)

// requestTally counts the requests made through it while on.
type requestTally struct {
	metastore.Store
	on atomic.Bool
	n  atomic.Int64
}

func (m *requestTally) tick() {
	if m.on.Load() {
		m.n.Add(1)
	}
}

func (m *requestTally) Get(ctx context.Context, key string) (metastore.Item, error) {
	m.tick()
	return m.Store.Get(ctx, key)
}

func (m *requestTally) Put(ctx context.Context, key string, value []byte, expect metastore.Version) (metastore.Version, error) {
	m.tick()
	return m.Store.Put(ctx, key, value, expect)
}

func (m *requestTally) Delete(ctx context.Context, key string, expect metastore.Version) error {
	m.tick()
	return m.Store.Delete(ctx, key, expect)
}

func (m *requestTally) Scan(ctx context.Context, prefix, after string, limit int) ([]metastore.Item, error) {
	m.tick()
	return m.Store.Scan(ctx, prefix, after, limit)
}

func (m *requestTally) Commit(ctx context.Context, ops []metastore.Op) ([]metastore.Version, error) {
	m.tick()
	return m.Store.Commit(ctx, ops)
}

// TestDeposedLeaderRunsNoRetention: once a successor has sealed the only
// chain a star leads, its retention passes stop: they make no metastore
// request (before, a deposed leader kept reading records and trimming its
// former streams at every interval, for as long as the host kept it open,
// repeating its successor's work).
func TestDeposedLeaderRunsNoRetention(t *testing.T) {
	synctest.Test(t, testDeposedLeaderRunsNoRetention)
}

func testDeposedLeaderRunsNoRetention(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	cm := &requestTally{}
	p1, err := w.open("p1", func(c *Config) {
		c.Express = ClassConfig{}
		c.AbsorbInterval = time.Millisecond
		c.RetentionInterval, c.SettleInterval = -1, -1 // the test runs the pass
		cm.Store = c.Meta
		c.Meta = cm
	})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := p1.star.CreateStream(ctx, "aged", StreamOptions{Class: Standard, Star: "s1", Retention: Retention{MaxAge: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	stamp := func(seq int) int64 { return now.Add(-time.Duration(10-seq) * 20 * time.Minute).UnixMilli() }
	appendN(t, p1.star, "aged", 10, 1, stamp)
	waitAbsorbed(t, p1.star)

	// While it leads, a pass reads and trims (the test can fail: a pass
	// that makes no request at all would pass the check below vacuously).
	cm.on.Store(true)
	p1.star.runRetention(ctx, now)
	if cm.n.Load() == 0 {
		t.Fatal("a leader's retention pass made no metastore request")
	}

	rec, ver, err := chain.ReadEpoch(ctx, w.meta, "s1", Standard)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := absorb.SealCheckpoint(ctx, w.meta, "s1", Standard, "successor", rec.Epoch+1, ver); err != nil {
		t.Fatal(err)
	}
	var nl *NotLeaderError
	start := time.Now() // the bubble's clock
	for i := 0; ; i++ {
		_, err := p1.star.Append(ctx, "aged", Batch{Records: []Record{{Body: []byte(fmt.Sprint("late-", i))}}})
		if errors.As(err, &nl) {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the incumbent never noticed the seal (last: %v)", err)
		}
	}
	if !p1.star.deposed() {
		t.Fatal("deposed() is false after a NotLeaderError")
	}
	cm.n.Store(0)
	p1.star.runRetention(ctx, now.Add(2*time.Hour))
	if n := cm.n.Load(); n != 0 {
		t.Fatalf("a deposed leader's retention pass made %d metastore requests", n)
	}
}
