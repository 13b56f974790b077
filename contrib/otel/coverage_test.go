package flightotel

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/stats/statstest"
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
		fmt.Fprintf(&b, "%+v\n", passPhases(s))
		fmt.Fprintf(&b, "%+v\n", histograms(loglet.Stats{Star: "s", Standard: s}, t0, t0))
		return b.String()
	}
	statstest.EveryFigureExported(t, "instrument", notExported, render)
}
