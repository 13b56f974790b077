package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore/bbolt"
	"github.com/flightlog/flightlog/objstore/file"
)

// settledDir returns a data directory holding stream "orders" (Standard)
// and "clicks" (Express), 40 records each, written by a leader with
// settlement on, waited on until both chains' trim cursors reach their
// checkpoints, and cleanly closed. want holds each stream's bodies, one a
// line, as `flightlog read` prints them.
func settledDir(t *testing.T) (dir string, want map[string]string) {
	t.Helper()
	ctx := context.Background()
	dir, g, b := tempBackends(t)
	defer b.Close()
	want = map[string]string{}
	// The stars run in a synctest bubble, for waitSettledCLI; the backends
	// (and the directory) outlive it.
	synctest.Test(t, func(t *testing.T) { writeSettled(ctx, t, g, b, want) })
	return dir, want
}

// writeSettled is settledDir's writing, in a synctest bubble.
func writeSettled(ctx context.Context, t *testing.T, g *globalOpts, b *backends, want map[string]string) {
	// Two sessions, so the trim cursor passes a whole epoch and its cut.
	for session := 0; session < 2; session++ {
		star, err := g.openStarAs(ctx, b, io.Discard, false, func(c *loglet.Config) {
			c.AbsorbInterval = 2 * time.Millisecond
			c.SettleInterval = 5 * time.Millisecond
			c.Standard.FlushDeadline = time.Millisecond
			c.Express.FlushDeadline = time.Millisecond
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []struct {
			name  string
			class loglet.Class
		}{{"orders", loglet.Standard}, {"clicks", loglet.Express}} {
			if session == 0 {
				if _, err := star.CreateStream(ctx, s.name, loglet.StreamOptions{Class: s.class}); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < 20; i++ {
				body := fmt.Sprintf("%s-%d-%d-%s", s.name, session, i, strings.Repeat("x", i))
				if _, err := star.Append(ctx, s.name, loglet.Batch{Records: []loglet.Record{{Body: []byte(body)}}}); err != nil {
					t.Fatal(err)
				}
				want[s.name] += body + "\n"
			}
		}
		waitSettledCLI(t, star)
		if err := star.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// waitSettledCLI waits, in a synctest bubble (see quiesceUntil), until
// both chains' trim cursors reach their release points: every released
// flight of this epoch (and so every one before it) is absorbed, settled
// and trimmed. Every absorbed round settled is not enough: the last acked
// flight may not be absorbed yet, and its ref then still points into the
// chain.
func waitSettledCLI(t *testing.T, star *loglet.Star) {
	t.Helper()
	settled := func() bool {
		st := star.Stats()
		done := st.Standard != nil && st.Express != nil
		for _, cs := range []*loglet.ClassStats{st.Standard, st.Express} {
			if cs != nil && (cs.Settle.UnsettledRounds > 0 || cs.Settle.Objects == 0 ||
				cs.Settle.TrimEpoch < cs.Epoch || cs.Settle.TrimNext < cs.ReleasePoint) {
				done = false
			}
		}
		return done
	}
	if !quiesceUntil(30*time.Second, 2*time.Millisecond, settled) {
		st := star.Stats()
		t.Fatalf("settlement did not catch up: standard %+v express %+v", st.Standard.Settle, st.Express.Settle)
	}
}

// quiesceUntil reports whether cond held within bound of the synctest
// bubble's clock, checked each time every goroutine of the bubble is
// blocked (synctest.Wait), with step of that clock between checks. The
// time is fake: neither the check nor the bound depends on the machine's
// speed. Outside a bubble it panics (synctest.Wait does).
func quiesceUntil(bound, step time.Duration, cond func() bool) bool {
	start := time.Now()
	for synctest.Wait(); !cond(); synctest.Wait() {
		if time.Since(start) >= bound {
			return false
		}
		time.Sleep(step) // the bubble's clock: not a wait on the wall's
	}
	return true
}

// settledKeys returns the settled objects stream's refs point at, in
// order, and checks every ref is settled.
func settledKeys(t *testing.T, dir, stream string) []string {
	t.Helper()
	ms, err := bbolt.Open(filepath.Join(dir, metaFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	items, err := ms.Scan(context.Background(), "refs/"+chain.StreamKey(stream)+"/", "", 0)
	if err != nil || len(items) == 0 {
		t.Fatalf("refs of %s: %v %v", stream, items, err)
	}
	var keys []string
	for _, it := range items {
		ref, err := absorb.DecodeRef(it.Value)
		if err != nil {
			t.Fatal(err)
		}
		if !ref.Settled() {
			t.Fatalf("ref %s of %s is not settled: %+v", it.Key, stream, ref)
		}
		for _, e := range ref.Extents {
			if len(keys) == 0 || keys[len(keys)-1] != e.Key {
				keys = append(keys, e.Key)
			}
		}
	}
	return keys
}

// TestFsckSettledStar: fsck and walk of a star whose slots settlement
// moved into settled objects and deleted find no problem, and each stream
// reads back.
func TestFsckSettledStar(t *testing.T) {
	dir, want := settledDir(t)
	for _, s := range []string{"orders", "clicks"} {
		settledKeys(t, dir, s)
	}
	code, out, errs := cli(t, "", "fsck", "--dir", dir)
	t.Logf("fsck: exit %d\n%s", code, out)
	if code != exitOK || strings.Contains(out, "PROBLEM") || !strings.Contains(out, "0 problem(s)") {
		t.Fatalf("fsck of a settled star: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = cli(t, "", "walk", "--dir", dir, "--slots")
	t.Logf("walk: exit %d\n%s", code, out)
	if code != exitOK || strings.Contains(out, "PROBLEM") || !strings.Contains(out, "trim cursor: settled below") {
		t.Fatalf("walk of a settled star: exit %d\n%s%s", code, out, errs)
	}
	for stream, w := range want {
		if code, out, errs := cli(t, "", "read", stream, "--dir", dir); code != exitOK || out != w {
			t.Fatalf("read %s: exit %d, %q, want %q\n%s", stream, code, out, w, errs)
		}
	}

	// A pass that died after moving the cursor, before its deletes: the
	// slots in [Deleted, At) are partly gone, which is no problem.
	ms, err := bbolt.Open(filepath.Join(dir, metaFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	cur, ver, err := chain.ReadTrimCursor(context.Background(), ms, defaultStarName, chain.Express)
	if err == nil {
		cur.Deleted = chain.Start()
		_, err = ms.Put(context.Background(), chain.TrimKey(defaultStarName, chain.Express), cur.Encode(), ver)
	}
	ms.Close()
	if err != nil {
		t.Fatal(err)
	}
	code, out, errs = cli(t, "", "walk", "--dir", dir)
	t.Logf("walk, deletes under way: exit %d\n%s", code, out)
	if code != exitOK || strings.Contains(out, "PROBLEM") || !strings.Contains(out, "settled, trim's deletes under way") {
		t.Fatalf("walk with deletes under way: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := cli(t, "", "fsck", "--dir", dir); code != exitOK {
		t.Fatalf("fsck with deletes under way: exit %d\n%s%s", code, out, errs)
	}
}

// TestFsckSettledDamage: a flipped byte in a settled object, or a settled
// object deleted, is a problem naming the object (fsck --repair says it
// cannot repair it: the Standard set holds one copy), and a settled object
// no ref points at is a note.
func TestFsckSettledDamage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream string
		damage func([]byte) []byte
		want   []string
	}{
		{"flipped-frame-byte", "orders", flipFrameByte, []string{"corrupt: frame 0 (records", "not repairable: no good copy"}},
		{"flipped-footer-byte", "clicks", flipFooterByte, []string{"corrupt: footer", "not repairable: no good copy"}},
		{"deleted", "clicks", deleteCopy, []string{standardDir + ": missing", "not repairable: no good copy"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, _ := settledDir(t)
			keys := settledKeys(t, dir, tc.stream)
			key := keys[len(keys)/2]
			rewrite(t, filepath.Join(dir, standardDir), key, tc.damage)
			code, out, errs := cli(t, "", "fsck", "--dir", dir)
			t.Logf("fsck: exit %d\n%s", code, out)
			if code != exitProblems || !strings.Contains(out, "PROBLEM: settled object "+key) || !strings.Contains(out, "no copy of settled object "+key) {
				t.Fatalf("fsck: exit %d, want 1 with a PROBLEM naming %s\n%s%s", code, key, out, errs)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Fatalf("fsck output lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, "(repairable") {
				t.Fatalf("fsck calls a lost settled object repairable:\n%s", out)
			}
			code, out, errs = cli(t, "", "fsck", "--repair", "--dir", dir)
			t.Logf("fsck --repair: exit %d\n%s", code, out)
			if code != exitProblems || !strings.Contains(out, "repair: settled object "+key+": not repaired") || !strings.Contains(out, "0 cop(ies) put back") {
				t.Fatalf("fsck --repair: exit %d, want 1 and %s not repaired\n%s%s", code, key, out, errs)
			}
		})
	}
	t.Run("orphan-is-a-note", func(t *testing.T) {
		dir, _ := settledDir(t)
		key := settledKeys(t, dir, "orders")[0]
		orphan := strings.Replace(key, "settled/", "settled/zz-", 1)
		s, err := file.Open(filepath.Join(dir, standardDir))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.PutIfAbsent(context.Background(), orphan, object(t, filepath.Join(dir, standardDir), key)); err != nil {
			t.Fatal(err)
		}
		code, out, errs := cli(t, "", "fsck", "--dir", dir)
		t.Logf("fsck: exit %d\n%s", code, out)
		if code != exitOK || strings.Contains(out, "PROBLEM") || !strings.Contains(out, "note: settled object "+orphan+" in bucket standard: no ref points at it") {
			t.Fatalf("fsck with an orphan: exit %d, want 0 and a note naming %s\n%s%s", code, orphan, out, errs)
		}
		if code, out, _ := cli(t, "", "fsck", "-q", "--dir", dir); code != exitOK || strings.Contains(out, orphan) {
			t.Fatalf("fsck -q: exit %d, printed the orphan note\n%s", code, out)
		}
		// (Issue "A stream's life without races", item 9: --repair left
		// "reclaimable" orphans in place.)
		code, out, errs = cli(t, "", "fsck", "--repair", "--dir", dir)
		t.Logf("fsck --repair: exit %d\n%s", code, out)
		if code != exitOK || !strings.Contains(out, "repair: settled object "+orphan+" in bucket standard: reclaimed") {
			t.Fatalf("fsck --repair with an orphan: exit %d, want 0 and %s reclaimed\n%s%s", code, orphan, out, errs)
		}
		if _, err := s.Get(context.Background(), orphan, 0, -1); err == nil {
			t.Fatalf("the orphan %s is still in the bucket after fsck --repair", orphan)
		}
		for _, k := range settledKeys(t, dir, "orders") {
			if _, err := s.Get(context.Background(), k, 0, -1); err != nil {
				t.Fatalf("fsck --repair deleted %s, which a ref points at: %v", k, err)
			}
		}
	})
}

// TestFsckSettlementCannotProceed (issue "A stream's life without races",
// item 3): a star opened three times with settlement off, whose epoch
// record lost the cut of epoch 1 (as the old pruning left it) while the
// trim cursor is still at the chain's start. fsck says the next settle
// pass re-derives the cut; and once the slot at the cut holds an object no
// fence can decide, that settlement of the chain cannot proceed.
func TestFsckSettlementCannotProceed(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	for i, args := range [][]string{{"--create", "s"}, {"s"}, {"s"}} {
		if code, _, errs := cli(t, fmt.Sprintf("r%d\n", i), append([]string{"append", "--dir", dir}, args...)...); code != exitOK {
			t.Fatalf("append %d: exit %d %s", i, code, errs)
		}
	}
	first := slotOf(t, dir, "s") // epoch 1's first slot
	star, class, epoch, slot, ok := chain.ParseSlotKey(first)
	if !ok || epoch != 1 || slot != 0 {
		t.Fatalf("the first ref points at %s", first)
	}
	ms, err := bbolt.Open(filepath.Join(dir, metaFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	it, err := ms.Get(ctx, chain.EpochKey(star, class))
	if err != nil {
		t.Fatal(err)
	}
	var rec chain.EpochRecord
	if err := json.Unmarshal(it.Value, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Epoch != 3 {
		t.Fatalf("epoch record %+v, want epoch 3", rec)
	}
	var kept []chain.Cut
	for _, c := range rec.Cuts {
		if c.Epoch >= 2 { // the old floor: the checkpoint's epoch
			kept = append(kept, c)
		}
	}
	rec.Cuts = kept
	val, _ := json.Marshal(rec)
	if _, err := ms.Put(ctx, chain.EpochKey(star, class), val, it.Version); err != nil {
		t.Fatal(err)
	}
	ms.Close()
	bucket, err := file.Open(filepath.Join(dir, standardDir))
	if err != nil {
		t.Fatal(err)
	}
	cut := uint64(0) // epoch 1 wrote slots [0, cut), sealed cleanly at cut
	for ; ; cut++ {
		if _, err := bucket.Get(ctx, chain.SlotKey(star, class, 1, cut), 0, -1); err != nil {
			break
		}
	}
	code, out, errs := cli(t, "", "fsck", "--dir", dir)
	want := fmt.Sprintf("the cut of epoch 1 is recorded nowhere (neither the epoch record nor the trim cursor); the next settle pass re-derives it by fencing slot %d", cut)
	if code != exitOK || !strings.Contains(out, want) {
		t.Fatalf("fsck of a chain whose cut of epoch 1 is lost: exit %d, want %d and %q\n%s%s", code, exitOK, want, out, errs)
	}
	// A torn object where the seal left the slot empty: a fence can place
	// no poison there, nor count it a flight.
	if err := bucket.PutIfAbsent(ctx, chain.SlotKey(star, class, 1, cut), []byte("torn")); err != nil {
		t.Fatal(err)
	}
	code, out, errs = cli(t, "", "fsck", "--dir", dir)
	want = fmt.Sprintf("settlement cannot proceed: the cut of epoch 1 is recorded nowhere (neither the epoch record nor the trim cursor), and the fence that would re-derive it cannot decide slot %d", cut)
	if code != exitProblems || !strings.Contains(out, want) {
		t.Fatalf("fsck of a chain whose settlement cannot proceed: exit %d, want %d and %q\n%s%s", code, exitProblems, want, out, errs)
	}
}
