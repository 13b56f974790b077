package etcd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/metastore/etcd"
)

// envInt reads a positive integer from the environment (0 if unset).
func envInt(b *testing.B, name string) int {
	v := os.Getenv(name)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// benchSlots returns the two slots of one round in which n streams (names
// of 20 bytes) appended: every stream in the first, every other one in the
// second too, so refs have one or two extents. Each stream's frames continue
// its tail.
func benchSlots(n int, slot uint64, tails map[string]absorb.StreamTail) []absorb.Slot {
	sl := []absorb.Slot{
		{Epoch: 1, Slot: slot, Key: chain.SlotKey("bench", chain.Standard, 1, slot)},
		{Epoch: 1, Slot: slot + 1, Key: chain.SlotKey("bench", chain.Standard, 1, slot+1)},
	}
	off := [2]uint64{60, 60}
	ts := time.Now().UnixMilli()
	for i := range n {
		name := fmt.Sprintf("orders/eu-west/%05d", i)
		seq := tails[name].Next
		for j := range 2 {
			if j == 1 && i%2 == 0 {
				continue
			}
			sl[j].Frames = append(sl[j].Frames, envelope.FrameInfo{Stream: name, FirstSeq: seq, Count: 10, Offset: off[j], Length: 2345, RawLength: 8192,
				Codec: envelope.CodecZstd, CRC: 0x9e3779b9 ^ uint32(i), MinTimestamp: ts, MaxTimestamp: ts + 99})
			off[j] += 2345
			seq += 10
		}
	}
	return sl
}

// BenchmarkAbsorbRound measures absorb rounds (absorb.Committer.Commit)
// against the real etcd at FLIGHTLOG_ETCD_ENDPOINTS: one span ref per
// active stream (one or two extents, 20-byte names, about 700 bytes as
// metastore.OpBytes counts them) plus the checkpoint. It reports the
// metastore requests per round, the round's size, and its latency (ns/op
// is the mean; p50-ms and p99-ms). The store is configured with the
// server's flags from FLIGHTLOG_ETCD_MAX_TXN_OPS and
// FLIGHTLOG_ETCD_MAX_REQUEST_BYTES (unset: etcd's defaults, 128 and
// 1.5 MiB). For example, against an etcd started with
// --max-txn-ops 10000 --max-request-bytes 10485760:
//
//	FLIGHTLOG_ETCD_ENDPOINTS=http://127.0.0.1:23791 \
//	FLIGHTLOG_ETCD_MAX_TXN_OPS=10000 FLIGHTLOG_ETCD_MAX_REQUEST_BYTES=10485760 \
//	go test -run XXX -bench AbsorbRound -benchtime 20x ./metastore/etcd
func BenchmarkAbsorbRound(b *testing.B) {
	eps := endpoints(b)
	maxOps, maxBytes := envInt(b, "FLIGHTLOG_ETCD_MAX_TXN_OPS"), envInt(b, "FLIGHTLOG_ETCD_MAX_REQUEST_BYTES")
	for _, n := range []int{1, 128, 1000, 10000} {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
			ctx := context.Background()
			s := open(b, etcd.Config{Endpoints: eps, Prefix: randomPrefix(), MaxCommitOps: maxOps, MaxRequestBytes: maxBytes})
			wipe := func(prefix string) {
				if _, err := s.Client().Delete(ctx, s.Prefix()+prefix, clientv3.WithPrefix()); err != nil {
					b.Fatalf("delete prefix %s: %v", s.Prefix()+prefix, err)
				}
			}
			b.Cleanup(func() { wipe("") })
			cm, err := absorb.InitCheckpoint(ctx, s, "bench", chain.Standard, "me", 1)
			if err != nil {
				b.Fatal(err)
			}
			tails := map[string]absorb.StreamTail{}
			var lat []time.Duration
			var reqs uint64
			var size int
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				slot := uint64(2 * i)
				refs, err := absorb.Plan("standard", fmt.Sprintf("me/1/%d", slot), benchSlots(n, slot, tails), tails)
				if err != nil {
					b.Fatal(err)
				}
				round := absorb.Round{Epoch: 1, From: slot, To: slot + 2}
				size = 0
				for _, r := range refs {
					v, _ := json.Marshal(&r)
					size += metastore.OpBytes(s, metastore.Op{Kind: metastore.OpPut, Key: r.Key(), Value: v})
				}
				if i%8 == 0 {
					wipe("refs/") // keep the keyspace to a few rounds' refs
				}
				before := cm.Requests
				b.StartTimer()
				start := time.Now()
				if err := cm.Commit(ctx, round, refs, absorb.TailsKey("bench", chain.Standard, 1, slot+2, 1)); err != nil {
					b.Fatalf("round %d of %d refs: %v", i, len(refs), err)
				}
				lat = append(lat, time.Since(start))
				reqs += cm.Requests - before
			}
			b.StopTimer()
			slices.Sort(lat)
			ms := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / 1e6 }
			b.ReportMetric(float64(reqs)/float64(b.N), "requests/round")
			b.ReportMetric(float64(size)/1024, "KiB/round")
			b.ReportMetric(ms(0.5), "p50-ms")
			b.ReportMetric(ms(0.99), "p99-ms")
		})
	}
}
