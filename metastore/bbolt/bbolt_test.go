package bbolt_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/metastore/bbolt"
	"github.com/flightlog/flightlog/metastore/metastoretest"
)

func open(t testing.TB, path string, opts *bbolt.Options) *bbolt.Store {
	t.Helper()
	s, err := bbolt.Open(path, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func harness() metastoretest.Harness {
	return metastoretest.Harness{
		New: func(t testing.TB) metastore.Store {
			return open(t, filepath.Join(t.TempDir(), "meta.db"), nil)
		},
		Reopen: func(t testing.TB, s metastore.Store) metastore.Store {
			b := s.(*bbolt.Store)
			if err := b.Close(); err != nil {
				t.Fatalf("Close before reopen: %v", err)
			}
			return open(t, b.Path(), nil)
		},
		MaxValueLen: bbolt.DefaultMaxValueLen,
	}
}

func TestConformance(t *testing.T) {
	metastoretest.Run(t, harness())
}

func BenchmarkBbolt(b *testing.B) {
	metastoretest.RunBenchmarks(b, harness())
}

func TestSecondOpenFailsWithInUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meta.db")
	first := open(t, path, nil)
	start := time.Now()
	_, err := bbolt.Open(path, &bbolt.Options{LockTimeout: 100 * time.Millisecond})
	if err == nil {
		t.Fatal("a second Open of a file already open succeeded")
	}
	if !errors.Is(err, bbolt.ErrInUse) || !errors.Is(err, metastore.ErrUnavailable) {
		t.Fatalf("second Open: %v, want ErrInUse and ErrUnavailable", err)
	}
	if want := "metastore/bbolt: " + path + " is in use by another process"; !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("second Open error %q does not start with %q", err, want)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("second Open took %v with a 100ms lock timeout", d)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	open(t, path, &bbolt.Options{LockTimeout: 100 * time.Millisecond}) // the lock is free again
}

func TestClosedStoreIsUnavailable(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "meta.db"), nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	ctx := t.Context()
	_, err := s.Put(ctx, "k", nil, metastore.NoVersion)
	if !errors.Is(err, metastore.ErrUnavailable) {
		t.Fatalf("Put after Close: %v, want ErrUnavailable", err)
	}
	if _, err := s.Get(ctx, "k"); !errors.Is(err, metastore.ErrUnavailable) {
		t.Fatalf("Get after Close: %v, want ErrUnavailable", err)
	}
	if _, err := s.Scan(ctx, "", "", 0); !errors.Is(err, metastore.ErrUnavailable) {
		t.Fatalf("Scan after Close: %v, want ErrUnavailable", err)
	}
}

func TestOptions(t *testing.T) {
	for _, o := range []bbolt.Options{
		{LockTimeout: -time.Second},
		{MaxValueLen: -1},
		{MaxValueLen: bbolt.MaxValueLenLimit + 1},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", o)
		}
		if _, err := bbolt.Open(filepath.Join(t.TempDir(), "x.db"), &o); err == nil {
			t.Errorf("Open with %+v succeeded", o)
		}
	}
	s := open(t, filepath.Join(t.TempDir(), "meta.db"), nil)
	if got := s.MaxValueLen(); got != bbolt.DefaultMaxValueLen {
		t.Fatalf("default MaxValueLen = %d", got)
	}
}

func TestConfiguredValueLimit(t *testing.T) {
	ctx := t.Context()
	s := open(t, filepath.Join(t.TempDir(), "meta.db"), &bbolt.Options{MaxValueLen: 4096})
	if _, err := s.Put(ctx, "max", make([]byte, 4096), metastore.NoVersion); err != nil {
		t.Fatalf("Put of 4096 bytes with MaxValueLen 4096: %v", err)
	}
	_, err := s.Put(ctx, "over", make([]byte, 4097), metastore.NoVersion)
	if !errors.Is(err, metastore.ErrTooLarge) {
		t.Fatalf("Put of 4097 bytes with MaxValueLen 4096: %v, want ErrTooLarge", err)
	}
	_, err = s.Commit(ctx, []metastore.Op{{Kind: metastore.OpPut, Key: "over", Value: make([]byte, 4097)}})
	if !errors.Is(err, metastore.ErrTooLarge) {
		t.Fatalf("Commit of 4097 bytes with MaxValueLen 4096: %v, want ErrTooLarge", err)
	}
	if _, err := s.Get(ctx, "over"); !errors.Is(err, metastore.ErrNotFound) {
		t.Fatalf("a value over the limit was stored: %v", err)
	}
}

func TestForeignFileIsCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "foreign.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket([]byte("someone-else"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if s, err := bbolt.Open(path, nil); !errors.Is(err, bbolt.ErrCorrupt) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Open of a foreign bbolt file: %v, want ErrCorrupt", err)
	}
}

func TestShortEntryIsCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meta.db")
	s := open(t, path, nil)
	if _, err := s.Put(t.Context(), "k", []byte("v"), metastore.NoVersion); err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("kv")).Put([]byte("k"), []byte{1, 2, 3})
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s = open(t, path, nil)
	_, err = s.Get(t.Context(), "k")
	if !errors.Is(err, bbolt.ErrCorrupt) || errors.Is(err, metastore.ErrNotFound) {
		t.Fatalf("Get of a 3-byte entry: %v, want ErrCorrupt", err)
	}
	_, err = s.Put(t.Context(), "k", nil, metastore.AnyVersion)
	if err != nil {
		t.Fatalf("an unconditional Put over a corrupt entry: %v", err)
	}
}
