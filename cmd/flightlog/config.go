package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/flightlog/flightlog/loglet"
)

const configHelp = `With no flags, prints the stream's options. --retention-age D and
--retention-bytes N change them (0 turns that retention off; a flag not given
keeps its value): a compare-and-swap on the stream record as just read, which
never lands on another incarnation (a name deleted and created again meanwhile
is "not found") and never undoes a concurrent trim. It writes the stream record
only, and leads nothing: the star's leader, wherever it runs, applies the new
retention at its next retention pass (Config.RetentionInterval, a minute by
default).`

// configCmd: flightlog config STREAM.
func configCmd(fs *flag.FlagSet, _ *globalOpts) func(context.Context, *cmdEnv, []string) int {
	age := fs.Duration("retention-age", 0, "trim records older than this (e.g. 168h); 0 turns retention by age off")
	size := fs.Int64("retention-bytes", 0, "keep about the newest this many bytes of records; 0 turns retention by bytes off")
	return func(ctx context.Context, env *cmdEnv, args []string) int {
		var u loglet.StreamUpdate
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "retention-age":
				u.RetentionMaxAge = age
			case "retention-bytes":
				u.RetentionMaxBytes = size
			}
		})
		switch {
		case u.RetentionMaxAge != nil && *age < 0:
			return env.fail(fmt.Errorf("--retention-age %v: want 0 (off) or more", *age))
		case u.RetentionMaxBytes != nil && *size < 0:
			return env.fail(fmt.Errorf("--retention-bytes %d: want 0 (off) or more", *size))
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
		info, err := r.ConfigureStream(ctx, args[0], u)
		if err != nil {
			if errors.Is(err, loglet.ErrStreamNotFound) {
				return env.failStream(err)
			}
			return env.fail(err)
		}
		what := "options"
		if u.RetentionMaxAge != nil || u.RetentionMaxBytes != nil {
			what = "configured"
		}
		fmt.Fprintf(env.stdout, "%s: %s (class %s, star %s, incarnation %s, %s)\n", info.Name, what, info.Class, info.Star, info.Incarnation, retentionText(info.Retention))
		return exitOK
	}
}

// retentionText says what a stream's retention keeps.
func retentionText(r loglet.Retention) string {
	if r.MaxAge <= 0 && r.MaxBytes <= 0 {
		return "retention off"
	}
	s := "retention"
	if r.MaxAge > 0 {
		s += " age " + r.MaxAge.String()
	} else {
		s += " age off"
	}
	if r.MaxBytes > 0 {
		s += fmt.Sprintf(", bytes %d", r.MaxBytes)
	} else {
		s += ", bytes off"
	}
	return s
}
