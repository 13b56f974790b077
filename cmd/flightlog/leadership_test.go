package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore/bbolt"
)

// wantLeads is, by command, what its help must say about leadership. It is
// kept here, apart from the command table, so that a new command fails the
// test until someone decides whether it leads, and a changed mark fails it
// until the behaviour check below agrees.
var wantLeads = map[string]leadership{
	"append":  leadsStar,
	"read":    leadsNothing,
	"tail":    leadsNothing,
	"streams": leadsNothing,
	"groups":  leadsNothing,
	"create":  leadsStar,
	"config":  leadsNothing,
	"delete":  leadsStar,
	"trim":    leadsStar,
	"fleet":   leadsNothing,
	"inspect": leadsNothing,
	"walk":    leadsNothing,
	"fsck":    leadsNothing,
	"bench":   leadsOwnStar,
}

// TestHelpMarksLeaders: `flightlog help` names every command and marks, in
// its second column, the ones that lead the star; each command's --help
// has the same in its leadership line.
func TestHelpMarksLeaders(t *testing.T) {
	code, out, _ := cli(t, "", "help")
	if code != exitOK {
		t.Fatalf("help: exit %d", code)
	}
	if len(commands) != len(wantLeads) {
		t.Errorf("%d commands, %d in wantLeads: decide whether each new command leads", len(commands), len(wantLeads))
	}
	for _, c := range commands {
		want, ok := wantLeads[c.name]
		if !ok {
			t.Errorf("command %s: not in wantLeads: decide whether it leads the star", c.name)
			continue
		}
		line := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(c.name) + ` +(\S+)  `).FindStringSubmatch(out)
		if line == nil {
			t.Errorf("help does not list %s:\n%s", c.name, out)
			continue
		}
		if line[1] != want.mark() {
			t.Errorf("help marks %s %q, want %q", c.name, line[1], want.mark())
		}
		_, cmdHelp, _ := cli(t, "", c.name, "--help")
		if !strings.Contains(cmdHelp, want.line()) {
			t.Errorf("%s --help lacks %q:\n%s", c.name, want.line(), cmdHelp)
		}
	}
	for _, name := range []string{"append", "create", "delete", "trim"} {
		if !regexp.MustCompile(`(?s)Leadership: [^\n]*\b` + name + `\b`).MatchString(out) {
			t.Errorf("help's leadership paragraph does not name %s", name)
		}
	}
}

// TestLeadershipMarksMatchBehaviour runs every command the help marks
// (bench aside: it leads a star of its own, in memory) beside a chain's
// live owner (a leader that crashed: no clean Close, no seal). A command
// marked as leading must refuse the owner (exit 2, naming --takeover); one
// marked as leading nothing must not, and no command may change the epoch
// records, so none of them fenced the owner.
func TestLeadershipMarksMatchBehaviour(t *testing.T) {
	ctx := context.Background()
	dir, g, b := tempBackends(t)
	star, err := g.openStar(ctx, b, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := star.CreateStream(ctx, "orders", loglet.StreamOptions{Class: loglet.Standard}); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"one", "two"} {
		if _, err := star.Append(ctx, "orders", loglet.Batch{Records: []loglet.Record{{Body: []byte(body)}}}); err != nil {
			t.Fatal(err)
		}
	}
	// A clean Close absorbs the records (so tail and read find them) and
	// seals; the next leader then crashes, leaving its epoch unsealed.
	if err := star.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if star, err = g.openStar(ctx, b, io.Discard); err != nil {
		t.Fatal(err)
	}
	b.Close() // the leader crashes
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	star.Close(cctx) // its goroutines end; the metastore is gone, so nothing is sealed
	cancel()

	epochs := func() string {
		t.Helper()
		ms, err := bbolt.Open(filepath.Join(dir, metaFile), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ms.Close()
		var s string
		for _, c := range chain.Classes() {
			it, err := ms.Get(ctx, chain.EpochKey(defaultStarName, c))
			if err != nil {
				t.Fatal(err)
			}
			s += string(it.Value) + string(it.Version) + "\n"
		}
		return s
	}
	before := epochs()

	runs := [][]string{
		{"append", "orders"},
		{"read", "orders"},
		{"tail", "orders", "--from", "0"},
		{"streams"},
		{"groups", "orders"},
		{"groups", "orders", "--group", "billing", "--reset-to", "1"},
		{"groups", "orders", "--group", "billing", "--delete"},
		{"create", "clicks"},
		{"config", "orders"},
		{"config", "orders", "--retention-age", "1h"},
		{"delete", "orders"},
		{"trim", "orders", "1"},
		{"inspect", "0"},
		{"walk"},
		{"fsck"},
		{"fsck", "--repair"},
	}
	// fleet is not run here: it reads and writes only the fleet's keys in
	// etcd (it refuses to run without --etcd) and opens no star;
	// TestFleetCommand runs it beside live members.
	ran := map[string]bool{"bench": true, "fleet": true}
	for _, args := range runs {
		name := args[0]
		ran[name] = true
		runCtx, cancel := context.WithCancel(ctx)
		var out, errb bytes.Buffer
		var stdout io.Writer = &out
		if name == "tail" {
			// tail follows until its context ends: end it once it has
			// printed the stream's records.
			stdout = cancelOnWrite{&out, "two\n", cancel}
		}
		code := run(runCtx, append(args, "--dir", dir), mapEnv(nil), strings.NewReader("three\n"), stdout, &errb)
		cancel()
		refused := strings.Contains(errb.String(), "live owner")
		switch wantLeads[name] {
		case leadsStar:
			if code != exitCannot || !refused || !strings.Contains(errb.String(), "--takeover") {
				t.Errorf("%q beside a live owner: exit %d, want %d and a refusal naming --takeover; stderr:\n%s", args, code, exitCannot, errb.String())
			}
		case leadsNothing:
			if refused || code == exitCannot {
				t.Errorf("%q beside a live owner: exit %d, stderr:\n%s", args, code, errb.String())
			}
		default:
			t.Errorf("%q: no behaviour check for leadership %d", args, wantLeads[name])
		}
		if after := epochs(); after != before {
			t.Fatalf("%q changed the epoch records beside a live owner:\n%s\nto\n%s", args, before, after)
		}
	}
	for _, c := range commands {
		if !ran[c.name] {
			t.Errorf("command %s is not run beside a live owner", c.name)
		}
	}
}

// cancelOnWrite is a writer into buf that calls cancel once buf holds want.
type cancelOnWrite struct {
	buf    *bytes.Buffer
	want   string
	cancel context.CancelFunc
}

func (w cancelOnWrite) Write(p []byte) (int, error) {
	n, err := w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.cancel()
	}
	return n, err
}
