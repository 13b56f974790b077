package sim

import (
	"context"
	"math/rand/v2"
	"runtime"

	"github.com/flightlog/flightlog/objstore"
)

// perturbedBucket shakes the scheduling of the goroutines an executor call
// starts (chain.Fence's slots and buckets, a probe's keys, a trim's
// buckets): before each call it yields the processor a few times, drawn
// from the process-wide generator, not the seed's. A core-level seed must
// replay its exact trace whatever the interleaving inside a call, so runs
// of a seed with it (CoreOptions.perturb) must hash alike, and alike to a
// run without it. It changes nothing a call returns.
type perturbedBucket struct{ objstore.Store }

func perturb() {
	for n := rand.IntN(4); n > 0; n-- {
		runtime.Gosched()
	}
}

func (b perturbedBucket) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	perturb()
	return b.Store.PutIfAbsent(ctx, key, body)
}

func (b perturbedBucket) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	perturb()
	return b.Store.Get(ctx, key, off, n)
}

func (b perturbedBucket) Delete(ctx context.Context, key string) error {
	perturb()
	return b.Store.Delete(ctx, key)
}

func (b perturbedBucket) List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error) {
	perturb()
	return b.Store.List(ctx, prefix, startAfter, limit)
}
