package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// The quickstart on a fresh directory.
func Example() {
	dir, _ := os.MkdirTemp("", "quickstart")
	defer os.RemoveAll(dir)
	if err := run(context.Background(), dir, os.Stdout); err != nil {
		fmt.Println(err)
	}
	// Output:
	// orders (standard): appended 3 records at seq [0, 3)
	//   read 0: 2 x espresso beans
	//   read 1: 1 x grinder
	//   read 2: 3 x filter papers
	//   orders now holds 3 records
	// clicks (express): appended 3 records at seq [0, 3)
	//   read 0: /home
	//   read 1: /cart
	//   read 2: /checkout
	//   clicks now holds 3 records
}

// The public API in memory: a star over in-memory buckets and metastore
// (objstore.NewMem, metastore.NewMem), as tests and simulations use it.
func Example_inMemory() {
	ctx := context.Background()
	star, err := loglet.Open(ctx, loglet.Config{
		Star:     "demo",
		Meta:     metastore.NewMem(),
		Standard: loglet.ClassConfig{Stores: []objstore.Store{objstore.NewMem()}},
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer star.Close(context.Background())
	if _, err := star.CreateStream(ctx, "events", loglet.StreamOptions{Class: loglet.Standard}); err != nil {
		fmt.Println(err)
		return
	}
	ack, err := star.Append(ctx, "events", loglet.Batch{Records: []loglet.Record{{Body: []byte("hello")}, {Body: []byte("world")}}})
	fmt.Println("acked", ack.Start, ack.End, err)

	// A conditional append: admitted only at the expected tail.
	next := uint64(5)
	_, err = star.Append(ctx, "events", loglet.Batch{Records: []loglet.Record{{Body: []byte("!")}}, MatchSeqNum: &next})
	fmt.Println("match_seq_num 5 is not committed:", errors.Is(err, loglet.ErrNotCommitted))

	res, _ := star.Read(ctx, "events", loglet.ReadQuery{Start: loglet.AtSeq(0)})
	for _, r := range res.Records {
		fmt.Println(r.Seq, string(r.Body))
	}
	// Output:
	// acked 0 2 <nil>
	// match_seq_num 5 is not committed: true
	// 0 hello
	// 1 world
}

// A second run continues both streams.
func TestSecondRunContinues(t *testing.T) {
	dir := t.TempDir()
	var first, second strings.Builder
	if err := run(context.Background(), dir, &first); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), dir, &second)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"orders (standard): appended 3 records at seq [3, 6)", "read 5: 3 x filter papers", "orders now holds 6 records", "clicks now holds 6 records"} {
		if !strings.Contains(second.String(), want) {
			t.Errorf("second run lacks %q:\n%s", want, second.String())
		}
	}
}
