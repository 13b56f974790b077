package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/flightlog/flightlog/contrib/fleethttp"
	"github.com/flightlog/flightlog/fleet"
	"github.com/flightlog/flightlog/internal/hang"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore/etcd"
)

// etcdEndpoints returns the etcd cluster the test uses, or skips (fails
// under FLIGHTLOG_REQUIRE_SERVERS=1).
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

// proc is one member process.
type proc struct {
	name string
	cmd  *exec.Cmd
	addr string
	log  *bytes.Buffer // stderr, for a failure's post-mortem
	exit chan error
}

// start runs the binary as member name and waits for its address line.
func start(t *testing.T, bin, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, log: &bytes.Buffer{}, exit: make(chan error, 1)}
	p.cmd = exec.Command(bin, append([]string{"--name", name, "--listen", "127.0.0.1:0"}, args...)...)
	p.cmd.Stderr = p.log
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if _, a, ok := strings.Cut(sc.Text(), " listening on "); ok {
				addr <- a
			}
		}
		io.Copy(io.Discard, out)
		p.exit <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("---- %s's log ----\n%s", name, p.log)
		}
	})
	select {
	case p.addr = <-addr:
	case err := <-p.exit:
		t.Fatalf("%s exited before listening: %v\n%s", name, err, p.log)
	case <-hang.After(t):
		t.Fatalf("%s did not listen", name)
	}
	return p
}

// Three processes on loopback, one etcd, one shared bucket directory:
// appends through every member land on their star's leader; after a
// kill -9 of one member the others take its stars over, and every acked
// record reads back once, in order, byte for byte.
func TestThreeProcesses(t *testing.T) {
	eps := etcdEndpoints(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "httpservice")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	prefix := "flightlog-test/httpservice-" + hex.EncodeToString(rnd[:]) + "/"
	args := []string{"--etcd", strings.Join(eps, ","), "--prefix", prefix, "--stars", "4", "--ttl", "2s",
		"--bucket", "file://" + filepath.ToSlash(filepath.Join(dir, "standard")), "--express", expressFlag(dir)}

	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() }) // after the deletion below (cleanups run last first)
	meta, err := etcd.New(etcd.Config{Client: cli, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer meta.Close()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cli.Delete(ctx, prefix, clientv3.WithPrefix())
	})
	stars := []string{"s0", "s1", "s2", "s3"}
	router, err := fleet.NewRouter(t.Context(), cli, fleet.Config{Prefix: prefix, Stars: stars, Meta: meta})
	if err != nil {
		t.Fatal(err)
	}
	defer router.Close()

	procs := map[string]*proc{}
	for _, name := range []string{"m1", "m2", "m3"} {
		procs[name] = start(t, bin, name, args...)
	}
	waitLed := func(what string, live ...string) {
		t.Helper()
		for {
			changed := router.Changed()
			if allLed(router, stars, live) {
				return
			}
			select {
			case <-changed:
			case <-hang.After(t):
				t.Fatalf("%s: stars not led by %v: placement %v", what, live, router.Placement())
			}
		}
	}
	waitLed("start", "m1", "m2", "m3")

	streams := []string{"orders", "payments", "audit", "clicks", "mail", "jobs"}
	acked := map[string][][]byte{}
	// curl-like: a text append through each member is served by the
	// star's leader.
	for i, stream := range streams {
		via := procs[[]string{"m1", "m2", "m3"}[i%3]]
		line := fmt.Sprintf("%s/curl/via-%s", stream, via.name)
		resp, err := http.Post(via.addr+"/v1/streams/"+stream, "text/plain", strings.NewReader(line))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		star, leader, _, rerr := router.Route(t.Context(), stream)
		if resp.StatusCode != 200 || rerr != nil || resp.Header.Get(fleethttp.ServedByHeader) != leader.Name {
			t.Fatalf("append to %s (star %s, leader %s, %v) via %s: %d served by %q: %s",
				stream, star, leader.Name, rerr, via.name, resp.StatusCode, resp.Header.Get(fleethttp.ServedByHeader), body)
		}
		acked[stream] = append(acked[stream], []byte(line))
	}

	// One writer per stream, all at once, through a client of the three
	// members (it moves to the next member when one refuses connections):
	// each batch is retried with its producer id and seq until it is
	// acked, so it is committed once even when its outcome was unknown (a
	// member killed while it forwarded it).
	all, err := fleethttp.NewClient(nil, procs["m1"].addr, procs["m2"].addr, procs["m3"].addr)
	if err != nil {
		t.Fatal(err)
	}
	acks := make(chan struct{}, 1024)
	stop := make(chan struct{})
	type written struct {
		stream string
		bodies [][]byte
		failed int // attempts answered with an error (and retried)
		dups   int // retries answered as duplicates (an earlier attempt committed)
	}
	results := make(chan written, len(streams))
	for _, stream := range streams {
		go func() {
			w := written{stream: stream}
			defer func() { results <- w }()
			for seq := uint64(0); ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				recs := []loglet.Record{
					{Body: fmt.Appendf(nil, "%s/%d/a", stream, seq)},
					{Body: append(fmt.Appendf(nil, "%s/%d/b", stream, seq), 0, 0xff, '\n', 7)},
				}
				b := loglet.Batch{Records: recs, Producer: loglet.ProducerID{ID: "writer-" + stream, Seq: seq}}
				for try := 0; ; try++ {
					ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(hang.Bound(t)))
					ack, err := all.Append(ctx, stream, b)
					cancel()
					if err == nil {
						if ack.Duplicate {
							w.dups++
						}
						break
					}
					w.failed++
					if !errors.Is(err, loglet.ErrNotCommitted) && !errors.Is(err, loglet.ErrOutcomeUnknown) || t.Context().Err() != nil || try > 200 {
						t.Errorf("append %s seq %d (try %d): %v", stream, seq, try, err)
						return
					}
				}
				for _, r := range recs {
					w.bodies = append(w.bodies, r.Body)
				}
				acks <- struct{}{}
			}
		}()
	}
	waitAcks := func(n int) {
		t.Helper()
		for range n {
			select {
			case <-acks:
			case <-hang.After(t):
				t.Fatalf("waiting for %d acks", n)
			}
		}
	}
	waitAcks(5 * len(streams))

	// kill -9 one member while the writers append: its lease expires
	// after the TTL, and the others take its stars over (fence and all).
	victim := procs["m2"]
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-victim.exit
	waitAcks(5 * len(streams))
	waitLed("after the kill", "m1", "m3")
	waitAcks(2 * len(streams))
	close(stop)
	failed, dups, total := 0, 0, 0
	for range streams {
		for done := false; !done; {
			select {
			case w := <-results:
				acked[w.stream] = append(acked[w.stream], w.bodies...)
				failed, dups, total = failed+w.failed, dups+w.dups, total+len(w.bodies)
				done = true
			case <-acks: // drain, so no writer blocks on a full channel
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d records acked by the writers; %d attempts failed and were retried (the kill's window), %d retries answered as duplicates", total, failed, dups)

	// Every acked record once, in order, byte for byte, read through the
	// live members.
	for _, stream := range streams {
		var got []loglet.SequencedRecord
		for next := uint64(0); next < uint64(len(acked[stream])); {
			res, err := all.Read(t.Context(), stream, next, fleethttp.ReadOptions{})
			if err != nil {
				t.Fatalf("read %s from %d: %v", stream, next, err)
			}
			if len(res.Records) == 0 {
				t.Fatalf("read %s from %d: nothing, tail %d, want %d records", stream, next, res.Tail.Seq, len(acked[stream]))
			}
			got = append(got, res.Records...)
			next = res.Next
		}
		tail, err := all.CheckTail(t.Context(), stream)
		if err != nil || tail.Seq != uint64(len(acked[stream])) {
			t.Fatalf("%s: tail %+v, %v; want %d (an acked record lost or one duplicated)", stream, tail, err, len(acked[stream]))
		}
		if len(got) != len(acked[stream]) {
			t.Fatalf("%s: read %d records, acked %d", stream, len(got), len(acked[stream]))
		}
		for i, r := range got {
			if r.Seq != uint64(i) || !bytes.Equal(r.Body, acked[stream][i]) {
				t.Fatalf("%s: record %d is seq %d %q, want %q", stream, i, r.Seq, r.Body, acked[stream][i])
			}
		}
	}
	// A clean leave of the others.
	for _, name := range []string{"m1", "m3"} {
		procs[name].cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, name := range []string{"m1", "m3"} {
		select {
		case err := <-procs[name].exit:
			if err != nil {
				t.Errorf("%s exited with %v", name, err)
			}
		case <-hang.After(t):
			t.Fatalf("%s did not exit after SIGTERM", name)
		}
	}
}

func allLed(r *fleet.Router, stars, live []string) bool {
	if len(r.Members()) != len(live) {
		return false
	}
	owners := r.Placement()
	for _, s := range stars {
		ls := r.Leads(s)
		if len(ls) != 1 || ls[0].Member.Name != owners[s] {
			return false
		}
	}
	return true
}

// expressFlag is --express for three directories under dir.
func expressFlag(dir string) string {
	var urls []string
	for _, b := range []string{"express-a", "express-b", "express-c"} {
		urls = append(urls, "file://"+filepath.ToSlash(filepath.Join(dir, b)))
	}
	return strings.Join(urls, ",")
}
