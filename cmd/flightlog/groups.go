package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/flightlog/flightlog/loglet/groups"
)

const groupsHelp = `Shows each consumer group with an offset on the stream's current incarnation:
its committed next record (NEXT), the stream's durable tail as absorbed (TAIL),
its trim point (TRIM), how many readable records the group has not processed
(LAG = TAIL - max(NEXT, TRIM)) and their decoded bytes (BYTES, from the refs'
frame runs: whole runs, so a little more than exact). It reads the metastore
(every offset key, and the stream's refs past the group furthest behind) and
the stream's tails snapshot, and leads nothing, so it runs beside a live
leader (with etcd).

--group G --reset-to N moves G's offset to N (backwards replays, forwards skips);
--group G --delete removes G's offset (its next session starts afresh, at its
start position). Both are compare-and-swaps on the offset as just read: a
session of the group committing at the same time wins or loses cleanly, and a
session already open goes on from where it is (it never moves backwards). They
write the offset only, and lead nothing.`

// groupsCmd: flightlog groups STREAM.
func groupsCmd(fs *flag.FlagSet, _ *globalOpts) func(context.Context, *cmdEnv, []string) int {
	group := fs.String("group", "", "the group --reset-to or --delete acts on")
	resetTo := fs.String("reset-to", "", "move --group's offset to this sequence number")
	del := fs.Bool("delete", false, "delete --group's offset")
	return func(ctx context.Context, env *cmdEnv, args []string) int {
		stream := args[0]
		var to uint64
		if *resetTo != "" {
			n, err := strconv.ParseUint(*resetTo, 10, 64)
			if err != nil {
				return env.fail(fmt.Errorf("--reset-to %q: want a sequence number", *resetTo))
			}
			to = n
		}
		acting := *resetTo != "" || *del
		switch {
		case *resetTo != "" && *del:
			return env.fail(errors.New("--reset-to and --delete: want one of them"))
		case acting && *group == "":
			return env.fail(errors.New("--reset-to and --delete need --group"))
		case !acting && *group != "":
			return env.fail(errors.New("--group without --reset-to or --delete: the listing shows every group"))
		}
		if *group != "" {
			if err := groups.ValidateKey(*group, stream); err != nil {
				return env.fail(err)
			}
		}
		b, err := env.g.open(ctx, true)
		if err != nil {
			return env.fail(err)
		}
		defer b.Close()
		r, err := b.reader(0)
		if err != nil {
			return env.fail(err)
		}
		o := groups.OffsetsOf(r)
		if acting {
			prev, err := o.Get(ctx, *group, stream)
			if err != nil {
				return env.failStream(err)
			}
			if *del {
				if err := o.Delete(ctx, prev); err != nil {
					return env.failStream(err)
				}
				fmt.Fprintf(env.stdout, "%s on %s: offset deleted (was %d)\n", *group, stream, prev.Next)
				return exitOK
			}
			if _, err := o.Reset(ctx, prev, to); err != nil {
				return env.failStream(err)
			}
			fmt.Fprintf(env.stdout, "%s on %s: offset moved from %d to %d\n", *group, stream, prev.Next, to)
			return exitOK
		}
		lags, err := groups.Lags(ctx, r, stream, groups.LagOptions{Bytes: true})
		if err != nil {
			return env.failStream(err)
		}
		if len(lags) == 0 {
			env.errorf("no group has an offset on %s", stream)
			return exitOK
		}
		tw := tabwriter.NewWriter(env.stdout, 2, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "GROUP\tNEXT\tTAIL\tTRIM\tLAG\tBYTES")
		for _, l := range lags {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\n", l.Offset.Group, l.Offset.Next, l.Tail, l.TrimSeq, l.Records, l.Bytes)
		}
		tw.Flush()
		return exitOK
	}
}
