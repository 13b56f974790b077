package fleethttp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/flightlog/flightlog/fleet"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore/etcd"
	"github.com/flightlog/flightlog/objstore"
)

func etcdEndpoints(t *testing.T) []string {
	eps := os.Getenv("FLIGHTLOG_ETCD_ENDPOINTS")
	if eps == "" {
		msg := "FLIGHTLOG_ETCD_ENDPOINTS is not set: run ./scripts/test.sh, which starts etcd on loopback and sets it"
		if os.Getenv("FLIGHTLOG_REQUIRE_SERVERS") == "1" {
			t.Fatal(msg + " (FLIGHTLOG_REQUIRE_SERVERS=1)")
		}
		t.Skip(msg)
	}
	return strings.Split(eps, ",")
}

// Members that joined a real fleet (goroutines, one etcd, shared in-memory
// buckets) serve the transport through FromNode: appends through every
// member, while a drain moves stars from one member to the others, are
// all acked once and read back in order.
func TestFleetNodesOnEtcd(t *testing.T) {
	eps := etcdEndpoints(t)
	var rnd [6]byte
	rand.Read(rnd[:])
	prefix := "flightlog-test/fleethttp-" + hex.EncodeToString(rnd[:]) + "/"
	newClient := func() *clientv3.Client {
		cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	admin := newClient()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		admin.Delete(ctx, prefix, clientv3.WithPrefix())
	})
	meta, err := etcd.New(etcd.Config{Client: admin, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { meta.Close() })
	var stars []string
	for i := range 12 {
		stars = append(stars, fmt.Sprintf("s%02d", i))
	}
	buckets := []objstore.Store{objstore.NewMem()}
	quiet := slog.New(slog.DiscardHandler)
	var addrs []string
	nodes := map[string]*fleet.Node{}
	for _, name := range []string{"a", "b", "c"} {
		var h atomic.Pointer[Handler]
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.Load().ServeHTTP(w, r)
		}))
		addr := "http://" + srv.Listener.Addr().String()
		cli := newClient()
		m, err := etcd.New(etcd.Config{Client: cli, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		n, err := fleet.Join(t.Context(), cli, fleet.Member{Name: name, Addr: addr}, fleet.Config{
			Prefix: prefix, Stars: stars, Meta: m, TTL: 2 * time.Second, Logger: quiet,
			OpenStar: func(ctx context.Context, star string) (loglet.Config, error) {
				return loglet.Config{Meta: m, Standard: loglet.ClassConfig{Stores: buckets, FlushDeadline: time.Millisecond},
					CreateOnAppend: true, PreflightTimeout: -1, Logger: quiet}, nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		h.Store(NewHandler(FromNode(n), Config{Logger: quiet}))
		srv.Start()
		t.Cleanup(func() {
			n.Close(context.Background())
			srv.Close()
			m.Close()
		})
		nodes[name] = n
		addrs = append(addrs, addr)
	}
	c, err := NewClient(nil, addrs...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	streams := []string{"orders", "payments", "audit", "clicks", "mail", "jobs", "logs", "users"}
	acked := map[string]int{}
	var lat []time.Duration // of each acked append, retries included
	appendAll := func(round int) {
		t.Helper()
		for _, s := range streams {
			b := loglet.Batch{Records: []loglet.Record{{Body: fmt.Appendf(nil, "%s/%d", s, round)}},
				Producer: loglet.ProducerID{ID: "w-" + s, Seq: uint64(round)}}
			start := time.Now()
			for try := 0; ; try++ {
				_, err := c.Append(ctx, s, b)
				if err == nil {
					lat = append(lat, time.Since(start))
					break
				}
				if try == 50 || !errors.Is(err, loglet.ErrNotCommitted) && !errors.Is(err, loglet.ErrOutcomeUnknown) {
					t.Fatalf("append %s round %d (try %d): %v", s, round, try, err)
				}
			}
			acked[s]++
		}
	}
	// The first appends wait (in the handler) until the stars are led.
	for round := range 3 {
		appendAll(round)
	}
	// Every star led by its placed member before the drain.
	router, err := fleet.NewRouter(ctx, admin, fleet.Config{Prefix: prefix, Stars: stars, Meta: meta})
	if err != nil {
		t.Fatal(err)
	}
	defer router.Close()
	settled := func() bool {
		owners := router.Placement()
		for _, s := range stars {
			ls := router.Leads(s)
			if len(ls) != 1 || ls[0].Member.Name != owners[s] {
				return false
			}
		}
		return len(router.Members()) == 3
	}
	deadline := time.After(time.Minute) // ends a hang only
	for {
		changed := router.Changed()
		if settled() {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("stars not all led after a minute: %v", router.Placement())
		}
	}
	before := len(lat)
	// A drain moves the busiest member's stars to the others by clean
	// handoffs while the appends go on: the handler routes again on each
	// move.
	drained := "a"
	count := map[string]int{}
	for _, m := range router.Placement() {
		count[m]++
	}
	for name := range nodes {
		if count[name] > count[drained] {
			drained = name
		}
	}
	if err := fleet.Drain(ctx, admin, prefix, drained, true); err != nil {
		t.Fatal(err)
	}
	// Append until it leads nothing (so the appends straddle the moves),
	// and five rounds more.
	ledBefore := count[drained]
	moved := -1
	for round := 3; moved < 0 || round < moved+5; round++ {
		if moved < 0 && len(nodes[drained].Leading()) == 0 {
			moved = round
		}
		if round > 2000 {
			t.Fatalf("%s still leads %v after %d rounds", drained, nodes[drained].Leading(), round)
		}
		appendAll(round)
	}
	if ledBefore == 0 {
		t.Fatalf("the drained member %s led nothing: the test moved nothing", drained)
	}
	during := slices.Clone(lat[before:])
	slices.Sort(during)
	t.Logf("%s led %d stars before the drain; it led none from round %d; appends after the drain: %d, p50 %v, max %v",
		drained, ledBefore, moved, len(during), during[len(during)/2], during[len(during)-1])
	for _, s := range streams {
		res, err := c.Read(ctx, s, 0, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Records) != acked[s] {
			t.Fatalf("%s: read %d records, acked %d", s, len(res.Records), acked[s])
		}
		for i, r := range res.Records {
			if want := fmt.Sprintf("%s/%d", s, i); r.Seq != uint64(i) || string(r.Body) != want {
				t.Fatalf("%s: record %d is %d %q, want %q", s, i, r.Seq, r.Body, want)
			}
		}
	}
}
