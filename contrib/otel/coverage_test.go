package flightotel

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flightlog/flightlog/histogram"
	"github.com/flightlog/flightlog/loglet"
)

// notExported are the ClassStats fields no metric carries, and why.
var notExported = map[string]string{
	"Phase":                  "text: in Stats and the logs",
	"HaltCause":              "text: in Stats and the logs",
	"SuccessionStep":         "text: in Stats and the logs",
	"SuccessionCause":        "text: in Stats and the logs",
	"SuccessionFailingSince": "a time: flightlog.succession.failures counts the attempts",
	"Backlog.StallingCause":  "text",
	"Backlog.Stalls":         "per-cause counts: not exported here yet (flightprom's backlog_stalls_total has them)",
	"Settle.LastError":       "text: in Stats and the logs",
	"UnderReplSlots":         "slot numbers for a repair pass, not a figure",
	"BucketNames":            "the flightlog.bucket attribute of flightlog.put.latency",
	"StragglerBytes":         "the same figure as Memory.Stragglers: flightlog.memory.stragglers",
}

// TestEveryChainFigureIsExported: each figure of ClassStats, set alone,
// changes what an instrument or the Producer reports, unless notExported
// says why not. A figure added to the core's stats without an instrument
// here fails.
func TestEveryChainFigureIsExported(t *testing.T) {
	t0 := time.Unix(1, 0)
	render := func(s *loglet.ClassStats) string {
		var b strings.Builder
		for _, in := range chainInstrs {
			fmt.Fprintf(&b, "%s %d\n", in.name, in.get(s))
		}
		for _, in := range chainSecs {
			fmt.Fprintf(&b, "%s %v\n", in.name, in.get(s))
		}
		fmt.Fprintf(&b, "%+v\n", histograms(loglet.Stats{Star: "s", Standard: s}, t0, t0))
		return b.String()
	}
	base := render(&loglet.ClassStats{})
	seen := map[string]bool{}
	for _, l := range leaves(reflect.TypeFor[loglet.ClassStats](), nil, "") {
		seen[l.name] = true
		if _, ok := notExported[l.name]; ok {
			continue
		}
		var s loglet.ClassStats
		setNonZero(t, reflect.ValueOf(&s).Elem().FieldByIndex(l.index), l.name)
		if render(&s) == base {
			t.Errorf("ClassStats.%s is exported by no instrument (add one, or say why in notExported)", l.name)
		}
	}
	for name := range notExported {
		if !seen[name] {
			t.Errorf("notExported names %s, which ClassStats does not have", name)
		}
	}
}

type leaf struct {
	name  string
	index []int
}

// leaves lists the figures of t: its fields, and those of the structs it
// holds, but histogram snapshots and times, which are figures themselves.
func leaves(t reflect.Type, index []int, prefix string) []leaf {
	var out []leaf
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		idx := append(slices.Clone(index), i)
		name := prefix + f.Name
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[histogram.Snapshot]() && f.Type != reflect.TypeFor[time.Time]() {
			out = append(out, leaves(f.Type, idx, name+".")...)
			continue
		}
		out = append(out, leaf{name, idx})
	}
	return out
}

func setNonZero(t *testing.T, v reflect.Value, name string) {
	snap := histogram.Snapshot{Count: 3, ZeroCount: 3}
	switch {
	case v.Type() == reflect.TypeFor[histogram.Snapshot]():
		v.Set(reflect.ValueOf(snap))
	case v.Type() == reflect.TypeFor[[]histogram.Snapshot]():
		v.Set(reflect.ValueOf([]histogram.Snapshot{snap}))
	case v.Type() == reflect.TypeFor[map[string]uint64]():
		v.Set(reflect.ValueOf(map[string]uint64{"cause": 3}))
	case v.CanInt():
		v.SetInt(3)
	case v.CanUint():
		v.SetUint(3)
	case v.CanFloat():
		v.SetFloat(3)
	case v.Kind() == reflect.Bool:
		v.SetBool(true)
	default:
		t.Fatalf("ClassStats.%s: a %v; teach setNonZero, or say why it is not exported", name, v.Type())
	}
}
