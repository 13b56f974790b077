package loglet

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/histogram"
	"github.com/flightlog/flightlog/objstore"
)

// naiveWriter is the benchmarks' strawman: one PutIfAbsent per append, to
// every bucket of the set, acked at W copies. It has no pool, no flights, no
// window and no ordered release; it keeps nothing of the write path's
// guarantees beyond "W copies before the ack" and exists only so that the
// benchmarks can quote what batching into flights buys (PUTs per GiB) and
// costs (ack latency), over the same buckets in the same run.
type naiveWriter struct {
	buckets []objstore.Store
	w       int
	codec   envelope.Codec
	writers sync.Pool // *envelope.BundleWriter

	mu      sync.Mutex
	streams map[string]*atomic.Uint64 // next sequence number per stream

	quorum     histogram.H    // start of the PUTs to the W-th copy
	stragglers sync.WaitGroup // copies past W still uploading
}

func newNaiveWriter(buckets []objstore.Store, w int, codec envelope.Codec) *naiveWriter {
	n := &naiveWriter{buckets: buckets, w: w, codec: codec, streams: map[string]*atomic.Uint64{}}
	n.writers.New = func() any { return envelope.NewBundleWriter() }
	return n
}

// naiveFuture is the outcome of one naive append.
type naiveFuture struct {
	done chan struct{}
	ack  Ack
	err  error
}

func (f *naiveFuture) Done() <-chan struct{} { return f.done }

func (f *naiveFuture) Wait(ctx context.Context) (Ack, error) {
	select {
	case <-f.done:
		return f.ack, f.err
	case <-ctx.Done():
		return Ack{}, ctx.Err()
	}
}

// submit starts one append and returns its future at once, as an append
// session does.
func (n *naiveWriter) submit(ctx context.Context, stream string, b Batch) *naiveFuture {
	f := &naiveFuture{done: make(chan struct{})}
	go func() {
		f.ack, f.err = n.append(ctx, stream, b)
		close(f.done)
	}()
	return f
}

func (n *naiveWriter) nextSeq(stream string) *atomic.Uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.streams[stream]
	if c == nil {
		c = new(atomic.Uint64)
		n.streams[stream] = c
	}
	return c
}

// append encodes b as a one-frame bundle (the same record encoding, codec
// and checksums a flight uses), writes it to every bucket under its own key
// and returns at the W-th copy.
func (n *naiveWriter) append(ctx context.Context, stream string, b Batch) (Ack, error) {
	arrival := time.Now().UnixMilli()
	size := 0
	for _, r := range b.Records {
		size += envelope.EncodedRecordSize(Record{Timestamp: arrival, Headers: r.Headers, Body: r.Body})
	}
	payload := make([]byte, 0, size)
	for _, r := range b.Records {
		if r.Timestamp == 0 {
			r.Timestamp = arrival
		}
		payload = envelope.AppendRecord(payload, r)
	}
	count := uint64(len(b.Records))
	start := n.nextSeq(stream).Add(count) - count

	w := n.writers.Get().(*envelope.BundleWriter)
	if err := w.AddFrame(stream, start, int(count), arrival, arrival, payload, n.codec); err != nil {
		w.Finish(0, 0, envelope.Nonce{}) // reset
		n.writers.Put(w)
		return Ack{}, err
	}
	obj, _ := w.Finish(1, start, envelope.NewNonce())
	n.writers.Put(w)

	key := fmt.Sprintf("naive/%s/%020d", stream, start)
	began := time.Now()
	results := make(chan error, len(n.buckets))
	n.stragglers.Add(len(n.buckets))
	for _, bk := range n.buckets {
		go func() {
			defer n.stragglers.Done()
			results <- bk.PutIfAbsent(context.WithoutCancel(ctx), key, obj)
		}()
	}
	ok, failed := 0, 0
	for ok < n.w {
		if err := <-results; err != nil {
			failed++
			if len(n.buckets)-failed < n.w {
				return Ack{}, fmt.Errorf("naive: %s at %d: %w", stream, start, err)
			}
			continue
		}
		ok++
	}
	n.quorum.RecordDuration(time.Since(began))
	return Ack{Start: start, End: start + count}, nil
}

// wait returns once every copy, stragglers included, has resolved, so that
// the buckets' counters are final.
func (n *naiveWriter) wait() { n.stragglers.Wait() }
