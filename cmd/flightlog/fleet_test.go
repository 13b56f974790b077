package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/flightlog/flightlog/fleet"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore/etcd"
	"github.com/flightlog/flightlog/objstore"
)

type fleetListing struct {
	Members []fleetMember `json:"members"`
	Stars   []fleetStar   `json:"stars"`
	Unled   int           `json:"unled"`
}

// TestFleetCommand: two members as goroutines on a real etcd; `flightlog
// fleet` lists them and their stars, drain moves every star off one, move
// pins a star on it, and the listing says when placement and leadership
// agree again.
func TestFleetCommand(t *testing.T) {
	eps := os.Getenv("FLIGHTLOG_ETCD_ENDPOINTS")
	if eps == "" {
		if os.Getenv("FLIGHTLOG_REQUIRE_SERVERS") == "1" {
			t.Fatal("FLIGHTLOG_ETCD_ENDPOINTS is not set (FLIGHTLOG_REQUIRE_SERVERS=1)")
		}
		t.Skip("FLIGHTLOG_ETCD_ENDPOINTS is not set: run ./scripts/test.sh, which starts etcd")
	}
	prefix := fmt.Sprintf("cli-test/fleet-%d/", time.Now().UnixNano())
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(eps, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	meta, err := etcd.New(etcd.Config{Client: cli, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer meta.Close()
	defer cli.Delete(context.Background(), prefix, clientv3.WithPrefix())
	stars := []string{"s0", "s1", "s2", "s3"}
	bucket := objstore.NewMem()
	cfg := fleet.Config{
		Prefix: prefix, Stars: stars, Meta: meta, TTL: 2 * time.Second,
		Logger: slog.New(slog.DiscardHandler),
		OpenStar: func(ctx context.Context, star string) (loglet.Config, error) {
			return loglet.Config{Meta: meta, Standard: loglet.ClassConfig{Stores: []objstore.Store{bucket}},
				PreflightTimeout: -1, Logger: slog.New(slog.DiscardHandler)}, nil
		},
	}
	for _, name := range []string{"a", "b"} {
		n, err := fleet.Join(t.Context(), cli, fleet.Member{Name: name, Addr: name + ".test:80"}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close(context.Background())
	}
	env := map[string]string{"FLIGHTLOG_ETCD_ENDPOINTS": eps, "FLIGHTLOG_ETCD_PREFIX": prefix}
	list := func() fleetListing {
		t.Helper()
		code, out, errs := cliEnv(t, env, "", "fleet", "--stars", strings.Join(stars, ","), "--format", "json")
		var l fleetListing
		if code != exitOK || json.Unmarshal([]byte(out), &l) != nil {
			t.Fatalf("fleet: exit %d %q %s", code, out, errs)
		}
		return l
	}
	// until lists the fleet until cond holds: each listing is a fresh
	// read of etcd, and the members' handoffs are what it waits for.
	router, err := fleet.NewRouter(t.Context(), cli, fleet.Config{Prefix: prefix, Stars: stars, Meta: meta})
	if err != nil {
		t.Fatal(err)
	}
	defer router.Close()
	until := func(what string, cond func(fleetListing) bool) fleetListing {
		t.Helper()
		deadline := time.After(time.Minute)
		for {
			changed := router.Changed()
			if l := list(); cond(l) {
				return l
			}
			select {
			case <-changed:
			case <-deadline:
				t.Fatalf("%s: not after a minute: %+v", what, list())
			}
		}
	}
	agree := func(l fleetListing) bool {
		for _, s := range l.Stars {
			if !s.Agree {
				return false
			}
		}
		return len(l.Members) == 2 && l.Unled == 0
	}
	until("both members lead their stars", agree)
	code, out, errs := cliEnv(t, env, "", "fleet")
	if code != exitOK || !strings.Contains(out, "a.test:80") || !strings.Contains(out, "2 members, 4 stars, 0 unled") {
		t.Fatalf("fleet (table, stars from etcd): exit %d\n%s%s", code, out, errs)
	}

	if code, out, errs := cliEnv(t, env, "", "fleet", "drain", "a"); code != exitOK || !strings.Contains(out, "drained a") {
		t.Fatalf("drain: exit %d %s%s", code, out, errs)
	}
	l := until("a drained", func(l fleetListing) bool {
		if !agree(l) {
			return false
		}
		for _, s := range l.Stars {
			if s.Leader != "b" {
				return false
			}
		}
		return true
	})
	if !l.Members[0].Drained || l.Members[0].Leads != 0 || l.Members[1].Leads != 4 {
		t.Fatalf("after the drain: %+v", l.Members)
	}
	if code, out, errs := cliEnv(t, env, "", "fleet", "move", "s2", "a"); code != exitOK {
		t.Fatalf("move: exit %d %s%s", code, out, errs)
	}
	until("s2 moved to a", func(l fleetListing) bool { return agree(l) && l.Stars[2].Leader == "a" && l.Stars[2].Moved == "a" })
	for _, args := range [][]string{{"fleet", "move", "s2", "-"}, {"fleet", "undrain", "a"}} {
		if code, out, errs := cliEnv(t, env, "", args...); code != exitOK {
			t.Fatalf("%v: exit %d %s%s", args, code, out, errs)
		}
	}
	want := fleet.Place(stars, []fleet.Member{{Name: "a"}, {Name: "b"}})
	until("undone", func(l fleetListing) bool {
		for _, s := range l.Stars {
			if !s.Agree || s.Leader != want[s.Star] || s.Moved != "" {
				return false
			}
		}
		return !l.Members[0].Drained
	})
	if code, _, errs := cliEnv(t, env, "", "fleet", "drain"); code != exitCannot || !strings.Contains(errs, "want no argument") {
		t.Fatalf("fleet drain without a member: exit %d %s", code, errs)
	}
	if code, _, errs := cliEnv(t, map[string]string{}, "", "fleet"); code != exitCannot || !strings.Contains(errs, "--etcd") {
		t.Fatalf("fleet without etcd: exit %d %s", code, errs)
	}
}
