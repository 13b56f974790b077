package main

import (
	"bytes"
	"fmt"
	"math"
)

// cdfPoint is one point of the ack-latency CDF: the q-quantile is us µs.
type cdfPoint struct {
	q, us float64
}

// plotCDF renders the ack-latency CDF as a self-contained SVG: latency on a
// log axis, cumulative fraction on a linear one, with the p50, p99 and
// p99.9 of the store's PUTs marked for comparison.
func plotCDF(r *benchResult) []byte {
	const (
		width, height = 720, 420
		left, right   = 70, 20
		top, bottom   = 40, 60
	)
	pw, ph := float64(width-left-right), float64(height-top-bottom)
	lo, hi := math.Inf(1), 0.0
	for _, p := range r.cdf {
		if p.us > 0 {
			lo, hi = math.Min(lo, p.us), math.Max(hi, p.us)
		}
	}
	for _, v := range []float64{r.Put.P50, r.Put.P999} {
		if v > 0 {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
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
	x := func(us float64) float64 {
		us = math.Max(us, lo)
		return float64(left) + pw*(math.Log10(us)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))
	}
	y := func(q float64) float64 { return float64(top) + ph*(1-q) }
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14">flightlog bench: ack latency CDF, model %s (K=%d W=%d), %d producers</text>`+"\n", left, xmlEscape(r.Model), r.K, r.W, r.Producers)
	for d := lo; d <= hi*1.0001; d *= 10 {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x(d), top, x(d), height-bottom)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x(d), height-bottom+16, fmtUS(d))
	}
	for _, q := range []float64{0, 0.25, 0.5, 0.75, 0.9, 0.99, 1} {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`+"\n", left, y(q), width-right, y(q))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n", left-6, y(q)+4, q)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">ack latency (log scale)</text>`+"\n", left+int(pw/2), height-bottom+36)
	fmt.Fprintf(&b, `<text x="16" y="%d" transform="rotate(-90 16 %d)" text-anchor="middle">fraction of batches acked</text>`+"\n", top+int(ph/2), top+int(ph/2))
	b.WriteString(`<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="`)
	for _, p := range r.cdf {
		fmt.Fprintf(&b, "%.1f,%.1f ", x(p.us), y(p.q))
	}
	b.WriteString(`"/>` + "\n")
	for _, m := range []struct {
		name string
		v    float64
	}{{"PUT p50", r.Put.P50}, {"PUT p99", r.Put.P99}, {"PUT p99.9", r.Put.P999}} {
		if m.v <= 0 {
			continue
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#d62728" stroke-dasharray="4 3"/>`+"\n", x(m.v), top, x(m.v), height-bottom)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#d62728" font-size="10" transform="rotate(-90 %.1f %d)">%s %s</text>`+"\n", x(m.v)-3, top+70, x(m.v)-3, top+70, m.name, fmtUS(m.v))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#1f77b4">ack p50 %s, p99 %s, p99.9 %s</text>`+"\n", left+10, top+16, fmtUS(r.Ack.P50), fmtUS(r.Ack.P99), fmtUS(r.Ack.P999))
	b.WriteString("</svg>\n")
	return b.Bytes()
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
