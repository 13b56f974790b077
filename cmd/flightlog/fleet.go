package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/flightlog/flightlog/fleet"
	"github.com/flightlog/flightlog/metastore/etcd"
)

const fleetHelp = `Reads the fleet's keys in etcd (--etcd, --etcd-prefix: the fleet's Config.Prefix
is the metastore's prefix) and leads nothing. With no argument it lists the live
members (name, address, weight, drained) and the stars: the member placement
gives each one to, the member leading it (its published lead) at which epoch, a
move that pins it, and whether placement and leadership agree (no: a move or a
takeover is under way, or the star is unled). The stars are --stars (comma-
separated, the deployment's Config.Stars), else those etcd names (led or moved).

  flightlog fleet drain MEMBER      placement gives MEMBER no star while another
                                    member is live; its stars move by clean handoffs
  flightlog fleet undrain MEMBER    undo a drain
  flightlog fleet move STAR MEMBER  pin STAR on MEMBER while MEMBER is live
  flightlog fleet move STAR -       remove the pin

A drain or a move is a key outside any lease: it outlives the member's session
and restarts until it is undone. --format table (default) or json.`

// fleetArgs is the fleet command's usage line; arguments in brackets are
// checked by the command, not counted by run.
const fleetArgs = "[drain|undrain MEMBER | move STAR MEMBER|-]"

func fleetCmd(fs *flag.FlagSet, g *globalOpts) func(ctx context.Context, env *cmdEnv, args []string) int {
	stars := fs.String("stars", "", "the deployment's stars, comma-separated (default: the stars etcd names)")
	format := fs.String("format", "table", "table or json")
	return func(ctx context.Context, env *cmdEnv, args []string) int {
		if g.Etcd == "" {
			return env.fail(errors.New("fleet: the fleet lives in etcd: give --etcd (or FLIGHTLOG_ETCD_ENDPOINTS)"))
		}
		if *format != "table" && *format != "json" {
			return env.fail(fmt.Errorf("fleet: --format %q: want table or json", *format))
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(g.Etcd, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return env.fail(fmt.Errorf("fleet: etcd %s: %w", g.Etcd, err))
		}
		defer cli.Close()
		switch {
		case len(args) == 0:
			return fleetList(ctx, env, cli, g.EtcdPrefix, *stars, *format)
		case len(args) == 2 && (args[0] == "drain" || args[0] == "undrain"):
			if err := fleet.Drain(ctx, cli, g.EtcdPrefix, args[1], args[0] == "drain"); err != nil {
				return env.fail(err)
			}
			if args[0] == "drain" {
				fmt.Fprintf(env.stdout, "drained %s: its stars move to the other members (flightlog fleet shows when they have)\n", args[1])
			} else {
				fmt.Fprintf(env.stdout, "undrained %s\n", args[1])
			}
			return exitOK
		case len(args) == 3 && args[0] == "move":
			member := args[2]
			if member == "-" {
				member = ""
			}
			if err := fleet.Move(ctx, cli, g.EtcdPrefix, args[1], member); err != nil {
				return env.fail(err)
			}
			if member == "" {
				fmt.Fprintf(env.stdout, "star %s is placed by hashing again\n", args[1])
			} else {
				fmt.Fprintf(env.stdout, "star %s moves to %s while %s is live (flightlog fleet shows when it has)\n", args[1], member, member)
			}
			return exitOK
		}
		return env.fail(fmt.Errorf("fleet: want no argument, drain MEMBER, undrain MEMBER, or move STAR MEMBER|-; got %q", strings.Join(args, " ")))
	}
}

// fleetStar is one star's line of the listing.
type fleetStar struct {
	Star   string `json:"star"`
	Placed string `json:"placed,omitempty"`
	Leader string `json:"leader,omitempty"`
	Epoch  uint64 `json:"epoch,omitempty"`
	Leads  int    `json:"leads"`
	Moved  string `json:"moved,omitempty"`
	Agree  bool   `json:"agree"`
}

type fleetMember struct {
	Name    string  `json:"name"`
	Addr    string  `json:"addr"`
	Weight  float64 `json:"weight"`
	Drained bool    `json:"drained,omitempty"`
	Leads   int     `json:"leads"`
}

func fleetList(ctx context.Context, env *cmdEnv, cli *clientv3.Client, prefix, starsFlag, format string) int {
	var stars []string
	if starsFlag != "" {
		stars = strings.Split(starsFlag, ",")
	} else {
		var err error
		if stars, err = fleet.StarsOf(ctx, cli, prefix); err != nil {
			return env.fail(fmt.Errorf("%w (give --stars to list placement without leads)", err))
		}
	}
	meta, err := etcd.New(etcd.Config{Client: cli, Prefix: prefix})
	if err != nil {
		return env.fail(err)
	}
	defer meta.Close()
	r, err := fleet.NewRouter(ctx, cli, fleet.Config{Prefix: prefix, Stars: stars, Meta: meta})
	if err != nil {
		return env.fail(err)
	}
	r.Close() // the table as loaded: a snapshot
	st := r.Stats()
	drained := map[string]bool{}
	for _, m := range st.Drained {
		drained[m] = true
	}
	placement := r.Placement()
	var ms []fleetMember
	leadsOf := map[string]int{}
	var ss []fleetStar
	for _, s := range stars {
		line := fleetStar{Star: s, Placed: placement[s], Moved: st.Moves[s]}
		ls := r.Leads(s)
		line.Leads = len(ls)
		if len(ls) > 0 {
			line.Leader, line.Epoch = ls[0].Member.Name, ls[0].Epoch
			leadsOf[line.Leader]++
		}
		line.Agree = len(ls) == 1 && line.Leader == line.Placed
		ss = append(ss, line)
	}
	for _, m := range r.Members() {
		w := m.Weight
		if w == 0 {
			w = 1
		}
		ms = append(ms, fleetMember{Name: m.Name, Addr: m.Addr, Weight: w, Drained: drained[m.Name], Leads: leadsOf[m.Name]})
	}
	if format == "json" {
		enc := json.NewEncoder(env.stdout)
		enc.Encode(struct {
			Members []fleetMember `json:"members"`
			Stars   []fleetStar   `json:"stars"`
			Unled   int           `json:"unled"`
		}{ms, ss, st.Unled})
		return exitOK
	}
	tw := tabwriter.NewWriter(env.stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tADDR\tWEIGHT\tDRAINED\tLEADS")
	for _, m := range ms {
		fmt.Fprintf(tw, "%s\t%s\t%g\t%s\t%d\n", m.Name, m.Addr, m.Weight, yesNo(m.Drained), m.Leads)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "STAR\tPLACED\tLEADER\tEPOCH\tMOVED\tAGREE")
	for _, s := range ss {
		leader, epoch := dash(s.Leader), "-"
		if s.Leader != "" {
			epoch = fmt.Sprint(s.Epoch)
		}
		if s.Leads > 1 {
			leader += fmt.Sprintf(" (+%d deposed)", s.Leads-1)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Star, dash(s.Placed), leader, epoch, dash(s.Moved), yesNo(s.Agree))
	}
	tw.Flush()
	fmt.Fprintf(env.stdout, "\n%d members, %d stars, %d unled\n", len(ms), len(ss), st.Unled)
	return exitOK
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
