package loglet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/metastore/etcd"
	"github.com/flightlog/flightlog/objstore"
)

// BenchmarkAckToReaderSessionEtcd measures, against a real etcd, how long
// after its ack a record reaches a session of a Reader in "another
// process" (its own etcd client), polling (the store's Watch hidden) and
// watching, each with the default AbsorbInterval and a short one, and the
// default PollInterval (250ms). One record is appended every 5 ms; each op
// is 100 of them. Reported: p50 and p99 of ack → Recv in ms.
//
//	scripts/test.sh -run XXX -bench AckToReaderSessionEtcd -benchtime 3x -count 3 ./loglet
//
// (FLIGHTLOG_ETCD_ENDPOINTS names the cluster; scripts/test.sh starts one.)
func BenchmarkAckToReaderSessionEtcd(b *testing.B) {
	eps := os.Getenv("FLIGHTLOG_ETCD_ENDPOINTS")
	if eps == "" {
		b.Skip("FLIGHTLOG_ETCD_ENDPOINTS is not set: run it through scripts/test.sh, which starts etcd")
	}
	for _, absorb := range []time.Duration{100 * time.Millisecond, 10 * time.Millisecond} {
		for _, watch := range []bool{false, true} {
			mode := "poll"
			if watch {
				mode = "watch"
			}
			b.Run(fmt.Sprintf("absorb=%v/%s", absorb, mode), func(b *testing.B) {
				benchAckToEtcdReader(b, strings.Split(eps, ","), absorb, watch)
			})
		}
	}
}

func benchAckToEtcdReader(b *testing.B, eps []string, absorb time.Duration, watch bool) {
	var rnd [8]byte
	rand.Read(rnd[:])
	prefix := "flightlog-bench/" + hex.EncodeToString(rnd[:]) + "/"
	open := func() *etcd.Store {
		s, err := etcd.New(etcd.Config{Endpoints: eps, Prefix: prefix})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}
	leaderMeta, readerMeta := open(), open()
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		leaderMeta.Client().Delete(ctx, prefix, clientv3.WithPrefix())
	})
	bucket := objstore.WithFaults(objstore.NewMem(), 1)
	bucket.SetLatency(fault.LogNormal(5*time.Millisecond, 20*time.Millisecond), fault.Put)
	ctx := context.Background()
	s, err := Open(ctx, Config{Star: "s1", Meta: leaderMeta, CreateOnAppend: true, Logger: quietLogger(), AbsorbInterval: absorb,
		Standard: ClassConfig{Stores: []objstore.Store{bucket}, FlushDeadline: time.Millisecond}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(ctx)
	if _, err := s.Append(ctx, "a", Batch{Records: []Record{{Body: []byte("start")}}}); err != nil {
		b.Fatal(err)
	}
	var meta metastore.Store = readerMeta
	if !watch {
		meta = struct{ metastore.Store }{readerMeta} // hides Watch: the session polls
	}
	rd, err := NewReader(ReaderConfig{Meta: meta, Standard: []objstore.Store{bucket}})
	if err != nil {
		b.Fatal(err)
	}
	rs, err := rd.OpenReadSession(ctx, "a", ReadQuery{Start: AtSeq(1)})
	if err != nil {
		b.Fatal(err)
	}
	p50, p99 := ackToSession(b, s, rs, 100*b.N)
	b.ReportMetric(p50, "p50-ms")
	b.ReportMetric(p99, "p99-ms")
}
