package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"unicode/utf8"
)

// cdfPoint is one point of the ack-latency CDF: the q-quantile is us µs.
type cdfPoint struct {
	q, us float64
}

// cdfQuantiles are the quantiles bench samples for the CDF, ascending:
// every 1% of the body, and 20 a decade of the tail (1-q = 10^-t, t up to
// 4), so the p99-p99.99 stretch a tail-scaled axis draws is not a straight
// line between two samples; then 1, the maximum.
func cdfQuantiles() []float64 {
	var qs []float64
	for i := 0; i < 100; i++ {
		qs = append(qs, float64(i)/100)
	}
	for i := 1; i <= 4*20; i++ {
		qs = append(qs, 1-math.Pow(10, -float64(i)/20))
	}
	slices.Sort(qs)
	qs = slices.Compact(qs)
	return append(qs, 1)
}

// The plot's tail axis: y is -log10(1-q), up to the 0.9999-quantile. Each
// of p90, p99, p99.9, p99.99 gets as much height as the whole 0-0.9 body.
const (
	plotTopQ = 0.9999
	plotTMax = 4.0
)

func tailT(q float64) float64 { return -math.Log10(1 - math.Min(q, plotTopQ)) }

// Text metrics the layout assumes (and TestPlotGeometry checks with):
// sans-serif digits are about 0.64 em wide; a line spans 0.8 em above the
// baseline to 0.25 below.
const (
	charEm    = 0.64
	ascentEm  = 0.8
	descentEm = 0.25
)

func textWidth(s string, size float64) float64 {
	return float64(utf8.RuneCountInString(s)) * size * charEm
}

// plotCDF renders the ack-latency CDF as a self-contained SVG: latency on a
// log axis, cumulative fraction on a tail-scaled one (-log10(1-q): 0.9,
// 0.99, 0.999 and 0.9999 equally spaced), with the p50, p99 and p99.9 of
// the store's PUTs as dashed markers labelled above the plot area (in
// stacked lanes, so close markers' labels do not collide) and a legend
// below it. Nothing is drawn over anything else (TestPlotGeometry).
func plotCDF(r *benchResult) []byte {
	const (
		width, height = 760, 500
		left, right   = 64, 24
		titleY        = 22
		laneH         = 14
		markerFont    = 11
		bottom        = 84 // x tick labels, the x title, two legend rows
	)
	pts := slices.Clone(r.cdf)
	slices.SortStableFunc(pts, func(a, b cdfPoint) int {
		if a.q != b.q {
			if a.q < b.q {
				return -1
			}
			return 1
		}
		if a.us < b.us {
			return -1
		}
		if a.us > b.us {
			return 1
		}
		return 0
	})
	var ackMax float64
	lo, hi := math.Inf(1), 0.0
	for _, p := range pts {
		if p.us > 0 {
			lo, hi = math.Min(lo, p.us), math.Max(hi, p.us)
		}
		ackMax = math.Max(ackMax, p.us)
	}
	markers := []struct {
		name string
		v    float64
	}{{"PUT p50", r.Put.P50}, {"PUT p99", r.Put.P99}, {"PUT p99.9", r.Put.P999}}
	for _, m := range markers {
		if m.v > 0 {
			lo, hi = math.Min(lo, m.v), math.Max(hi, m.v)
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 10
	}
	lo = math.Pow(10, math.Floor(math.Log10(lo)))
	hi = math.Pow(10, math.Ceil(math.Log10(hi)))
	if hi <= lo {
		hi = lo * 10
	}
	pw := float64(width - left - right)
	x := func(us float64) float64 {
		us = math.Min(math.Max(us, lo), hi)
		return float64(left) + pw*(math.Log10(us)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))
	}

	// Marker labels: centred on their marker, kept inside the plot's
	// width, each in the first lane where it overlaps no label already
	// placed.
	type placed struct {
		text     string
		x0, x1   float64
		lane     int
		markerUS float64
	}
	var labels []placed
	lanes := 0
	for _, m := range markers {
		if m.v <= 0 {
			continue
		}
		text := m.name + " " + fmtUS(m.v)
		w := textWidth(text, markerFont)
		x0 := math.Min(math.Max(x(m.v)-w/2, float64(left)), float64(width-right)-w)
		lane := 0
		for ; ; lane++ {
			free := true
			for _, l := range labels {
				if l.lane == lane && x0 < l.x1+6 && l.x0 < x0+w+6 {
					free = false
				}
			}
			if free {
				break
			}
		}
		labels = append(labels, placed{text, x0, x0 + w, lane, m.v})
		lanes = max(lanes, lane+1)
	}
	laneTop := titleY + 8 // the title's descent, and a gap
	top := laneTop + lanes*laneH + 8
	ph := float64(height - top - bottom)
	y := func(q float64) float64 { return float64(top) + ph*(1-tailT(q)/plotTMax) }

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Verdana, sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text class="title" x="%d" y="%d" font-size="14">flightlog bench: ack latency CDF, model %s (K=%d W=%d), %d producers</text>`+"\n", left, titleY, xmlEscape(r.Model), r.K, r.W, r.Producers)
	fmt.Fprintf(&b, `<rect class="plot-area" x="%d" y="%d" width="%.1f" height="%.1f" fill="none" stroke="#999"/>`+"\n", left, top, pw, ph)

	// x ticks: decades, and 2x and 5x when there are at most two decades
	// and their labels have room.
	decades := math.Round(math.Log10(hi / lo))
	ticks := []float64{}
	for d := lo; d <= hi*1.0001; d *= 10 {
		ticks = append(ticks, d)
		if decades <= 2 && d*2 < hi {
			ticks = append(ticks, d*2, d*5)
		}
	}
	slices.Sort(ticks)
	lastEnd := math.Inf(-1)
	for _, d := range ticks {
		label := fmtUS(d)
		w := textWidth(label, 12)
		cx := x(d)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", cx, top, cx, float64(top)+ph)
		if cx-w/2 < lastEnd+8 || cx+w/2 > width {
			continue // no room for its label
		}
		lastEnd = cx + w/2
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", cx, float64(top)+ph+18, label)
	}
	for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999, 0.9999} {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", left, y(q), float64(left)+pw, y(q))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y(q)+4, strconv.FormatFloat(q, 'f', -1, 64))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">ack latency (log scale)</text>`+"\n", float64(left)+pw/2, float64(top)+ph+36)
	midY := float64(top) + ph/2
	fmt.Fprintf(&b, `<text x="14" y="%.1f" transform="rotate(-90 14 %.1f)" text-anchor="middle">fraction of batches acked (tail scale)</text>`+"\n", midY, midY)

	b.WriteString(`<polyline class="cdf" fill="none" stroke="#1f77b4" stroke-width="2" points="`)
	for _, p := range pts {
		if p.q > plotTopQ {
			continue // the maximum: in the legend
		}
		fmt.Fprintf(&b, "%.1f,%.1f ", x(p.us), y(p.q))
	}
	b.WriteString(`"/>` + "\n")
	for _, l := range labels {
		mx := x(l.markerUS)
		fmt.Fprintf(&b, `<line class="marker" x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#d62728" stroke-dasharray="4 3"/>`+"\n", mx, top, mx, float64(top)+ph)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#d62728" font-size="%d">%s</text>`+"\n", l.x0, float64(laneTop+(l.lane+1)*laneH)-3, markerFont, xmlEscape(l.text))
	}
	// The legend, below the x axis title.
	ly := float64(height - 28)
	fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#1f77b4" stroke-width="2"/>`+"\n", left, ly-4, left+24, ly-4)
	fmt.Fprintf(&b, `<text x="%d" y="%.1f">ack (producer): p50 %s, p99 %s, p99.9 %s, max %s</text>`+"\n", left+30, ly, fmtUS(r.Ack.P50), fmtUS(r.Ack.P99), fmtUS(r.Ack.P999), fmtUS(ackMax))
	ly += 18
	fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#d62728" stroke-dasharray="4 3"/>`+"\n", left, ly-4, left+24, ly-4)
	fmt.Fprintf(&b, `<text x="%d" y="%.1f">store PUT (one copy): p50 %s, p99 %s, p99.9 %s</text>`+"\n", left+30, ly, fmtUS(r.Put.P50), fmtUS(r.Put.P99), fmtUS(r.Put.P999))
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// cdfFile is the --cdf JSON document.
type cdfFile struct {
	Model     string     `json:"model"`
	K         int        `json:"k"`
	W         int        `json:"w"`
	Producers int        `json:"producers"`
	Ack       []cdfEntry `json:"ack_cdf"`
	Put       latency    `json:"put"`
}

type cdfEntry struct {
	Q  float64 `json:"q"`
	US float64 `json:"ack_us"`
}

// encodeCDF writes the ack-latency CDF for --cdf: CSV (columns q,ack_us,
// one row per sampled quantile, ascending; q=1 is the maximum) when the
// file name ends in .csv, JSON (cdfFile) when it ends in .json.
func encodeCDF(r *benchResult, name string) ([]byte, error) {
	pts := slices.Clone(r.cdf)
	slices.SortStableFunc(pts, func(a, b cdfPoint) int {
		switch {
		case a.q < b.q:
			return -1
		case a.q > b.q:
			return 1
		}
		return 0
	})
	switch filepath.Ext(name) {
	case ".csv":
		var b bytes.Buffer
		w := csv.NewWriter(&b)
		w.Write([]string{"q", "ack_us"})
		for _, p := range pts {
			w.Write([]string{strconv.FormatFloat(p.q, 'g', -1, 64), strconv.FormatFloat(p.us, 'f', -1, 64)})
		}
		w.Flush()
		return b.Bytes(), w.Error()
	case ".json":
		f := cdfFile{Model: r.Model, K: r.K, W: r.W, Producers: r.Producers, Put: r.Put, Ack: []cdfEntry{}}
		for _, p := range pts {
			f.Ack = append(f.Ack, cdfEntry{p.q, p.us})
		}
		out, err := json.MarshalIndent(f, "", "  ")
		return append(out, '\n'), err
	}
	return nil, fmt.Errorf("--cdf %s: want a name ending in .csv or .json", name)
}

func fmtUS(us float64) string {
	switch {
	case us >= 1e6:
		return fmt.Sprintf("%gs", round(us/1e6, 2))
	case us >= 1e3:
		return fmt.Sprintf("%gms", round(us/1e3, 2))
	}
	return fmt.Sprintf("%gµs", round(us, 1))
}

func xmlEscape(s string) string {
	var b bytes.Buffer
	for _, r := range s {
		switch r {
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		case '"':
			b.WriteString("&quot;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
