package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// Issue 15, item 7: the bench plot people look at.

// svgBox is a rectangle in the SVG's user space.
type svgBox struct{ x0, y0, x1, y1 float64 }

func (a svgBox) overlaps(b svgBox) bool {
	return a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1
}

func (a svgBox) String() string {
	return fmt.Sprintf("[%.1f,%.1f]x[%.1f,%.1f]", a.x0, a.x1, a.y0, a.y1)
}

type svgText struct {
	text string
	box  svgBox
	y    float64 // baseline
}

type svgLine struct{ x1, y1, x2, y2 float64 }

// parsedPlot is what TestPlotGeometry reads back from an SVG.
type parsedPlot struct {
	width, height float64
	texts         []svgText
	title         *svgText
	area          *svgBox
	markers       []svgLine
	curve         [][2]float64
}

// parsePlot reads the SVG's text, marker lines, plot area and curve. Text
// boxes are estimated as a renderer lays them out: a sans-serif glyph about
// 0.64 em wide (digits, the widest common glyphs), 0.8 em above the
// baseline and 0.25 below, placed by text-anchor and turned by a
// rotate(a cx cy) transform.
func parsePlot(t *testing.T, svg []byte) parsedPlot {
	t.Helper()
	var p parsedPlot
	dec := xml.NewDecoder(bytes.NewReader(svg))
	num := func(attrs map[string]string, k string) float64 {
		v, err := strconv.ParseFloat(strings.TrimSuffix(attrs[k], "px"), 64)
		if err != nil && attrs[k] != "" {
			t.Fatalf("attribute %s=%q: %v", k, attrs[k], err)
		}
		return v
	}
	rootFont := 16.0
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		attrs := map[string]string{}
		for _, a := range se.Attr {
			attrs[a.Name.Local] = a.Value
		}
		switch se.Name.Local {
		case "svg":
			p.width, p.height = num(attrs, "width"), num(attrs, "height")
			if f := num(attrs, "font-size"); f > 0 {
				rootFont = f
			}
		case "rect":
			if attrs["class"] == "plot-area" {
				x, y := num(attrs, "x"), num(attrs, "y")
				p.area = &svgBox{x, y, x + num(attrs, "width"), y + num(attrs, "height")}
			}
		case "line":
			if attrs["class"] == "marker" {
				p.markers = append(p.markers, svgLine{num(attrs, "x1"), num(attrs, "y1"), num(attrs, "x2"), num(attrs, "y2")})
			}
		case "polyline":
			for _, pt := range strings.Fields(attrs["points"]) {
				xs, ys, _ := strings.Cut(pt, ",")
				x, err1 := strconv.ParseFloat(xs, 64)
				y, err2 := strconv.ParseFloat(ys, 64)
				if err1 != nil || err2 != nil {
					t.Fatalf("polyline point %q", pt)
				}
				p.curve = append(p.curve, [2]float64{x, y})
			}
		case "text":
			var chars string
			for {
				tok, err := dec.Token()
				if err != nil {
					t.Fatal(err)
				}
				if cd, ok := tok.(xml.CharData); ok {
					chars += string(cd)
				}
				if _, ok := tok.(xml.EndElement); ok {
					break
				}
			}
			size := rootFont
			if f := num(attrs, "font-size"); f > 0 {
				size = f
			}
			x, y := num(attrs, "x"), num(attrs, "y")
			w := float64(utf8.RuneCountInString(chars)) * size * 0.64
			x0 := x
			switch attrs["text-anchor"] {
			case "middle":
				x0 = x - w/2
			case "end":
				x0 = x - w
			}
			box := svgBox{x0, y - 0.8*size, x0 + w, y + 0.25*size}
			if tr := attrs["transform"]; tr != "" {
				var a, cx, cy float64
				if _, err := fmt.Sscanf(tr, "rotate(%g %g %g)", &a, &cx, &cy); err != nil {
					t.Fatalf("transform %q: %v", tr, err)
				}
				s, c := math.Sincos(a * math.Pi / 180)
				r := svgBox{math.Inf(1), math.Inf(1), math.Inf(-1), math.Inf(-1)}
				for _, pt := range [][2]float64{{box.x0, box.y0}, {box.x1, box.y0}, {box.x0, box.y1}, {box.x1, box.y1}} {
					dx, dy := pt[0]-cx, pt[1]-cy
					rx, ry := cx+dx*c-dy*s, cy+dx*s+dy*c
					r = svgBox{math.Min(r.x0, rx), math.Min(r.y0, ry), math.Max(r.x1, rx), math.Max(r.y1, ry)}
				}
				box = r
			}
			st := svgText{chars, box, y}
			p.texts = append(p.texts, st)
			if attrs["class"] == "title" || p.title == nil && strings.HasPrefix(chars, "flightlog bench") {
				p.title = &p.texts[len(p.texts)-1]
			}
		}
	}
	return p
}

// syntheticResult is a bench result whose ack CDF is drawn from a
// LogNormal(median, p99) at the quantiles bench used to sample (0 to 1 by
// 0.005, then 0.999, 0.9999, 1, in that order), with the PUT figures given.
func syntheticResult(seed uint64, median, p99 float64, put latency) *benchResult {
	rng := mrand.New(mrand.NewPCG(seed, 7))
	sigma := math.Log(p99/median) / 2.326
	xs := make([]float64, 20000)
	for i := range xs {
		xs[i] = math.Round(median*math.Exp(sigma*rng.NormFloat64())*10) / 10
	}
	slices.Sort(xs)
	quant := func(q float64) float64 { return xs[int(q*float64(len(xs)-1))] }
	r := &benchResult{Model: "custom", K: 3, W: 2, Producers: 64, Put: put}
	for i := 0; i <= 200; i++ {
		r.cdf = append(r.cdf, cdfPoint{float64(i) / 200, quant(float64(i) / 200)})
	}
	for _, q := range []float64{0.999, 0.9999, 1} {
		r.cdf = append(r.cdf, cdfPoint{q, quant(q)})
	}
	r.Ack = latency{quant(0.5), quant(0.99), quant(0.999)}
	return r
}

// TestPlotGeometry checks the SVG's layout, as the eye would: no two text
// labels overlap and none leaves the image; the PUT markers lie inside the
// plot area, below the title; the curve stays inside the plot area and
// rises monotonically; and the tail gets room (p99 to p99.9 spans a sixth
// of the plot's height or more, where a linear axis gave it 3 pixels).
func TestPlotGeometry(t *testing.T) {
	for _, tc := range []struct {
		name        string
		r           *benchResult
		wantMarkers int
	}{
		// The README's s3-express figures.
		{"express", syntheticResult(1, 8300, 17300, latency{4700, 16500, 24100}), 3},
		{"standard", syntheticResult(2, 51400, 151000, latency{27800, 127900, 163600}), 3},
		// Three markers within a few pixels: their labels must stack.
		{"close-markers", syntheticResult(3, 10000, 12000, latency{10000, 10500, 10500}), 3},
		// Markers at both ends of a range of six decades.
		{"wide", syntheticResult(4, 200, 5e6, latency{60, 9e6, 1.9e7}), 3},
		// One latency throughout, and no PUTs measured.
		{"flat", syntheticResult(5, 1000, 1000.001, latency{}), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svg := plotCDF(tc.r)
			p := parsePlot(t, svg)
			if p.title == nil || len(p.texts) < 10 {
				t.Fatalf("no title or labels found:\n%s", svg)
			}
			if p.area == nil {
				t.Errorf("no <rect class=\"plot-area\">: checking against the whole image")
				p.area = &svgBox{0, 0, p.width, p.height}
			}
			for i, a := range p.texts {
				if a.box.x0 < 0 || a.box.y0 < 0 || a.box.x1 > p.width || a.box.y1 > p.height {
					t.Errorf("label %q %v leaves the %gx%g image", a.text, a.box, p.width, p.height)
				}
				for _, b := range p.texts[i+1:] {
					if a.box.overlaps(b.box) {
						t.Errorf("labels overlap: %q %v and %q %v", a.text, a.box, b.text, b.box)
					}
				}
			}
			if len(p.markers) != tc.wantMarkers {
				t.Errorf("%d PUT markers, want %d", len(p.markers), tc.wantMarkers)
			}
			for _, m := range p.markers {
				top, bot := math.Min(m.y1, m.y2), math.Max(m.y1, m.y2)
				if m.x1 < p.area.x0 || m.x1 > p.area.x1 || m.x2 != m.x1 || top < p.area.y0 || bot > p.area.y1 {
					t.Errorf("marker %+v is not a vertical line inside the plot area %v", m, *p.area)
				}
				if top <= p.title.box.y1 {
					t.Errorf("marker %+v reaches the title %v", m, p.title.box)
				}
			}
			if len(p.curve) < 20 {
				t.Fatalf("curve of %d points", len(p.curve))
			}
			for i, pt := range p.curve {
				if pt[0] < p.area.x0 || pt[0] > p.area.x1 || pt[1] < p.area.y0 || pt[1] > p.area.y1 {
					t.Errorf("curve point %v outside the plot area %v", pt, *p.area)
				}
				if i > 0 && (pt[0] < p.curve[i-1][0] || pt[1] > p.curve[i-1][1]) {
					t.Errorf("curve goes back: %v after %v", pt, p.curve[i-1])
				}
			}
			tick := map[string]float64{}
			for _, tx := range p.texts {
				if tx.box.x1 <= p.area.x0 {
					tick[tx.text] = tx.y
				}
			}
			p99, ok1 := tick["0.99"]
			p999, ok2 := tick["0.999"]
			if !ok1 || !ok2 || p99-p999 < (p.area.y1-p.area.y0)/6 {
				t.Errorf("the p99-p99.9 tail spans %.1f px of a %.0f px plot (ticks %v)", p99-p999, p.area.y1-p.area.y0, tick)
			}
		})
	}
}

// TestCDFData: --cdf writes the CDF as CSV or JSON, in quantile order.
func TestCDFData(t *testing.T) {
	r := syntheticResult(1, 8300, 17300, latency{4700, 16500, 24100})
	data, err := encodeCDF(r, "x.csv")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(bytes.NewReader(data)).ReadAll()
	if err != nil || len(rows) != len(r.cdf)+1 || rows[0][0] != "q" || rows[0][1] != "ack_us" {
		t.Fatalf("csv: %v, %d rows\n%s", err, len(rows), data)
	}
	lastQ, lastUS := -1.0, -1.0
	for _, row := range rows[1:] {
		q, err1 := strconv.ParseFloat(row[0], 64)
		us, err2 := strconv.ParseFloat(row[1], 64)
		if err1 != nil || err2 != nil || q < lastQ || us < lastUS {
			t.Fatalf("csv row %v after q=%g us=%g", row, lastQ, lastUS)
		}
		lastQ, lastUS = q, us
	}
	if lastQ != 1 {
		t.Errorf("last quantile %g, want 1 (the maximum)", lastQ)
	}
	data, err = encodeCDF(r, "x.json")
	var f struct {
		Model string `json:"model"`
		Ack   []struct {
			Q  float64 `json:"q"`
			US float64 `json:"ack_us"`
		} `json:"ack_cdf"`
		Put latency `json:"put"`
	}
	if err != nil || json.Unmarshal(data, &f) != nil || len(f.Ack) != len(r.cdf) || f.Put != r.Put || f.Model != "custom" {
		t.Fatalf("json: %v\n%.300s", err, data)
	}
	if _, err := encodeCDF(r, "x.txt"); err == nil {
		t.Errorf("--cdf x.txt: no error")
	}
	// bench samples the tail densely: points between p99 and p99.9.
	n := 0
	for _, q := range cdfQuantiles() {
		if q > 0.99 && q < 0.999 {
			n++
		}
	}
	if n < 10 {
		t.Errorf("%d sampled quantiles between 0.99 and 0.999", n)
	}
}
