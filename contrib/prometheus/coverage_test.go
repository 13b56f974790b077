package flightprom

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flightlog/flightlog/histogram"
	"github.com/flightlog/flightlog/loglet"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// notExported are the ClassStats fields no metric carries, and why.
var notExported = map[string]string{
	"Phase":                  "text: in Stats and the logs",
	"HaltCause":              "text: in Stats and the logs",
	"SuccessionStep":         "text: in Stats and the logs",
	"SuccessionCause":        "text: in Stats and the logs",
	"SuccessionFailingSince": "a time: succession_failures counts the attempts",
	"Backlog.StallingCause":  "text: backlog_stalls_total counts ended stalls by cause",
	"Settle.LastError":       "text: in Stats and the logs",
	"UnderReplSlots":         "slot numbers for a repair pass, not a figure",
	"BucketNames":            "the bucket label of put_latency_seconds",
	"StragglerBytes":         "the same figure as Memory.Stragglers: memory_bytes{part=\"stragglers\"}",
}

// TestEveryChainFigureIsExported: each figure of ClassStats, set alone,
// changes what the collector sends, unless notExported says why not. A
// figure added to the core's stats without a metric here fails.
func TestEveryChainFigureIsExported(t *testing.T) {
	c := New(nil)
	render := func(s *loglet.ClassStats) string {
		ch := make(chan prometheus.Metric, 1024)
		c.collectChain(ch, "s", "standard", s)
		close(ch)
		var out []string
		for m := range ch {
			var d dto.Metric
			if err := m.Write(&d); err != nil {
				t.Fatalf("%s: %v", m.Desc(), err)
			}
			out = append(out, m.Desc().String()+" "+d.String())
		}
		slices.Sort(out)
		return strings.Join(out, "\n")
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
			t.Errorf("ClassStats.%s is exported by no metric (add one, or say why in notExported)", l.name)
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
