package main

import (
	"encoding/json"
	"flag"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/flightlog/flightlog/loglet"
)

// TestBenchChargesMeasuredTransit: with settlement on, bench charges
// transit storage for the bytes it measured held, not --transit-hours, and
// says so in --json and in the table; with it off, the assumption.
func TestBenchChargesMeasuredTransit(t *testing.T) {
	args := []string{"bench", "--model", "custom", "--k", "3", "--w", "2", "--put-median", "1ms", "--put-p99", "3ms",
		"--duration", "1s", "--producers", "4", "--streams", "2", "--record-size", "256"}
	code, out, errs := cli(t, "", append(args, "--json", "--settle-interval", "50ms")...)
	if code != exitOK {
		t.Fatalf("bench --settle-interval: exit %d\n%s%s", code, out, errs)
	}
	var res benchResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, out)
	}
	t.Logf("transit: %s, %.0f bytes held, residency %.3fs, %g h; storage $%g", res.TransitStorage, res.TransitHeldBytes, res.TransitResidency, res.TransitHours, res.Cost.Storage)
	if res.TransitStorage != "measured" || res.SettleInterval != "50ms" || res.TransitHeldBytes <= 0 || res.TransitResidency <= 0 ||
		res.TransitHours >= 1 || math.Abs(res.TransitHours*3600-res.TransitResidency) > 0.01 || res.Cost.Storage <= 0 {
		t.Fatalf("with settlement on, want measured transit storage: %+v", res)
	}
	code, out, errs = cli(t, "", append(args, "--json", "--duration", "200ms", "--settle-interval", "-1ns")...)
	res = benchResult{}
	if code != exitOK || json.Unmarshal([]byte(out), &res) != nil || res.TransitStorage != "assumed" || res.TransitHours != 1 {
		t.Fatalf("settlement off: exit %d, want the assumed 1h\n%s%s", code, out, errs)
	}
	code, out, errs = cli(t, "", "bench", "--model", "s3-express", "--duration", "1s", "--producers", "2", "--settle-interval", "50ms")
	if code != exitOK || !strings.Contains(out, "measured with settlement on") || !strings.Contains(out, "held in transit on average") {
		t.Fatalf("bench table with settlement: exit %d\n%s%s", code, out, errs)
	}
}

// TestSettleIntervalFlag (issue 24, item 3): settlement is on by default
// in the CLI as in the library. --settle-interval (or
// FLIGHTLOG_SETTLE_INTERVAL) reaches the star's Config, a negative value
// turning it off, and bench settles at the library's default unless told
// otherwise.
func TestSettleIntervalFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want time.Duration
	}{
		{nil, nil, 0}, // the library's default: on
		{[]string{"--settle-interval", "250ms"}, nil, 250 * time.Millisecond},
		{nil, map[string]string{"FLIGHTLOG_SETTLE_INTERVAL": "-1ns"}, -1},
		{[]string{"--settle-interval", "2s"}, map[string]string{"FLIGHTLOG_SETTLE_INTERVAL": "-1ns"}, 2 * time.Second},
	} {
		g := &globalOpts{}
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		g.register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if err := g.fromEnv(fs, mapEnv(tc.env)); err != nil {
			t.Fatal(err)
		}
		if got := g.starConfig(&backends{}, io.Discard).SettleInterval; got != tc.want {
			t.Errorf("%v with %v: SettleInterval %v, want %v", tc.args, tc.env, got, tc.want)
		}
	}
	code, out, errs := cli(t, "", "bench", "--model", "custom", "--k", "1", "--w", "1", "--class", "standard", "--put-median", "1ms", "--put-p99", "3ms",
		"--duration", "200ms", "--producers", "2", "--streams", "2", "--json")
	var res benchResult
	if code != exitOK || json.Unmarshal([]byte(out), &res) != nil {
		t.Fatalf("bench: exit %d\n%s%s", code, out, errs)
	}
	if res.SettleInterval != loglet.DefaultSettleInterval.String() || res.TransitStorage == "assumed" {
		t.Fatalf("bench without --settle-interval: settle interval %q, transit %q; want the library's default, %v, and settlement on",
			res.SettleInterval, res.TransitStorage, loglet.DefaultSettleInterval)
	}
}
