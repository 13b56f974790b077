// Package statstest checks that a metrics exporter carries every figure of
// a chain's stats (stats.Class): each figure, set alone, must change what
// the exporter renders, unless the exporter says why it does not carry it.
// contrib/prometheus and contrib/otel run it, so a figure added to the
// core's stats without a metric fails their tests.
package statstest

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/flightlog/flightlog/histogram"
	"github.com/flightlog/flightlog/loglet/stats"
)

// EveryFigureExported fails t for each figure of stats.Class (by its dotted
// field path, e.g. "Backlog.Flights") that changes nothing in render when
// set alone, unless notExported names it (with the reason), and for each
// name in notExported that stats.Class does not have. what names the
// exporter's unit in messages ("metric", "instrument").
func EveryFigureExported(t *testing.T, what string, notExported map[string]string, render func(*stats.Class) string) {
	t.Helper()
	base := render(&stats.Class{})
	seen := map[string]bool{}
	for _, l := range leaves(reflect.TypeFor[stats.Class](), nil, "") {
		seen[l.name] = true
		if _, ok := notExported[l.name]; ok {
			continue
		}
		var s stats.Class
		setNonZero(t, reflect.ValueOf(&s).Elem().FieldByIndex(l.index), l.name)
		if render(&s) == base {
			t.Errorf("ClassStats.%s is exported by no %s (add one, or say why in notExported)", l.name, what)
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
	t.Helper()
	snap := histogram.Snapshot{Count: 3, ZeroCount: 3}
	switch {
	case v.Type() == reflect.TypeFor[histogram.Snapshot]():
		v.Set(reflect.ValueOf(snap))
	case v.Type() == reflect.TypeFor[[]histogram.Snapshot]():
		v.Set(reflect.ValueOf([]histogram.Snapshot{snap}))
	case v.Type() == reflect.TypeFor[map[string]uint64]():
		v.Set(reflect.ValueOf(map[string]uint64{"cause": 3}))
	case v.Type() == reflect.TypeFor[map[string]time.Duration]():
		v.Set(reflect.ValueOf(map[string]time.Duration{"phase": 3 * time.Second}))
	case v.CanInt():
		v.SetInt(3)
	case v.CanUint():
		v.SetUint(3)
	case v.CanFloat():
		v.SetFloat(3)
	case v.Kind() == reflect.Bool:
		v.SetBool(true)
	default:
		t.Fatalf("ClassStats.%s: a %v; teach statstest's setNonZero, or say why it is not exported", name, v.Type())
	}
}
