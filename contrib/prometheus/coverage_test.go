package flightprom

import (
	"slices"
	"strings"
	"testing"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/stats/statstest"
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
	statstest.EveryFigureExported(t, "metric", notExported, render)
}
