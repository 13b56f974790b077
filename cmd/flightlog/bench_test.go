package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flightlog/flightlog/objstore"
)

// TestBenchStages: bench --json reports the stage breakdown of every acked
// batch, with figures that fit a latency model (the render and the W-th
// copy take time; nothing is negative; percentiles ascend), and the table
// prints it.
func TestBenchStages(t *testing.T) {
	code, out, errs := cli(t, "", "bench", "--model", "custom", "--k", "3", "--w", "2", "--put-median", "1ms", "--put-p99", "3ms",
		"--duration", "300ms", "--producers", "4", "--streams", "2", "--record-size", "256", "--depth", "4", "--json")
	if code != exitOK {
		t.Fatalf("bench: exit %d\n%s%s", code, out, errs)
	}
	var res benchResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, out)
	}
	st := res.Stages
	if st == nil {
		t.Fatalf("bench --json has no stages:\n%s", out)
	}
	t.Logf("stages: %+v", *st)
	if st.FlushDeadline != "1ms" { // the Express class's default
		t.Errorf("flush deadline %q, want 1ms", st.FlushDeadline)
	}
	if st.Batches == 0 || int64(st.Batches)*int64(res.Batch) != res.Records || st.Skipped != 0 {
		t.Errorf("%d batches of %d records (%d skipped), but %d records acked", st.Batches, res.Batch, st.Skipped, res.Records)
	}
	for _, s := range []struct {
		name    string
		l       latency
		nonzero bool
	}{{"cut_over", st.CutOver, false}, {"claim_put", st.ClaimPut, true}, {"wth_copy", st.WthCopy, true},
		{"order_wait", st.OrderWait, false}, {"to_producer", st.ToProducer, false}, {"own_cost", st.OwnCost, false}} {
		if s.l.P50 < 0 || s.l.P99 < s.l.P50 || s.l.P999 < s.l.P99 {
			t.Errorf("%s: %+v: negative or not ascending", s.name, s.l)
		}
		if s.nonzero && s.l.P50 <= 0 {
			t.Errorf("%s: p50 %v, want > 0", s.name, s.l.P50)
		}
	}
	// The W-th of three copies of a PUT of median 1ms takes at least a
	// fraction of a millisecond; the ack as a whole contains it.
	if st.WthCopy.P50 < 100 || st.WthCopy.P50 > res.Ack.P999 {
		t.Errorf("wth_copy p50 %vµs, want between 100µs and the ack's p99.9 %vµs", st.WthCopy.P50, res.Ack.P999)
	}
	if st.OwnCost.P50 > res.Ack.P50 {
		t.Errorf("own_cost p50 %vµs above the ack's %vµs", st.OwnCost.P50, res.Ack.P50)
	}

	code, out, errs = cli(t, "", "bench", "--model", "s3-express", "--duration", "200ms", "--producers", "2")
	if code != exitOK || !strings.Contains(out, "stage (µs;") || !strings.Contains(out, "own-cost (ack past ideal release)") ||
		!strings.Contains(out, "wth-copy") {
		t.Fatalf("bench table: exit %d\n%s%s", code, out, errs)
	}
}

// TestPutBaselineOnlyForSDKStores: the latency models have no SDK client
// behind them, so the PUT baseline is left out rather than faked.
func TestPutBaselineOnlyForSDKStores(t *testing.T) {
	b, err := measurePutBaseline(context.Background(), objstore.NewMem(), "bench", 1024)
	if b != nil || err != nil {
		t.Fatalf("measurePutBaseline(mem) = %+v, %v; want nil, nil", b, err)
	}
}

// TestBenchCPUProfile: --cpuprofile writes a profile pprof can read (it
// starts with gzip's magic), and a model run carries no PUT baseline.
func TestBenchCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.prof")
	code, out, errs := cli(t, "", "bench", "--model", "custom", "--k", "1", "--w", "1", "--class", "standard",
		"--put-median", "1ms", "--put-p99", "3ms", "--duration", "200ms", "--producers", "2", "--streams", "1",
		"--record-size", "128", "--json", "--cpuprofile", path)
	if code != exitOK {
		t.Fatalf("bench: exit %d\n%s%s", code, out, errs)
	}
	data, err := os.ReadFile(path)
	if err != nil || len(data) < 2 || data[0] != 0x1f || data[1] != 0x8b {
		t.Fatalf("--cpuprofile wrote %d bytes (%v); want a gzipped profile", len(data), err)
	}
	if strings.Contains(out, "put_baseline") {
		t.Errorf("a model run reports a PUT baseline:\n%s", out)
	}
}
