package absorb

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/metastore"
)

// cleanChain leaves a chain at epoch 1, owned by "old" and sealed cleanly
// at slot 4 (as its Close leaves it), and returns the epoch record, its
// version, and the checkpoint as read.
func cleanChain(t *testing.T, ctx context.Context, ms metastore.Store) (chain.EpochRecord, metastore.Version, Checkpoint, metastore.Version) {
	t.Helper()
	rec, ver, err := chain.MintFirst(ctx, ms, "s", chain.Standard, chain.EpochRecord{Owner: "old", Window: 4, K: 1, W: 1, Buckets: []string{"b"}})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := InitCheckpoint(ctx, ms, "s", chain.Standard, "old", 1)
	if err != nil {
		t.Fatal(err)
	}
	if ver, err = cm.SealEpoch(ctx, rec, ver, 4); err != nil {
		t.Fatal(err)
	}
	rec, ver, err = chain.ReadEpoch(ctx, ms, "s", chain.Standard)
	if err != nil {
		t.Fatal(err)
	}
	cp, cv, err := ReadCheckpoint(ctx, ms, "s", chain.Standard)
	if err != nil {
		t.Fatal(err)
	}
	return rec, ver, cp, cv
}

func nextOf(owner string) chain.EpochRecord {
	return chain.EpochRecord{Owner: owner, Window: 4, K: 1, W: 1, Buckets: []string{"b"}, Cuts: []chain.Cut{{Epoch: 1, Slot: 4, Clean: true}}}
}

// TestSealMint: after a clean seal the seal and the mint are one Commit,
// leaving what the two-step seal and mint leave (the new epoch, the
// checkpoint sealed by the new owner for it at the position found), and a
// rival's seal or mint since the reads fails it without writing anything.
func TestSealMint(t *testing.T) {
	ctx := context.Background()

	t.Run("clean", func(t *testing.T) {
		ms := metastore.NewMem()
		rec, ver, cp, cv := cleanChain(t, ctx, ms)
		cm, got, gv, err := SealMint(ctx, ms, "s", chain.Standard, "new", rec, ver, nextOf("new"), cp, cv)
		if err != nil {
			t.Fatal(err)
		}
		if got.Epoch != 2 || got.Owner != "new" {
			t.Fatalf("minted %+v, want epoch 2 owned by new", got)
		}
		stored, sv, err := chain.ReadEpoch(ctx, ms, "s", chain.Standard)
		if err != nil || sv != gv || stored.Epoch != 2 || stored.Owner != "new" {
			t.Fatalf("epoch record %+v at %s (%v), want epoch 2 of new at %s", stored, sv, err, gv)
		}
		scp, scv, err := ReadCheckpoint(ctx, ms, "s", chain.Standard)
		if err != nil || scp.Owner != "new" || scp.OwnerEpoch != 2 || scp.Epoch != cp.Epoch || scp.Next != cp.Next || scp.Counter != cp.Counter+1 {
			t.Fatalf("checkpoint %+v (%v), want sealed by new for 2 at %d/%d", scp, err, cp.Epoch, cp.Next)
		}
		if h := cm.Held(); h.Version != scv || h.Checkpoint.OwnerEpoch != 2 {
			t.Fatalf("held %+v, want the checkpoint at %s", h, scv)
		}
		// The committer holds the seal: the new owner's rounds commit.
		if err := cm.Commit(ctx, Round{Epoch: 2, From: 0, To: 0}, nil, ""); err != nil {
			t.Fatalf("a round after the seal and mint: %v", err)
		}
	})

	t.Run("rival sealed", func(t *testing.T) {
		ms := metastore.NewMem()
		rec, ver, cp, cv := cleanChain(t, ctx, ms)
		if _, _, err := SealCheckpoint(ctx, ms, "s", chain.Standard, "rival", 2, ver); err != nil {
			t.Fatal(err)
		}
		_, _, _, err := SealMint(ctx, ms, "s", chain.Standard, "new", rec, ver, nextOf("new"), cp, cv)
		if !errors.Is(err, ErrSealRaced) {
			t.Fatalf("got %v, want ErrSealRaced", err)
		}
		if got, _, _ := chain.ReadEpoch(ctx, ms, "s", chain.Standard); got.Epoch != 1 {
			t.Fatalf("epoch %d written, want 1", got.Epoch)
		}
		if got, _, _ := ReadCheckpoint(ctx, ms, "s", chain.Standard); got.Owner != "rival" {
			t.Fatalf("checkpoint sealed by %q, want the rival's seal kept", got.Owner)
		}
	})

	t.Run("rival minted", func(t *testing.T) {
		ms := metastore.NewMem()
		rec, ver, cp, cv := cleanChain(t, ctx, ms)
		if _, _, _, err := SealMint(ctx, ms, "s", chain.Standard, "rival", rec, ver, nextOf("rival"), cp, cv); err != nil {
			t.Fatal(err)
		}
		_, _, _, err := SealMint(ctx, ms, "s", chain.Standard, "new", rec, ver, nextOf("new"), cp, cv)
		if !errors.Is(err, ErrEpochMoved) {
			t.Fatalf("got %v, want ErrEpochMoved", err)
		}
		if got, _, _ := chain.ReadEpoch(ctx, ms, "s", chain.Standard); got.Owner != "rival" {
			t.Fatalf("epoch owned by %q, want the rival's", got.Owner)
		}
	})

	t.Run("ambiguous, retried", func(t *testing.T) {
		ms := metastore.NewMem()
		rec, ver, cp, cv := cleanChain(t, ctx, ms)
		if _, _, _, err := SealMint(ctx, ms, "s", chain.Standard, "new", rec, ver, nextOf("new"), cp, cv); err != nil {
			t.Fatal(err)
		}
		// The answer was lost: the same request again finds its own write.
		cm, got, _, err := SealMint(ctx, ms, "s", chain.Standard, "new", rec, ver, nextOf("new"), cp, cv)
		if err != nil || got.Epoch != 2 || cm.Held().Checkpoint.Owner != "new" {
			t.Fatalf("retry: %+v %v, want its own epoch 2", got, err)
		}
	})

	t.Run("not sealed cleanly", func(t *testing.T) {
		ms := metastore.NewMem()
		rec, ver, err := chain.MintFirst(ctx, ms, "s", chain.Standard, chain.EpochRecord{Owner: "old", Window: 4, K: 1, W: 1, Buckets: []string{"b"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := InitCheckpoint(ctx, ms, "s", chain.Standard, "old", 1); err != nil {
			t.Fatal(err)
		}
		cp, cv, _ := ReadCheckpoint(ctx, ms, "s", chain.Standard)
		if _, _, _, err := SealMint(ctx, ms, "s", chain.Standard, "new", rec, ver, nextOf("new"), cp, cv); err == nil {
			t.Fatal("sealed and minted over an epoch without a clean seal: its cut was never fenced")
		}
		if got, _, _ := chain.ReadEpoch(ctx, ms, "s", chain.Standard); got.Epoch != 1 {
			t.Fatalf("epoch %d written, want 1", got.Epoch)
		}
	})
}

// TestCommitAtomicSealing: a clean close's last round and its seal are one
// Commit, leaving what the round and SealEpoch leave one after the other;
// an epoch record moved since it was read fails both, writing nothing.
func TestCommitAtomicSealing(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) (metastore.Store, *Committer, chain.EpochRecord, metastore.Version) {
		ms := metastore.NewMem()
		rec, ver, err := chain.MintFirst(ctx, ms, "s", chain.Standard, chain.EpochRecord{Owner: "old", Window: 4, K: 1, W: 1, Buckets: []string{"b"}})
		if err != nil {
			t.Fatal(err)
		}
		cm, err := InitCheckpoint(ctx, ms, "s", chain.Standard, "old", 1)
		if err != nil {
			t.Fatal(err)
		}
		return ms, cm, rec, ver
	}
	round := Round{Epoch: 1, From: 0, To: 3}

	t.Run("sealed", func(t *testing.T) {
		ms, cm, rec, ver := setup(t)
		chunks, sv, err := cm.CommitAtomicSealing(ctx, round, nil, "tails-1", "", nil, rec, ver, 3)
		if err != nil || chunks != nil || sv == "" {
			t.Fatalf("CommitAtomicSealing: chunks %v, sealed at %q, %v; want one Commit, sealed", chunks, sv, err)
		}
		got, gv, err := chain.ReadEpoch(ctx, ms, "s", chain.Standard)
		if err != nil || gv != sv || got.Seal == nil || got.Seal.Epoch != 1 || got.Seal.Slot != 3 {
			t.Fatalf("epoch record %+v at %s (%v), want sealed cleanly at 1/3 at %s", got, gv, err, sv)
		}
		cp, cv, err := ReadCheckpoint(ctx, ms, "s", chain.Standard)
		if err != nil || cp.Epoch != 1 || cp.Next != 3 || cp.Tails != "tails-1" || cv != cm.Held().Version {
			t.Fatalf("checkpoint %+v at %s (%v), want at 1/3 naming tails-1, held at %s", cp, cv, err, cm.Held().Version)
		}
	})

	t.Run("record moved", func(t *testing.T) {
		ms, cm, rec, ver := setup(t)
		moved := rec
		moved.Owner = "rival"
		val, _ := json.Marshal(moved)
		if _, err := ms.Put(ctx, chain.EpochKey("s", chain.Standard), val, ver); err != nil {
			t.Fatal(err)
		}
		_, sv, err := cm.CommitAtomicSealing(ctx, round, nil, "tails-1", "", nil, rec, ver, 3)
		if err == nil || sv != "" {
			t.Fatalf("CommitAtomicSealing over a moved record: sealed at %q, %v; want a failure", sv, err)
		}
		cp, _, err := ReadCheckpoint(ctx, ms, "s", chain.Standard)
		if err != nil || cp.Next != 0 || cp.Tails != "" {
			t.Fatalf("checkpoint %+v (%v), want untouched", cp, err)
		}
		got, _, err := chain.ReadEpoch(ctx, ms, "s", chain.Standard)
		if err != nil || got.Seal != nil || got.Owner != "rival" {
			t.Fatalf("epoch record %+v (%v), want the rival's, unsealed", got, err)
		}
	})
}
