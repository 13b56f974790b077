package gocloud_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/flightlog/flightlog/contrib/gocloud"
	"github.com/flightlog/flightlog/objstore"
)

// Open a bucket from a go-cloud URL and use it as an objstore.Store: a
// conditional create, a ranged read, and the second create refused.
func Example() {
	ctx := context.Background()
	s, err := gocloud.Open(ctx, "mem://") // gs://bucket, azblob://container, s3://bucket?region=...
	if err != nil {
		panic(err)
	}
	defer s.Close()
	fmt.Println(s.PutIfAbsent(ctx, "chains/orders/std/1/0", []byte("flight 0")))
	body, _ := s.Get(ctx, "chains/orders/std/1/0", 7, 10) // past the end: cut short
	fmt.Printf("%q\n", body)
	err = s.PutIfAbsent(ctx, "chains/orders/std/1/0", []byte("another"))
	fmt.Println(errors.Is(err, objstore.ErrExists))
	_, err = s.Get(ctx, "chains/orders/std/1/1", 0, -1)
	fmt.Println(errors.Is(err, objstore.ErrNotFound))
	// Output:
	// <nil>
	// "0"
	// true
	// true
}
