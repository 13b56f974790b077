package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
)

const streamsHelp = `Lists from the metastore's name index (keys names/<stream name>, in byte order
of the names): one metastore scan per page of 1000 names, and nothing else. It
leads nothing and writes nothing, so it runs beside a live leader (with etcd) and
never takes a chain over. Streams of every star are listed; streams created
before the name index existed are not in it. --limit N stops after N names and
prints, on stderr, the --start-after that continues the listing.
--format table (default: name, class, star, incarnation) or json (one object a
line: {"name","class","star","incarnation"}).`

const leadHelp = `Leads the star for the one call (as append does): it takes each chain over from
a clean Close, and refuses a chain with a live owner (exit 2) unless --takeover.
`

const deleteHelp = `
delete removes the stream's record and its name-index entry, together: appends to
it fail afterwards, and a stream created again under the name is a new
incarnation starting at seq 0. Then its refs and the settled objects behind them
are deleted (chain slots are shared between streams: settlement reclaims them);
the delete stands even if that fails, and a service leading the star retries.`

// listedStream is a stream record as the name index holds it: the fields
// streams prints. (loglet's streamRecord is unexported and only a leading
// Star lists; this decodes the same JSON without leading.)
type listedStream struct {
	Name        string `json:"name"`
	Class       string `json:"class"`
	Star        string `json:"star"`
	Incarnation string `json:"incarnation,omitempty"`
}

// listStreams returns up to limit streams whose names begin with prefix,
// after the name startAfter, from the name index, by Scans of at most page
// keys: the read-only counterpart of loglet.Star.ListStreams. more reports
// that limit cut the listing short.
func listStreams(ctx context.Context, ms metastore.Store, prefix, startAfter string, limit, page int) (out []listedStream, more bool, err error) {
	after := ""
	if startAfter != "" {
		after = chain.StreamNameKey(startAfter)
	}
	for {
		n := page
		if limit > 0 {
			n = min(page, limit-len(out)+1) // one more than wanted: is there more?
		}
		items, err := ms.Scan(ctx, chain.StreamNameKey(prefix), after, n)
		if err != nil {
			return out, false, fmt.Errorf("list streams: %w", err)
		}
		for _, it := range items {
			if limit > 0 && len(out) == limit {
				return out, true, nil
			}
			var rec listedStream
			if err := json.Unmarshal(it.Value, &rec); err != nil {
				return out, false, fmt.Errorf("list streams: name index entry %s is corrupt: %v", it.Key, err)
			}
			out = append(out, rec)
		}
		if len(items) < n {
			return out, false, nil
		}
		after = items[len(items)-1].Key
	}
}

// streamsCmd: flightlog streams.
func streamsCmd(fs *flag.FlagSet, _ *globalOpts) func(context.Context, *cmdEnv, []string) int {
	prefix := fs.String("prefix", "", "list only the streams whose names begin with this")
	startAfter := fs.String("start-after", "", "start after this stream name (the last name of the previous page)")
	limit := fs.Int("limit", 0, "list at most this many (0: all)")
	format := fs.String("format", "table", "output: table or json (one object per line)")
	return func(ctx context.Context, env *cmdEnv, _ []string) int {
		switch *format {
		case "table", "json":
		default:
			return env.fail(fmt.Errorf("--format %q: want table or json", *format))
		}
		if *limit < 0 {
			return env.fail(fmt.Errorf("--limit %d: want 0 or more", *limit))
		}
		b, err := env.g.open(ctx, true)
		if err != nil {
			return env.fail(err)
		}
		defer b.Close()
		list, more, err := listStreams(ctx, b.meta, *prefix, *startAfter, *limit, 1000)
		w := bufio.NewWriter(env.stdout)
		defer w.Flush()
		if *format == "json" {
			for _, s := range list {
				line, _ := json.Marshal(s)
				w.Write(append(line, '\n'))
			}
		} else if len(list) > 0 {
			tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tCLASS\tSTAR\tINCARNATION")
			for _, s := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, s.Class, s.Star, s.Incarnation)
			}
			tw.Flush()
		}
		if err != nil {
			w.Flush()
			env.errorf("%v", err)
			return exitProblems
		}
		if more {
			w.Flush()
			env.errorf("more streams follow: --start-after %q", list[len(list)-1].Name)
		}
		return exitOK
	}
}

// leadFlags are the flags of a command that leads the star for one call.
type leadFlags struct {
	takeover bool
}

func (l *leadFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&l.takeover, "takeover", false, "lead the star even if its chain has a live owner (an epoch not sealed by a clean Close): that owner, if it is still running, is deposed and fails every later append with a not-leader error until it is restarted")
}

// lead opens the star as its leader, refusing a live owner unless
// --takeover; on failure it has reported why and returns the exit code.
func (l *leadFlags) lead(ctx context.Context, env *cmdEnv, b *backends, tweaks ...func(*loglet.Config)) (*loglet.Star, int) {
	star, err := env.g.openStarAs(ctx, b, env.stderr, !l.takeover, tweaks...)
	if errors.Is(err, loglet.ErrLiveOwner) {
		env.errorf("%v", err)
		env.errorf("refusing to take the star over from a live owner: stop the service that leads it (its clean Close seals the chain), or, if it crashed, pass --takeover (a service still running would be deposed)")
		return nil, exitCannot
	}
	if err != nil {
		return nil, env.fail(err)
	}
	return star, exitOK
}

// closeStar closes a star led for one call, reporting a failed close.
func closeStar(ctx context.Context, env *cmdEnv, star *loglet.Star) {
	if err := star.Close(ctx); err != nil {
		env.errorf("closing the star: %v (the next owner takes the chain over)", err)
	}
}

// createCmd: flightlog create STREAM.
func createCmd(fs *flag.FlagSet, _ *globalOpts) func(context.Context, *cmdEnv, []string) int {
	class := fs.String("class", "standard", "the stream's class: standard or express")
	age := fs.Duration("retention-age", 0, "trim records older than this (e.g. 168h) at the leader's retention passes; 0: keep them")
	size := fs.Int64("retention-bytes", 0, "keep about the newest this many bytes of records, trimming older ones at the leader's retention passes; 0: keep all")
	lf := &leadFlags{}
	lf.register(fs)
	return func(ctx context.Context, env *cmdEnv, args []string) int {
		c, err := chain.ParseClass(*class)
		if err != nil {
			return env.fail(err)
		}
		b, err := env.g.open(ctx, false)
		if err != nil {
			return env.fail(err)
		}
		defer b.Close()
		star, code := lf.lead(ctx, env, b)
		if star == nil {
			return code
		}
		defer closeStar(context.WithoutCancel(ctx), env, star)
		info, err := star.CreateStream(ctx, args[0], loglet.StreamOptions{Class: c, Star: env.g.Star, Retention: loglet.Retention{MaxAge: *age, MaxBytes: *size}})
		if errors.Is(err, loglet.ErrStreamExists) {
			env.errorf("%v", err)
			return exitProblems
		}
		if err != nil {
			return env.fail(err)
		}
		fmt.Fprintf(env.stdout, "%s: created (class %s, star %s, incarnation %s, %s)\n", info.Name, info.Class, info.Star, info.Incarnation, retentionText(info.Retention))
		return exitOK
	}
}

// deleteCmd: flightlog delete STREAM.
func deleteCmd(fs *flag.FlagSet, _ *globalOpts) func(context.Context, *cmdEnv, []string) int {
	lf := &leadFlags{}
	lf.register(fs)
	return func(ctx context.Context, env *cmdEnv, args []string) int {
		b, err := env.g.open(ctx, true)
		if err != nil {
			return env.fail(err)
		}
		defer b.Close()
		star, code := lf.lead(ctx, env, b)
		if star == nil {
			return code
		}
		defer closeStar(context.WithoutCancel(ctx), env, star)
		if err := star.DeleteStream(ctx, args[0]); err != nil {
			return env.failStream(err)
		}
		fmt.Fprintf(env.stdout, "%s: deleted (its refs and settled objects reclaimed)\n", args[0])
		return exitOK
	}
}

// plural returns "n thing" or "n things".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
