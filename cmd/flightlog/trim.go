package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	"github.com/flightlog/flightlog/loglet"
)

const trimHelp = `
trim makes the stream's records below SEQ unreadable, for every reader: a read
from below SEQ starts at SEQ. The trim point only grows (a SEQ at or below it
changes nothing) and a SEQ past the stream's tail trims to the tail. Then the
refs wholly below it and the settled objects behind them are deleted (chain
slots are shared between streams: settlement reclaims them). A service leading
the star honours a trim written here within 5 seconds.`

// trimCmd: flightlog trim STREAM SEQ.
func trimCmd(fs *flag.FlagSet, _ *globalOpts) func(context.Context, *cmdEnv, []string) int {
	lf := &leadFlags{}
	lf.register(fs)
	return func(ctx context.Context, env *cmdEnv, args []string) int {
		seq, err := strconv.ParseUint(args[1], 10, 64)
		if err != nil {
			env.errorf("trim: SEQ %q is not a sequence number", args[1])
			return exitCannot
		}
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
		if err := star.Trim(ctx, args[0], seq); err != nil {
			return env.failStream(err)
		}
		res, err := star.Read(ctx, args[0], loglet.ReadQuery{Start: loglet.AtSeq(0), MaxRecords: 1})
		if err != nil {
			return env.fail(err)
		}
		first := res.Next
		if len(res.Records) > 0 {
			first = res.Records[0].Seq
		}
		fmt.Fprintf(env.stdout, "%s: trimmed; the first readable record is %d (tail %d)\n", args[0], first, res.Tail.Seq)
		return exitOK
	}
}
