package metastore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/flightlog/flightlog/metastore"
)

// increment adds one to the decimal counter at key with a compare-and-swap
// loop: read the value and its version, write the successor conditional on
// that version, and start over if another writer got there first.
func increment(ctx context.Context, s metastore.Store, key string) (int, error) {
	for {
		n, expect := 0, metastore.NoVersion // absent: create it
		it, err := s.Get(ctx, key)
		switch {
		case err == nil:
			if n, err = strconv.Atoi(string(it.Value)); err != nil {
				return 0, err
			}
			expect = it.Version
		case !errors.Is(err, metastore.ErrNotFound):
			return 0, err
		}
		_, err = s.Put(ctx, key, []byte(strconv.Itoa(n+1)), expect)
		if errors.Is(err, metastore.ErrConflict) {
			continue // lost the race: re-read
		}
		if err != nil {
			return 0, err
		}
		return n + 1, nil
	}
}

func ExampleMem() {
	ctx := context.Background()
	s := metastore.NewMem()

	for range 3 {
		if _, err := increment(ctx, s, "counters/flights"); err != nil {
			fmt.Println(err)
			return
		}
	}
	seen, _ := s.Get(ctx, "counters/flights")
	fmt.Println("read:", string(seen.Value))

	// Another writer increments; a CAS holding the version read before
	// that loses and writes nothing.
	n, _ := increment(ctx, s, "counters/flights")
	_, err := s.Put(ctx, "counters/flights", []byte("100"), seen.Version)
	fmt.Println("stale CAS conflicts:", errors.Is(err, metastore.ErrConflict))
	fmt.Println("value:", n)

	c := s.Counters()
	fmt.Printf("gets=%d puts=%d conflicts=%d\n", c.Gets, c.Puts, c.Conflicts)
	// Output:
	// read: 3
	// stale CAS conflicts: true
	// value: 4
	// gets=5 puts=5 conflicts=1
}
