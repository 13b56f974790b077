package main

import (
	"bufio"
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"
)

// logLine is one line of a member's log (slog's default handler through
// log, with microseconds): when, the message, its key=value attributes.
type logLine struct {
	at     time.Time
	member string
	msg    string
	attrs  map[string]string
}

// memberLogTime is the layout of the members' log timestamps
// (log.LstdFlags | log.Lmicroseconds).
const memberLogTime = "2006/01/02 15:04:05.000000"

// parseLog reads the fleet's lines ("fleet: ...") of a member's log.
// Values with spaces (quoted) are not split correctly; the stages read only
// plain ones.
func parseLog(member string, log []byte) []logLine {
	var out []logLine
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if len(line) < len(memberLogTime) || !strings.Contains(line, " fleet: ") {
			continue
		}
		at, err := time.ParseInLocation(memberLogTime, line[:len(memberLogTime)], time.Local)
		if err != nil {
			continue
		}
		_, rest, _ := strings.Cut(line[len(memberLogTime):], " fleet: ")
		l := logLine{at: at, member: member, attrs: map[string]string{}}
		fields := strings.Fields(rest)
		var words []string
		for _, f := range fields {
			if k, v, ok := strings.Cut(f, "="); ok {
				l.attrs[k] = v
			} else if len(l.attrs) == 0 {
				words = append(words, f)
			}
		}
		l.msg = strings.Join(words, " ")
		out = append(out, l)
	}
	return out
}

// stage names, in the order of a planned move.
var stageNames = []string{
	"last ack -> close starts (appends refused)",
	"Star.Close (flush, absorb, seal)",
	"lead withdrawn",
	"new owner decides (watch)",
	"new owner opens and publishes",
	"  of which claim",
	"  of which loglet.Open",
	"  of which publish",
	"test's router sees the lead (watch; from the log line)",
	"first ack after the lead",
	"whole window (last ack -> first ack)",
}

// stages logs where each planned move's window went, from the members'
// logs (the old owner's "closing star", "star closed", "lead withdrawn";
// the new owner's "opening star", "leading star"), the test's router (the
// lead seen) and the writers' acks: the p50 of each stage over the moved
// stars of the planned events. All processes share the machine's clock.
func (c *churn) stages(events []event) {
	var lines []logLine
	for _, p := range c.exited {
		lines = append(lines, parseLog(p.name, p.log.Bytes())...)
	}
	slices.SortStableFunc(lines, func(a, b logLine) int { return a.at.Compare(b.at) })
	find := func(from time.Time, pred func(logLine) bool) (logLine, bool) {
		for _, l := range lines {
			if !l.at.Before(from) && pred(l) {
				return l, true
			}
		}
		return logLine{}, false
	}
	dur := func(l logLine, k string) time.Duration {
		d, _ := time.ParseDuration(l.attrs[k])
		return d
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	got := map[string][]time.Duration{}
	missed := 0
	for _, e := range events {
		if e.kind != "planned" {
			continue
		}
		for _, s := range e.moved {
			closing, ok1 := find(e.start, func(l logLine) bool {
				return l.msg == "closing star" && l.attrs["star"] == s && !l.at.After(e.end)
			})
			closed, ok2 := find(closing.at, func(l logLine) bool {
				return l.msg == "star closed" && l.attrs["star"] == s && l.member == closing.member
			})
			withdrawn, ok3 := find(closed.at, func(l logLine) bool {
				return l.msg == "lead withdrawn" && l.attrs["star"] == s && l.member == closing.member
			})
			leading, ok4 := find(closing.at, func(l logLine) bool {
				return l.msg == "leading star" && l.attrs["star"] == s && l.member != closing.member
			})
			// The last attempt's decision: opens refused before it retried.
			var opening logLine
			ok5 := false
			for _, l := range lines {
				if l.at.After(leading.at) {
					break
				}
				if !l.at.Before(closing.at) && l.msg == "opening star" && l.attrs["star"] == s && l.member == leading.member {
					opening, ok5 = l, true
				}
			}
			var led time.Time
			for _, h := range c.handoffs {
				// The watch may show the lead before its member logs it.
				if h.star == s && !h.led.Before(opening.at) {
					led = h.led
					break
				}
			}
			as := c.acks[s]
			i, _ := slices.BinarySearchFunc(as, closing.at, func(a, t time.Time) int { return a.Compare(t) })
			j, _ := slices.BinarySearchFunc(as, leading.at, func(a, t time.Time) int { return a.Compare(t) })
			if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || led.IsZero() || i == 0 || j == len(as) {
				missed++
				continue
			}
			lastAck, firstAck := as[i-1], as[j]
			for k, d := range []time.Duration{
				closing.at.Sub(lastAck),
				closed.at.Sub(closing.at),
				withdrawn.at.Sub(closed.at),
				opening.at.Sub(withdrawn.at),
				leading.at.Sub(opening.at),
				dur(leading, "claim"),
				dur(leading, "open"),
				dur(leading, "publish"),
				led.Sub(leading.at),
				firstAck.Sub(leading.at),
				firstAck.Sub(lastAck),
			} {
				got[stageNames[k]] = append(got[stageNames[k]], d)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "where the planned moves' windows went (%d moves; %d not traced), from the members' logs:", len(got[stageNames[0]]), missed)
	for _, name := range stageNames {
		fmt.Fprintf(&b, "\n    %-44s %s", name, quantiles(got[name]))
	}
	c.t.Log(b.String())
}
