// Command httpservice is a three-process (or N-process) HTTP service that
// embeds flightlog: each process joins a fleet on etcd (package fleet),
// leads the stars placed on it, and serves the fleet's reference HTTP
// transport (contrib/fleethttp). Any process accepts any request and
// forwards it, in one hop, to the leader of the stream's star; an ack
// means "durable in object storage". The stars' data lives in buckets
// every process reaches (local directories on one machine, or S3): one for
// the Standard class and three for Express (K=3, W=2); their metadata in
// etcd.
//
// Start etcd, then one process per member (README.md has the two commands):
//
//	go run . --name m1 --listen 127.0.0.1:8081 --etcd http://127.0.0.1:2379 --bucket file://$PWD/data/standard
//
// and append and read through any of them (a stream appended to before it
// is created is a Standard one; create an Express one first):
//
//	curl -X PUT 'localhost:8081/v1/streams/orders?class=express'
//	curl --data-binary $'hello\nworld' localhost:8082/v1/streams/greetings
//	curl 'localhost:8083/v1/streams/greetings?from=0'               # JSON, bodies in base64
//	curl 'localhost:8083/v1/streams/greetings?from=0&format=text'   # the bodies, one a line
//	curl 'localhost:8081/v1/streams/greetings?from=2&wait=30s'   # a long poll
//
// Every flag has an environment variable (HTTPSERVICE_NAME, ...; the etcd
// endpoints also FLIGHTLOG_ETCD_ENDPOINTS). SIGINT or SIGTERM leaves the
// fleet cleanly: close the node while still serving (each star flushed,
// absorbed and sealed, and handed to its next owner without a fence, while
// requests that reach this member are forwarded to the new leaders), then
// end long polls, stop accepting and finish the requests in flight. A process killed with -9
// loses its stars to the other members after the lease's TTL.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/flightlog/flightlog/contrib/fleethttp"
	"github.com/flightlog/flightlog/fleet"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/open"
)

// options are the flags.
type options struct {
	name, listen, advertise string
	etcd, prefix, bucket    string
	express                 string
	stars                   int
	weight                  float64
	ttl                     time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.name, "name", env("HTTPSERVICE_NAME", ""), "this member's name, unique in the fleet: 1-64 of [a-z0-9._-] (required)")
	flag.StringVar(&o.listen, "listen", env("HTTPSERVICE_LISTEN", "127.0.0.1:8080"), "listen address (port 0: any free port)")
	flag.StringVar(&o.advertise, "advertise", env("HTTPSERVICE_ADVERTISE", ""), "the URL the other members forward to (default: http:// and the address listened on)")
	flag.StringVar(&o.etcd, "etcd", env("HTTPSERVICE_ETCD", env("FLIGHTLOG_ETCD_ENDPOINTS", "http://127.0.0.1:2379")), "etcd endpoints, comma-separated")
	flag.StringVar(&o.prefix, "prefix", env("HTTPSERVICE_PREFIX", "httpservice/"), "etcd key prefix of the deployment (the fleet's and the metastore's keys)")
	flag.StringVar(&o.bucket, "bucket", env("HTTPSERVICE_BUCKET", ""), "Standard's bucket URL, the same for every member (default file://<abs ./httpservice-data/standard>)")
	flag.StringVar(&o.express, "express", env("HTTPSERVICE_EXPRESS", ""), "Express's three buckets (K=3, W=2), comma-separated URLs, the same for every member (default file://<abs ./httpservice-data/express-a>, -b, -c; \"none\": no Express class)")
	flag.IntVar(&o.stars, "stars", 8, "how many stars the deployment has (s0...; the same for every member)")
	flag.Float64Var(&o.weight, "weight", 1, "this member's capacity weight for placement")
	flag.DurationVar(&o.ttl, "ttl", fleet.DefaultTTL, "the member's etcd lease TTL (whole seconds): how soon a crashed member's stars move")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds) // slog's default handler writes through log
	if err := run(o); err != nil {
		log.Fatal(err)
	}
}

// freshConns tracks the connections that have not sent a request yet
// (http.StateNew). http.Server.Shutdown waits 5s for such a connection
// (one another member's transport dialled, then did not use) before it
// counts it as idle; closing them at once lets a member exit as soon as
// its requests are done. A request that raced the close fails on its
// client's side before it was read: never half-served.
type freshConns struct {
	mu    sync.Mutex
	conns map[net.Conn]bool
	done  bool
}

func (f *freshConns) track(c net.Conn, s http.ConnState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case s == http.StateNew && f.done:
		c.Close()
	case s == http.StateNew:
		if f.conns == nil {
			f.conns = map[net.Conn]bool{}
		}
		f.conns[c] = true
	default:
		delete(f.conns, c)
	}
}

func (f *freshConns) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.done = true
	for c := range f.conns {
		c.Close()
	}
	f.conns = nil
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run(o options) error {
	if o.name == "" {
		return errors.New("httpservice: --name is required")
	}
	if o.stars < 1 {
		return fmt.Errorf("httpservice: --stars %d: want at least 1", o.stars)
	}
	dataDir := func(name string) (string, error) {
		abs, err := filepath.Abs(filepath.Join("httpservice-data", name))
		return "file://" + filepath.ToSlash(abs), err
	}
	if o.bucket == "" {
		var err error
		if o.bucket, err = dataDir(open.StandardBucket); err != nil {
			return err
		}
	}
	var express []string
	switch o.express {
	case "none":
	case "":
		for _, b := range open.ExpressBuckets() {
			u, err := dataDir(b)
			if err != nil {
				return err
			}
			express = append(express, u)
		}
	default:
		express = strings.Split(o.express, ",")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// Backends: the metastore in etcd under the prefix, the bucket by URL.
	endpoints := strings.Split(o.etcd, ",")
	hosts := make([]string, len(endpoints))
	for i, e := range endpoints {
		hosts[i] = strings.TrimPrefix(strings.TrimPrefix(e, "http://"), "https://")
	}
	spec := open.Spec{
		Meta:        "etcd://" + strings.Join(hosts, ",") + "/" + o.prefix,
		Standard:    []string{o.bucket},
		Express:     express,
		S3AccessKey: os.Getenv("FLIGHTLOG_S3_ACCESS_KEY"), S3SecretKey: os.Getenv("FLIGHTLOG_S3_SECRET_KEY"),
	}
	be, err := spec.Open(ctx)
	if err != nil {
		return err
	}
	defer be.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()

	// Listen first, so the address the fleet publishes is the real one.
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	if o.advertise == "" {
		o.advertise = "http://" + ln.Addr().String()
	}
	var stars []string
	for i := range o.stars {
		stars = append(stars, fmt.Sprintf("s%d", i))
	}
	starConfig := func(star string) loglet.Config {
		cfg := loglet.DefaultConfig()
		cfg.Star = star
		cfg.Meta = be.Meta
		cfg.Standard.Stores, cfg.Standard.BucketNames = be.Standard, be.StandardNames
		cfg.Express.Stores, cfg.Express.BucketNames = be.Express, be.ExpressNames
		cfg.CreateOnAppend, cfg.DefaultClass = true, loglet.Standard
		cfg.Logger = slog.Default() // the star's logs name it already
		return cfg
	}
	// The buckets and the metastore pass loglet's pre-flight check once,
	// before the member joins; every star then opens without it (a GET, a
	// PutIfAbsent, a GET and a Delete per bucket, 40-200 ms on a busy
	// machine, were on the path of every handoff to a new member).
	if err := loglet.Preflight(ctx, starConfig(stars[0])); err != nil {
		ln.Close()
		return err
	}
	node, err := fleet.Join(ctx, cli, fleet.Member{Name: o.name, Addr: o.advertise, Weight: o.weight}, fleet.Config{
		Prefix: o.prefix, Stars: stars, Meta: be.Meta, TTL: o.ttl,
		// The handler routes on the node's router through the leave and
		// after it (requests still served after node.Close must see where
		// the stars went); it is closed when the server has stopped.
		KeepRouter: true,
		OpenStar: func(ctx context.Context, star string) (loglet.Config, error) {
			cfg := starConfig(star)
			cfg.PreflightTimeout = -1 // checked before Join
			return cfg, nil
		},
	})
	if err != nil {
		ln.Close()
		return err
	}
	defer node.Router().Close()
	done := make(chan struct{})
	h := fleethttp.NewHandler(fleethttp.FromNode(node), fleethttp.Config{Done: done})
	var fresh freshConns
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ConnState: fresh.track}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	// The line a supervisor (or the example's test) reads the address from.
	fmt.Printf("httpservice: member %s listening on %s\n", o.name, o.advertise)
	slog.Info("listening", "member", o.name, "addr", o.advertise, "bucket", o.bucket, "express", express, "etcd", o.etcd)

	select {
	case err = <-errc:
	case <-node.Done():
		// The node stopped for good: it rejoins by itself after a lost
		// session (fleet.Config.NoRejoin is off), so this is its etcd
		// client closed or a fatal error. Leave, and let a supervisor
		// restart us.
		err = node.Err()
	case <-ctx.Done():
	}
	slog.Info("leaving the fleet", "member", o.name)
	// Close the node first, while the server still serves: each star is
	// flushed, absorbed, sealed and handed to its next owner, and requests
	// that reach this member meanwhile are forwarded to the new leaders
	// (the node's router follows the handoffs, and keeps following etcd
	// until run returns: fleet.Config.KeepRouter).
	// Shutting the server down first would make every other member's
	// forwards to this one fail until the handoffs were over.
	cerr := node.Close(context.Background())
	slog.Info("left the fleet; stopping the server", "member", o.name, "err", cerr)
	close(done)   // end long polls, which would hold Shutdown up
	fresh.close() // and connections that never sent a request, which would hold it 5s
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if serr := srv.Shutdown(sctx); serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		slog.Error("shutdown", "err", serr)
	}
	slog.Info("stopped", "member", o.name)
	return errors.Join(err, cerr)
}
