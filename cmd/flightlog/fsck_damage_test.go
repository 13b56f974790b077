package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/metastore/bbolt"
	"github.com/flightlog/flightlog/objstore/file"
)

// Damage done at rest to one copy (rewrite's mutate).
func flipByte(off func(obj []byte) int) func([]byte) []byte {
	return func(obj []byte) []byte {
		obj[off(obj)] ^= 0xff
		return obj
	}
}

var (
	flipEnvelopeByte = flipByte(func([]byte) int { return 20 })               // the slot number, under the envelope's CRC
	flipFooterByte   = flipByte(func(obj []byte) int { return len(obj) - 3 }) // the footer ends the object
	truncateCopy     = func(obj []byte) []byte { return obj[:len(obj)-5] }
	deleteCopy       = func([]byte) []byte { return nil }
)

// checkpointOf reads a chain's checkpoint from the data directory.
func checkpointOf(t *testing.T, dir string, c chain.Class) absorb.Checkpoint {
	t.Helper()
	ms, err := bbolt.Open(filepath.Join(dir, metaFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	cp, _, err := absorb.ReadCheckpoint(context.Background(), ms, defaultStarName, c)
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// object reads one bucket's copy of key (nil if missing).
func object(t *testing.T, bucketDir, key string) []byte {
	t.Helper()
	s, err := file.Open(bucketDir)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := s.Get(context.Background(), key, 0, -1)
	if err != nil {
		return nil
	}
	return obj
}

// crashed returns a data directory whose leader crashed with every flight
// released (acked) and none absorbed: each stream's records sit in the
// live epoch's slots past the checkpoint, one slot per record. The absorb's
// metastore writes are failed from the first append on, so the state does
// not depend on timing.
func crashed(t *testing.T, class loglet.Class, stream string, recs ...string) string {
	t.Helper()
	ctx := context.Background()
	dir, g, b := tempBackends(t)
	faulty := metastore.WithFaults(b.meta, 1)
	var blockAbsorb atomic.Bool
	faulty.SetHook(func(call fault.Call) fault.Fault {
		keys := call.Keys
		if blockAbsorb.Load() {
			for _, k := range keys {
				if strings.HasPrefix(k, "refs/") || strings.HasSuffix(k, "/checkpoint") || strings.HasSuffix(k, "/epoch") {
					return fault.Fault{Kind: fault.Fail}
				}
			}
		}
		return fault.Fault{}
	})
	cfg := g.starConfig(b, io.Discard)
	cfg.Meta = faulty
	star, err := loglet.Open(ctx, cfg)
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	if _, err := star.CreateStream(ctx, stream, loglet.StreamOptions{Class: class}); err != nil {
		t.Fatal(err)
	}
	blockAbsorb.Store(true)
	for _, r := range recs {
		if _, err := star.Append(ctx, stream, loglet.Batch{Records: []loglet.Record{{Body: []byte(r)}}}); err != nil {
			t.Fatal(err)
		}
	}
	faulty.SetDown(true) // the leader crashes: nothing more reaches the metastore
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	star.Close(cctx)
	cancel()
	b.Close()
	if cp := checkpointOf(t, dir, class); cp.Next != 0 || cp.Tails != "" {
		t.Fatalf("the crash left the checkpoint at %+v, want nothing absorbed", cp)
	}
	return dir
}

// TestFsckFindsEveryDamage (issue 17, items 5 and 6): each damage is a
// problem (exit 1) that names the object and says whether fsck --repair
// repairs it; fsck --repair then brings each repairable case back to exit
// 0, the repaired copy holds the same bytes as a good one, and the data
// reads back byte for byte.
func TestFsckFindsEveryDamage(t *testing.T) {
	type target struct {
		dir, bucket, key string
	}
	clicksSlot := func(t *testing.T, dir string) target {
		return target{dir, "express-b", slotOf(t, dir, "clicks")}
	}
	ordersSlot := func(t *testing.T, dir string) target {
		return target{dir, standardDir, slotOf(t, dir, "orders")}
	}
	snapshot := func(c chain.Class, bucket string) func(*testing.T, string) target {
		return func(t *testing.T, dir string) target {
			return target{dir, bucket, checkpointOf(t, dir, c).Tails}
		}
	}
	seededReads := map[string]string{"orders": "one\ntwo\nthree\n", "clicks": "x\ny\n"}
	for _, tc := range []struct {
		name       string
		setup      func(t *testing.T) string
		target     func(t *testing.T, dir string) target
		damage     func([]byte) []byte
		want       []string // in fsck's output, besides the key and the bucket
		repairable bool
		// takeover: after the repair, a takeover appends this record to
		// stream (the unabsorbed records are absorbed by it).
		takeover, stream string
		reads            map[string]string
	}{
		{name: "express-envelope-byte", setup: seeded, target: clicksSlot, damage: flipEnvelopeByte,
			want: []string{"corrupt: envelope (bytes 0..59)"}, repairable: true, reads: seededReads},
		{name: "express-footer-byte", setup: seeded, target: clicksSlot, damage: flipFooterByte,
			want: []string{"corrupt: footer"}, repairable: true, reads: seededReads},
		{name: "express-frame-byte", setup: seeded, target: clicksSlot, damage: flipFrameByte,
			want: []string{"corrupt: frame 0 (stream \"clicks\""}, repairable: true, reads: seededReads},
		{name: "express-truncated-copy", setup: seeded, target: clicksSlot, damage: truncateCopy,
			want: []string{"corrupt: truncated"}, repairable: true, reads: seededReads},
		{name: "express-missing-copy", setup: seeded, target: clicksSlot, damage: deleteCopy,
			want: []string{"express-b: missing"}, repairable: true, reads: seededReads},
		{name: "standard-snapshot-byte", setup: seeded, target: snapshot(chain.Standard, standardDir), damage: flipByte(func([]byte) int { return 3 }),
			want: []string{"tails snapshot", "no sound copy", "rebuilds it from the refs"}, repairable: true, reads: seededReads},
		{name: "express-snapshot-one-copy", setup: seeded, target: snapshot(chain.Express, "express-c"), damage: truncateCopy,
			want: []string{"tails snapshot", "corrupt: absorb: corrupt value: tails snapshot checksum mismatch", "re-copies it from express-a"}, repairable: true, reads: seededReads},
		{name: "standard-only-copy-footer-byte", setup: seeded, target: ordersSlot, damage: flipFooterByte,
			want: []string{"corrupt: footer", "not repairable: no good copy"}},
		{name: "crashed-express-unabsorbed-frame-byte", setup: func(t *testing.T) string {
			return crashed(t, loglet.Express, "clicks", "x", "y")
		}, target: func(t *testing.T, dir string) target {
			return target{dir, "express-b", chain.SlotKey(defaultStarName, chain.Express, 1, 1)}
		}, damage: flipFrameByte, want: []string{"unabsorbed, in the live epoch", "corrupt: frame 0"}, repairable: true,
			takeover: "z", stream: "clicks", reads: map[string]string{"clicks": "x\ny\nz\n"}},
		{name: "crashed-standard-unabsorbed-envelope-byte", setup: func(t *testing.T) string {
			return crashed(t, loglet.Standard, "orders", "one", "two")
		}, target: func(t *testing.T, dir string) target {
			return target{dir, standardDir, chain.SlotKey(defaultStarName, chain.Standard, 1, 1)}
		}, damage: flipEnvelopeByte, want: []string{"cannot be opened", "fence cannot decide", "not repairable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.setup(t)
			tg := tc.target(t, dir)
			if tg.key == "" {
				t.Fatal("no object to damage")
			}
			rewrite(t, filepath.Join(dir, tg.bucket), tg.key, tc.damage)
			code, out, errs := cli(t, "", "fsck", "--dir", dir)
			t.Logf("fsck: exit %d\n%s", code, out)
			if code != exitProblems || !strings.Contains(out, "PROBLEM") || !strings.Contains(out, tg.key) || !strings.Contains(out, tg.bucket) {
				t.Fatalf("fsck: exit %d, want 1 with a PROBLEM naming %s in %s\n%s%s", code, tg.key, tg.bucket, out, errs)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Fatalf("fsck output lacks %q:\n%s", w, out)
				}
			}
			if got := strings.Contains(out, "(repairable: fsck --repair"); got != tc.repairable {
				t.Fatalf("fsck says repairable=%v, want %v:\n%s", got, tc.repairable, out)
			}
			code, out, errs = cli(t, "", "fsck", "--repair", "--dir", dir)
			t.Logf("fsck --repair: exit %d\n%s", code, out)
			if !tc.repairable {
				if code != exitProblems || strings.Contains(out, "put back") && !strings.Contains(out, "0 cop(ies) put back") {
					t.Fatalf("fsck --repair of damage it cannot repair: exit %d, want 1 and nothing put back\n%s%s", code, out, errs)
				}
				if got := object(t, filepath.Join(dir, tg.bucket), tg.key); got == nil {
					t.Fatalf("fsck --repair deleted the damaged %s it could not repair", tg.key)
				}
				return
			}
			if code != exitOK || !strings.Contains(out, "repair: ") || !strings.Contains(out, "checking again after the repair") {
				t.Fatalf("fsck --repair: exit %d, want 0 after repairing\n%s%s", code, out, errs)
			}
			if code, out, errs := cli(t, "", "fsck", "--dir", dir); code != exitOK || strings.Contains(out, "PROBLEM") {
				t.Fatalf("fsck after the repair: exit %d\n%s%s", code, out, errs)
			}
			if !strings.HasPrefix(tg.key, "snapshots/") || tg.bucket != standardDir {
				// A re-copy: the same bytes as the first bucket's good copy.
				src := "express-a"
				if tg.bucket == standardDir {
					src = standardDir
				}
				if a, b := object(t, filepath.Join(dir, src), tg.key), object(t, filepath.Join(dir, tg.bucket), tg.key); a == nil || !bytes.Equal(a, b) {
					t.Fatalf("the repaired copy in %s differs from %s's (%d vs %d bytes)", tg.bucket, src, len(b), len(a))
				}
			}
			if tc.takeover != "" {
				code, out, errs := cli(t, tc.takeover, "append", tc.stream, "--dir", dir, "--takeover")
				if code != exitOK {
					t.Fatalf("append --takeover after the repair: exit %d\n%s%s", code, out, errs)
				}
			}
			for stream, want := range tc.reads {
				if code, out, errs := cli(t, "", "read", stream, "--dir", dir); code != exitOK || out != want {
					t.Fatalf("read %s after the repair: exit %d, %q, want %q\n%s", stream, code, out, want, errs)
				}
			}
		})
	}
}
