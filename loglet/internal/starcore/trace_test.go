package starcore

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestTraces runs the data-driven scripts in testdata: each command calls
// the core or steps an event into it, and its expected output is what the
// core then asks for, logs and reports, in order. Rewrite the expected
// output after a deliberate change with
//
//	go test ./loglet/internal/starcore -run TestTraces -rewrite
//
// Commands (CLASS is standard or express; arguments are key=value):
//
//	new [classes=standard,express] [refuse-live] [all-at-once] [max=4] [owner=p1]
//	open | close | crash
//	epoch-read CLASS missing | epoch-read CLASS epoch= owner= [sealed=E] | epoch-read CLASS err
//	checkpoint-read CLASS owner= epoch= | checkpoint-read CLASS err
//	opened CLASS epoch= | lost CLASS | live CLASS | failed CLASS   (a chain's opening)
//	abandoned CLASS | closed CLASS [err] | released [err]
//	chain-lost CLASS   (a serving chain's core found a successor: ChainLost)
//	holds
func TestTraces(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var c *Core
		var cfg Config
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "new" && c == nil {
				d.Fatalf(t, "new first")
			}
			var err error
			switch d.Cmd {
			case "new":
				cfg = Config{Star: "s1", Owner: "p1", Classes: []Class{Standard, Express}, MaxTakeovers: 4,
					RefuseLiveOwner: d.HasArg("refuse-live"), AllAtOnce: d.HasArg("all-at-once")}
				if d.HasArg("classes") {
					var names []string
					d.ScanArgs(t, "classes", &names)
					cfg.Classes = nil
					for _, n := range strings.Split(strings.Join(names, ","), ",") {
						if n != "" {
							cfg.Classes = append(cfg.Classes, parseClass(t, d, n))
						}
					}
				}
				if d.HasArg("max") {
					cfg.MaxTakeovers = int(num(t, d, "max"))
				}
				if d.HasArg("owner") {
					cfg.Owner = arg(t, d, "owner")
				}
				c, err = New(cfg)
				if err != nil {
					return "error: " + err.Error() + "\n"
				}
				return "ok\n"
			case "open":
				err = c.Open()
			case "close":
				err = c.Close()
			case "crash":
				err = c.Crash()
			case "holds":
				var b strings.Builder
				for _, class := range []Class{Standard, Express} {
					e, ok := c.Holds(class)
					fmt.Fprintf(&b, "%s: held=%v epoch=%d\n", class, ok, e)
				}
				fmt.Fprintf(&b, "phase %s\n", c.Phase())
				return b.String()
			case "epoch-read":
				ev := EpochRead{Class: cmdClass(t, d)}
				switch {
				case d.HasArg("missing"):
					ev.Missing = true
				case d.HasArg("err"):
					ev.Err = errors.New("metastore: unavailable")
				default:
					ev.Record = EpochRecord{Epoch: num(t, d, "epoch"), Owner: arg(t, d, "owner")}
					if d.HasArg("sealed") {
						ev.Record.Sealed, ev.Record.SealEpoch = true, num(t, d, "sealed")
					}
				}
				err = c.Step(ev)
			case "checkpoint-read":
				ev := CheckpointRead{Class: cmdClass(t, d)}
				if d.HasArg("err") {
					ev.Err = errors.New("metastore: unavailable")
				} else {
					ev.Owner, ev.OwnerEpoch = arg(t, d, "owner"), num(t, d, "epoch")
				}
				err = c.Step(ev)
			case "opened":
				err = c.Step(ChainOpened{Class: cmdClass(t, d), Outcome: OutcomeOpened, Epoch: num(t, d, "epoch")})
			case "lost":
				err = c.Step(ChainOpened{Class: cmdClass(t, d), Outcome: OutcomeLost, Err: errors.New("leader: another process took over the chain first")})
			case "live":
				err = c.Step(ChainOpened{Class: cmdClass(t, d), Outcome: OutcomeLiveOwner, Err: errors.New("leader: the chain has a live owner")})
			case "failed":
				err = c.Step(ChainOpened{Class: cmdClass(t, d), Outcome: OutcomeFailed, Err: errors.New("context canceled")})
			case "abandoned":
				err = c.Step(Abandoned{Class: cmdClass(t, d)})
			case "closed":
				ev := ChainClosed{Class: cmdClass(t, d)}
				if d.HasArg("err") {
					ev.Err = fmt.Errorf("loglet: close %s: bucket down", ev.Class)
				}
				err = c.Step(ev)
			case "chain-lost":
				err = c.ChainLost(cmdClass(t, d), errors.New("leader: deposed"))
			case "released":
				ev := HostReleased{}
				if d.HasArg("err") {
					ev.Errs = []error{errors.New("bbolt: close: file busy")}
				}
				err = c.Step(ev)
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			out := ready(c.Ready())
			if err != nil {
				out = "error: " + err.Error() + "\n" + out
			}
			return out
		})
	})
}

// ready renders what the core asked for, logged and reported.
func ready(rd Ready) string {
	if rd.Empty() {
		return "(nothing)\n"
	}
	var b strings.Builder
	for _, r := range rd.Requests {
		b.WriteString(Describe(r) + "\n")
	}
	for _, l := range rd.Logs {
		b.WriteString("log \"" + l.Msg + "\"")
		for i := 0; i+1 < len(l.KV); i += 2 {
			fmt.Fprintf(&b, " %v=%v", l.KV[i], l.KV[i+1])
		}
		b.WriteString("\n")
	}
	for _, r := range []struct {
		what string
		res  *Result
	}{{"opened", rd.Opened}, {"closed", rd.Closed}} {
		if r.res == nil {
			continue
		}
		if r.res.Err == nil {
			b.WriteString(r.what + ": ok\n")
			continue
		}
		var kinds []string
		for _, k := range []struct {
			name string
			err  error
		}{{"takeover-lost", ErrTakeoverLost}, {"live-owner", ErrLiveOwner}} {
			if errors.Is(r.res.Err, k.err) {
				kinds = append(kinds, k.name)
			}
		}
		fmt.Fprintf(&b, "%s: error %v: %v\n", r.what, kinds, r.res.Err)
	}
	return b.String()
}

func cmdClass(t *testing.T, d *datadriven.TestData) Class {
	if len(d.CmdArgs) == 0 {
		d.Fatalf(t, "%s: which class?", d.Cmd)
	}
	return parseClass(t, d, d.CmdArgs[0].Key)
}

func parseClass(t *testing.T, d *datadriven.TestData, name string) Class {
	switch name {
	case "standard":
		return Standard
	case "express":
		return Express
	}
	d.Fatalf(t, "unknown class %q", name)
	return 0
}

func arg(t *testing.T, d *datadriven.TestData, key string) string {
	for _, a := range d.CmdArgs {
		if a.Key == key && len(a.Vals) > 0 {
			return strings.Join(a.Vals, ",")
		}
	}
	d.Fatalf(t, "%s: missing %s=", d.Cmd, key)
	return ""
}

func num(t *testing.T, d *datadriven.TestData, key string) uint64 {
	v, err := strconv.ParseUint(arg(t, d, key), 10, 64)
	if err != nil {
		d.Fatalf(t, "%s: %s=%q is not a number", d.Cmd, key, arg(t, d, key))
	}
	return v
}
