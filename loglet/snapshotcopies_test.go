package loglet

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// slowSnapshots is a bucket whose tails-snapshot PUTs do not return until
// their context ends and the test lets them go: a copy past the W-th
// still being written.
type slowSnapshots struct {
	objstore.Store
	finish chan struct{}

	mu      sync.Mutex
	blocked int // snapshot PUTs begun and not returned
}

func (s *slowSnapshots) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	if !strings.HasPrefix(key, "snapshots/") {
		return s.Store.PutIfAbsent(ctx, key, body)
	}
	s.mu.Lock()
	s.blocked++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.blocked--
		s.mu.Unlock()
	}()
	<-ctx.Done()
	<-s.finish
	return ctx.Err()
}

func (s *slowSnapshots) inFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.blocked
}

// Close returns only once every copy of every tails snapshot has returned
// from its PUT, those past the W-th included (absorb.PutSnapshot returns
// at W and leaves the rest writing). A copy still writing after Close let a
// test's temporary directory be removed under it ("directory not empty":
// the quickstart's test, once in CI).
func TestCloseWaitsForEverySnapshotCopy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		slow := &slowSnapshots{Store: objstore.NewMem(), finish: make(chan struct{})}
		cfg := DefaultConfig()
		cfg.Star, cfg.Owner, cfg.Meta = "s", "p1", metastore.NewMem()
		cfg.Standard.Stores = nil
		cfg.Express.Stores = []objstore.Store{objstore.NewMem(), objstore.NewMem(), slow}
		s, err := Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateStream(ctx, "e", StreamOptions{Class: Express}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(ctx, "e", Batch{Records: []Record{{Body: []byte("x")}}}); err != nil {
			t.Fatal(err)
		}
		for i := 0; slow.inFlight() == 0; i++ {
			if i == 600 {
				t.Fatal("no tails snapshot was written in 10 minutes")
			}
			time.Sleep(time.Second) // the bubble's clock: an absorb round runs
		}
		closed := make(chan error, 1)
		go func() { closed <- s.Close(ctx) }()
		synctest.Wait() // everything blocked: the slow copies wait for finish
		select {
		case err := <-closed:
			t.Fatalf("Close returned (%v) with %d snapshot copies still being written", err, slow.inFlight())
		default:
		}
		close(slow.finish)
		if err := <-closed; err != nil {
			t.Fatalf("Close: %v", err)
		}
		if n := slow.inFlight(); n != 0 {
			t.Fatalf("%d snapshot copies still being written after Close", n)
		}
	})
}
