package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/metastore/bbolt"
)

// TestFsckTakesAPendingDeleteForNoDamage: a stream deleted whose reclaim
// is still due (its record gone, its marker under chain.DeletedPrefix and
// its refs still there, as after a crash right after DeleteStream's
// Commit) is no problem for fsck: the marker is the leader's work list,
// not damage.
func TestFsckTakesAPendingDeleteForNoDamage(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	for _, s := range []string{"keep", "gone"} {
		if code, _, errs := cli(t, "a\nb\n", "append", "--dir", dir, "--create", s); code != exitOK {
			t.Fatalf("append %s: exit %d %s", s, code, errs)
		}
	}
	ctx := context.Background()
	ms, err := bbolt.Open(filepath.Join(dir, metaFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	key := chain.StreamRecordKey("gone")
	it, err := ms.Get(ctx, key)
	if err == nil {
		var rec streamRecord
		if err = json.Unmarshal(it.Value, &rec); err == nil {
			_, err = ms.Commit(ctx, []metastore.Op{
				{Kind: metastore.OpDelete, Key: key, Expect: it.Version},
				{Kind: metastore.OpDelete, Key: chain.StreamNameKey("gone"), Expect: metastore.AnyVersion},
				{Kind: metastore.OpPut, Key: chain.DeletedKey(rec.id()), Value: it.Value, Expect: metastore.NoVersion},
			})
		}
	}
	ms.Close()
	if err != nil {
		t.Fatal(err)
	}
	code, out, errs := cli(t, "", "fsck", "--dir", dir)
	t.Logf("fsck: exit %d\n%s", code, out)
	if code != exitOK || strings.Contains(out, "PROBLEM") || !strings.Contains(out, "0 problem(s)") {
		t.Fatalf("fsck with a delete's reclaim pending: exit %d\n%s%s", code, out, errs)
	}
}
