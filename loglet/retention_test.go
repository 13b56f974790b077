package loglet

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/objstore"
)

// TestRetentionByAge: the retention pass trims a stream with MaxAge to the
// first record at or after now − MaxAge, and leaves a stream without
// retention alone.
func TestRetentionByAge(t *testing.T) {
	synctest.Test(t, testRetentionByAge)
}

func testRetentionByAge(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	p, err := w.open("a", nil)
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
	appendN(t, p.star, "kept", 10, 1, stamp)
	waitAbsorbed(t, p.star)
	p.star.runRetention(ctx, now)
	if got := trimSeqOf(t, w.meta, "aged"); got != 7 {
		t.Fatalf("trim by age at %d, want 7", got)
	}
	if got := trimSeqOf(t, w.meta, "kept"); got != 0 {
		t.Fatalf("a stream without retention was trimmed to %d", got)
	}
	wantFirst(t, firstSeqs(t, p.star, nil, "aged", AtSeq(0), 7), 7)
	// An hour later everything is older than an hour: trimmed to the tail.
	p.star.runRetention(ctx, now.Add(time.Hour))
	if got := trimSeqOf(t, w.meta, "aged"); got != 10 {
		t.Fatalf("trim by age an hour later at %d, want the tail 10", got)
	}
	// The retention survives a reopen (it is in the stream record).
	if err := p.star.Close(ctx); err != nil {
		t.Fatal(err)
	}
	p, err = w.open("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, p.star, "aged", 2, 1, func(int) int64 { return now.Add(-30 * time.Minute).UnixMilli() })
	waitAbsorbed(t, p.star)
	p.star.runRetention(ctx, now)
	if got := trimSeqOf(t, w.meta, "aged"); got != 10 {
		t.Fatalf("after a reopen, records within the hour were trimmed: at %d, want 10", got)
	}
	p.star.runRetention(ctx, now.Add(time.Hour))
	if got := trimSeqOf(t, w.meta, "aged"); got != 12 {
		t.Fatalf("after a reopen, trim by age at %d, want 12", got)
	}
}

// TestRetentionByBytes: the pass keeps the newest records holding at least
// MaxBytes (by the frames' decoded lengths), trimming whole frame runs.
func TestRetentionByBytes(t *testing.T) {
	synctest.Test(t, testRetentionByBytes)
}

func testRetentionByBytes(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	p, err := w.open("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.star.CreateStream(ctx, "big", StreamOptions{Class: Standard, Star: "s1", Retention: Retention{MaxBytes: 4500}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, err := p.star.Append(ctx, "big", Batch{Records: []Record{{Body: bytes.Repeat([]byte{'x'}, 1000)}}}); err != nil {
			t.Fatal(err)
		}
	}
	waitAbsorbed(t, p.star)
	p.star.runRetention(ctx, time.Now())
	// Five records of 1000 bytes (and a little framing each) hold 4500;
	// four do not.
	if got := trimSeqOf(t, w.meta, "big"); got != 5 {
		t.Fatalf("trim by bytes at %d, want 5", got)
	}
	res, err := p.star.Read(ctx, "big", ReadQuery{Start: AtSeq(0)})
	if err != nil || len(res.Records) != 5 || res.Records[0].Seq != 5 {
		t.Fatalf("read after trim by bytes: %d records, %v", len(res.Records), err)
	}
	// Again: nothing more to trim.
	p.star.runRetention(ctx, time.Now())
	if got := trimSeqOf(t, w.meta, "big"); got != 5 {
		t.Fatalf("a second pass moved the trim to %d", got)
	}
}

// TestRetentionIntervalPacesThePass: the leader's retention pass runs every
// Config.RetentionInterval (not before), a negative interval turns it off,
// and an interval under a millisecond is refused.
func TestRetentionIntervalPacesThePass(t *testing.T) {
	run := func(t *testing.T, every time.Duration) *rig {
		ctx := context.Background()
		// Under synctest: no precise sleepers. Settlement off: it would
		// merge the ten records into one 256 KiB-frame settled object,
		// which retention by bytes can only trim whole.
		r := newRig(t, Standard, 1, 1, func(c *Config, _ []*objstore.FaultStore) {
			c.CoarseWakeups, c.RetentionInterval, c.SettleInterval = true, every, -1
		})
		if _, err := r.star.CreateStream(ctx, "big", StreamOptions{Class: Standard, Star: "s1", Retention: Retention{MaxBytes: 4500}}); err != nil {
			t.Fatal(err)
		}
		for range 10 {
			if _, err := r.star.Append(ctx, "big", Batch{Records: []Record{{Body: bytes.Repeat([]byte{'x'}, 1000)}}}); err != nil {
				t.Fatal(err)
			}
		}
		return r
	}
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		r := run(t, 10*time.Second)
		time.Sleep(start.Add(9 * time.Second).Sub(time.Now())) // absorbed by now, the pass not yet due
		synctest.Wait()
		if got := trimSeqOf(t, r.meta, "big"); got != 0 {
			t.Fatalf("trimmed to %d before the first pass was due", got)
		}
		time.Sleep(2 * time.Second) // the bubble's clock: past the first pass's due time
		synctest.Wait()
		if got := trimSeqOf(t, r.meta, "big"); got != 5 {
			t.Fatalf("after the first pass: trim at %d, want 5", got)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		r := run(t, -1)
		time.Sleep(2 * DefaultRetentionInterval) // the bubble's clock: two passes' worth, none runs
		synctest.Wait()
		if got := trimSeqOf(t, r.meta, "big"); got != 0 {
			t.Fatalf("with the pass off, trimmed to %d", got)
		}
	})
	cfg := DefaultConfig()
	if cfg.RetentionInterval != DefaultRetentionInterval {
		t.Errorf("DefaultConfig's RetentionInterval %v, want %v", cfg.RetentionInterval, DefaultRetentionInterval)
	}
	cfg.RetentionInterval = time.Microsecond
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "RetentionInterval") {
		t.Errorf("Validate with a 1µs RetentionInterval: %v, want it refused", err)
	}
}
