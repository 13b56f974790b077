package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/flightlog/flightlog/metastore"
)

// rpcCounter counts the gRPC calls an etcd client makes, client side: unary
// calls (Put, Txn, Delete, Range, LeaseGrant, LeaseRevoke) by method,
// messages sent on streams (LeaseKeepAlive requests, watch creations) by
// method, and the watch responses received: how many, how many events they
// carry, how many bytes.
type rpcCounter struct {
	mu    sync.Mutex
	calls map[string]int64 // "/etcdserverpb.KV/Put" and "send /etcdserverpb.Lease/LeaseKeepAlive"

	watchResps, watchEvents, watchBytes atomic.Int64
}

func newRPCCounter() *rpcCounter { return &rpcCounter{calls: map[string]int64{}} }

func (c *rpcCounter) add(method string) {
	c.mu.Lock()
	c.calls[method]++
	c.mu.Unlock()
}

// take returns the counts since the last take, and resets them.
func (c *rpcCounter) take() (calls map[string]int64, resps, events, bytes int64) {
	c.mu.Lock()
	calls, c.calls = c.calls, map[string]int64{}
	c.mu.Unlock()
	return calls, c.watchResps.Swap(0), c.watchEvents.Swap(0), c.watchBytes.Swap(0)
}

func (c *rpcCounter) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			c.add(method)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return &countedStream{ClientStream: s, c: c, method: method}, nil
		}),
	}
}

type countedStream struct {
	grpc.ClientStream
	c      *rpcCounter
	method string
}

func (s *countedStream) SendMsg(m any) error {
	s.c.add("send " + s.method)
	return s.ClientStream.SendMsg(m)
}

func (s *countedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil {
		if wr, ok := m.(*pb.WatchResponse); ok {
			s.c.watchResps.Add(1)
			s.c.watchEvents.Add(int64(len(wr.Events)))
			s.c.watchBytes.Add(int64(proto.Size(wr)))
		}
	}
	return err
}

func formatCalls(calls map[string]int64) string {
	keys := make([]string, 0, len(calls))
	for k := range calls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", strings.TrimPrefix(strings.Replace(k, "/etcdserverpb.", "", 1), "send "), calls[k])
	}
	return b.String()
}

func sum(calls map[string]int64) int64 {
	var n int64
	for _, v := range calls {
		n += v
	}
	return n
}

// BenchmarkFleetScale measures the fleet's etcd traffic with members
// members and stars stars on a real etcd (FLIGHTLOG_ETCD_ENDPOINTS):
//
//   - the members are simulated, not Nodes: each is a concurrency.Session
//     (its lease, kept alive) on one shared etcd client, a member key under
//     it, and a lead key under it for each star Place gives it, as a Node
//     publishes. No loglet star is opened (10^5 stars are out of reach
//     here): the epoch protocol's own metastore traffic (a seal and a mint
//     per moved star) is not counted;
//   - routers routers (the Router every Node runs, the real code) watch the
//     fleet's keys on a second shared client. A fleet of N members runs N
//     routers: multiply the per-router watch figures by N;
//   - the leads are written at setup in transactions of 128 puts (not
//     measured); during a join or leave each moved star's handoff is what
//     the Nodes do: the old owner deletes its lead, the new one puts its
//     own, one request each, 16 at a time.
//
// It reports, per second in steady state (a window of 4s, TTL DefaultTTL, or
// FLIGHTLOG_FLEET_SCALE_TTL, e.g. 30s, when a busy machine starves the
// keepalives of 1,000 sessions): the
// members' requests (keepalives); and for one join and one clean leave:
// the requests, the watch events and bytes delivered to one router, and the
// time from the member key's change until every router routes every moved
// star to its new owner. Run one size at a time with -benchtime=1x.
func BenchmarkFleetScale(b *testing.B) {
	eps := endpoints(b)
	for _, stars := range []int{10_000, 100_000} {
		for _, members := range []int{10, 100, 1000} {
			b.Run(fmt.Sprintf("members=%d/stars=%d", members, stars), func(b *testing.B) {
				for b.Loop() {
					benchFleetScale(b, eps, members, stars, 4)
				}
			})
		}
	}
}

func benchFleetScale(b *testing.B, eps []string, nmembers, nstars, nrouters int) {
	ttl := DefaultTTL
	if v := os.Getenv("FLIGHTLOG_FLEET_SCALE_TTL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second || d%time.Second != 0 {
			b.Fatalf("FLIGHTLOG_FLEET_SCALE_TTL=%q: want whole seconds, e.g. 30s", v)
		}
		ttl = d
	}
	ctx := context.Background()
	var rnd [6]byte
	rand.Read(rnd[:])
	prefix := "flightlog-bench/fleet-" + hex.EncodeToString(rnd[:]) + "/"
	stars := make([]string, nstars)
	for i := range stars {
		stars[i] = fmt.Sprintf("s%06d", i)
	}
	mcount, rcount := newRPCCounter(), newRPCCounter()
	dial := func(c *rpcCounter) *clientv3.Client {
		cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), DialOptions: c.dialOptions()})
		if err != nil {
			b.Fatal(err)
		}
		return cli
	}
	mcli, rcli := dial(mcount), dial(rcount)
	defer rcli.Close()
	defer mcli.Close()
	cfg := Config{Prefix: prefix, Stars: stars, Meta: metastore.NewMem(), TTL: ttl, Logger: testLog(b)}
	cfg.applyDefaults()

	// The members: a session each, a member key, and the leads of the
	// stars placed on them.
	members := make([]Member, nmembers)
	sessions := map[string]*concurrency.Session{}
	var smu sync.Mutex
	start := time.Now()
	parallel(16, nmembers, func(i int) {
		m := Member{Name: fmt.Sprintf("m%04d", i), Addr: fmt.Sprintf("m%04d.test:80", i)}
		members[i] = m
		s, err := join(mcli, cfg, m)
		if err != nil {
			b.Error(err)
			return
		}
		smu.Lock()
		sessions[m.Name] = s
		smu.Unlock()
	})
	defer func() {
		for _, s := range sessions {
			s.Close()
		}
		dctx, cancel := context.WithTimeout(ctx, time.Minute)
		mcli.Delete(dctx, prefix, clientv3.WithPrefix())
		cancel()
	}()
	if b.Failed() {
		b.FailNow()
	}
	owners := Place(stars, members)
	byName := map[string]Member{}
	for _, m := range members {
		byName[m.Name] = m
	}
	var ops []clientv3.Op
	for _, s := range stars {
		m := byName[owners[s]]
		ops = append(ops, clientv3.OpPut(cfg.leadKey(s, m.Name), leadValue(m), clientv3.WithLease(sessions[m.Name].Lease())))
	}
	parallel(8, (len(ops)+127)/128, func(i int) {
		batch := ops[i*128 : min(len(ops), (i+1)*128)]
		if _, err := mcli.Txn(ctx).Then(batch...).Commit(); err != nil {
			b.Error(err)
		}
	})
	if b.Failed() {
		b.FailNow()
	}
	b.Logf("setup: %d members, %d leads in %v", nmembers, nstars, time.Since(start).Round(time.Millisecond))

	// The routers: each loads the whole prefix, then watches it.
	mcount.take()
	rcount.take()
	routers := make([]*Router, nrouters)
	start = time.Now()
	for i := range routers {
		r, err := NewRouter(ctx, rcli, cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		routers[i] = r
	}
	loadTime := time.Since(start) / time.Duration(nrouters)
	calls, _, _, _ := rcount.take()
	b.Logf("router load: %v each; requests:%s", loadTime.Round(time.Millisecond), formatCalls(calls))
	b.ReportMetric(float64(loadTime.Milliseconds()), "load-ms/router")

	// Plain watches standing for the routers of a larger fleet.
	var fo *fanout
	if v := os.Getenv("FLIGHTLOG_FLEET_SCALE_WATCHERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("FLIGHTLOG_FLEET_SCALE_WATCHERS=%q: want a count >= 1", v)
		}
		resp, err := rcli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			b.Fatal(err)
		}
		fo = newFanout(b, eps, prefix+"fleet/", resp.Header.Revision, n)
		defer fo.close()
	}

	// Steady state: only the keepalives.
	mcount.take()
	rcount.take()
	const window = 4 * time.Second
	time.Sleep(window)
	calls, _, ev, _ := mcount.take()
	_, _, rev, _ := rcount.take()
	b.Logf("steady: members' requests/s %.1f:%s; watch events/s per router %.1f", float64(sum(calls))/window.Seconds(), formatCalls(calls), float64(ev+rev)/window.Seconds()/float64(nrouters))
	b.ReportMetric(float64(sum(calls))/window.Seconds(), "steady-req/s")
	if rev > 0 {
		b.Fatalf("steady state: the routers saw %d events: leases expired (keepalives starved on a busy machine?); raise FLIGHTLOG_FLEET_SCALE_TTL above %v", rev, ttl)
	}

	// A join: the new member's key, then the handoff of each star it wins.
	newcomer := Member{Name: "mnew", Addr: "mnew.test:80"}
	after := Place(stars, append(append([]Member(nil), members...), newcomer))
	var moved []string
	for _, s := range stars {
		if after[s] != owners[s] {
			moved = append(moved, s)
		}
	}
	phase := func(name string, change func(), handoff func(star string), want map[string]string) {
		mcount.take()
		rcount.take()
		var base []int64
		if fo != nil {
			base = fo.snapshot()
		}
		start := time.Now()
		change()
		conv := make(chan time.Duration, len(routers))
		for _, r := range routers {
			go func() { conv <- converge(r, moved, want, start) }()
		}
		parallel(16, len(moved), func(i int) { handoff(moved[i]) })
		written := time.Since(start)
		var worst time.Duration
		for range routers {
			d := <-conv
			if d < 0 {
				b.Fatalf("%s: a router did not converge in %v", name, convergeLimit)
			}
			worst = max(worst, d)
		}
		calls, _, _, _ := mcount.take()
		rcalls, resps, ev, bytes := rcount.take()
		per := float64(nrouters)
		b.Logf("%s: %d stars moved; members' requests %d:%s; routers' requests:%s; per router: %.0f watch responses, %.0f events, %.1f KiB; handoffs written in %v, all routers converged in %v",
			name, len(moved), sum(calls), formatCalls(calls), formatCalls(rcalls), float64(resps)/per, float64(ev)/per, float64(bytes)/per/1024, written.Round(time.Millisecond), worst.Round(time.Millisecond))
		b.ReportMetric(float64(sum(calls)), name+"-req")
		b.ReportMetric(float64(ev)/per, name+"-events/router")
		b.ReportMetric(float64(ev)/per/float64(max(1, len(moved))), name+"-events/router/move")
		b.ReportMetric(float64(bytes)/per/1024, name+"-KiB/router")
		b.ReportMetric(float64(worst.Milliseconds()), name+"-converge-ms")
		if fo != nil {
			each := ev / int64(nrouters)
			d := fo.wait(base, each, start)
			if d < 0 {
				b.Fatalf("%s: a watcher did not get the %d events in %v", name, each, convergeLimit)
			}
			b.Logf("%s: %d watchers (standing for %d members' routers) got all %d events each %v after the change: %d events delivered", name, len(fo.counts), len(fo.counts), each, d.Round(time.Millisecond), each*int64(len(fo.counts)))
			b.ReportMetric(float64(d.Milliseconds()), name+"-fanout-ms")
		}
	}
	var newSess *concurrency.Session
	phase("join", func() {
		var err error
		if newSess, err = join(mcli, cfg, newcomer); err != nil {
			b.Fatal(err)
		}
	}, func(star string) {
		old := byName[owners[star]]
		if _, err := mcli.Delete(ctx, cfg.leadKey(star, old.Name)); err != nil {
			b.Error(err)
		}
		if _, err := mcli.Put(ctx, cfg.leadKey(star, newcomer.Name), leadValue(newcomer), clientv3.WithLease(newSess.Lease())); err != nil {
			b.Error(err)
		}
	}, after)
	// A clean leave: the member key goes first (as Node.Close does), then
	// each star is handed back, then the lease is revoked.
	phase("leave", func() {
		if _, err := mcli.Delete(ctx, cfg.memberKey(newcomer.Name)); err != nil {
			b.Fatal(err)
		}
	}, func(star string) {
		old := byName[owners[star]]
		if _, err := mcli.Delete(ctx, cfg.leadKey(star, newcomer.Name)); err != nil {
			b.Error(err)
		}
		if _, err := mcli.Put(ctx, cfg.leadKey(star, old.Name), leadValue(old), clientv3.WithLease(sessions[old.Name].Lease())); err != nil {
			b.Error(err)
		}
	}, owners)
	newSess.Close()
}

// fanout is n plain watches of the fleet's keys from rev+1, as the routers
// of n members hold, on 8 clients (fewer for n < 8): etcd's watch fan-out
// for a fleet of n members, without n Routers' tables. Each counts the
// events it received.
type fanout struct {
	counts []atomic.Int64
	notify chan struct{}
	cancel context.CancelFunc
	clis   []*clientv3.Client
	wg     sync.WaitGroup
}

func newFanout(b *testing.B, eps []string, prefix string, rev int64, n int) *fanout {
	ctx, cancel := context.WithCancel(context.Background())
	f := &fanout{counts: make([]atomic.Int64, n), notify: make(chan struct{}, 1), cancel: cancel}
	for range min(8, n) {
		cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			f.close()
			b.Fatal(err)
		}
		f.clis = append(f.clis, cli)
	}
	for i := range n {
		wch := f.clis[i%len(f.clis)].Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		f.wg.Go(func() {
			for wr := range wch {
				f.counts[i].Add(int64(len(wr.Events)))
				select {
				case f.notify <- struct{}{}:
				default:
				}
			}
		})
	}
	return f
}

func (f *fanout) snapshot() []int64 {
	out := make([]int64, len(f.counts))
	for i := range f.counts {
		out[i] = f.counts[i].Load()
	}
	return out
}

// wait waits until every watcher has n events more than base, and returns
// the time since start; -1 after convergeLimit.
func (f *fanout) wait(base []int64, n int64, start time.Time) time.Duration {
	limit := time.After(convergeLimit)
	for i := 0; i < len(f.counts); {
		if f.counts[i].Load()-base[i] >= n {
			i++
			continue
		}
		select {
		case <-f.notify:
		case <-limit:
			return -1
		}
	}
	return time.Since(start)
}

func (f *fanout) close() {
	f.cancel()
	for _, c := range f.clis {
		c.Close()
	}
	f.wg.Wait()
}

// join opens a session for m and puts its member key, as Join does.
func join(cli *clientv3.Client, cfg Config, m Member) (*concurrency.Session, error) {
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(cfg.TTL/time.Second)))
	if err != nil {
		return nil, err
	}
	val, _ := json.Marshal(memberRecord{Member: m, Owner: m.Name + "/bench"})
	if _, err := cli.Put(context.Background(), cfg.memberKey(m.Name), string(val), clientv3.WithLease(s.Lease())); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func leadValue(m Member) string {
	val, _ := json.Marshal(Lead{Member: m, Epoch: 1})
	return string(val)
}

// convergeLimit bounds converge's wait.
const convergeLimit = 5 * time.Minute

// converge waits until r routes every star of moved to want's member (and
// no other member still publishes a lead of it), and returns the time
// since start; -1 if that takes longer than convergeLimit.
func converge(r *Router, moved []string, want map[string]string, start time.Time) time.Duration {
	limit := time.After(convergeLimit)
	i := 0
	for {
		changed := r.Changed()
		for i < len(moved) {
			m, _, ok := r.Leader(moved[i])
			if !ok || m.Name != want[moved[i]] {
				break
			}
			if ls := r.Leads(moved[i]); len(ls) != 1 {
				break
			}
			i++
		}
		if i == len(moved) {
			return time.Since(start)
		}
		select {
		case <-changed:
		case <-limit:
			return -1
		}
	}
}

// parallel runs f(0..n-1) on k goroutines.
func parallel(k, n int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(k, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				f(i)
			}
		})
	}
	wg.Wait()
}
