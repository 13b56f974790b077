package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/metastore/bbolt"
)

// TestInspectPrintsNameAndIncarnation: inspect's footer names each frame's
// stream by its name and its incarnation, separately (text and JSON), and
// never prints the internal stream ID (the two joined by a 0x1f byte).
func TestInspectPrintsNameAndIncarnation(t *testing.T) {
	dir := seeded(t)
	inc := incarnationOf(t, dir, "clicks")
	key := slotOf(t, dir, "clicks")
	code, out, errs := cli(t, "", "inspect", key, "--dir", dir)
	if code != exitOK {
		t.Fatalf("inspect: exit %d\n%s%s", code, out, errs)
	}
	if strings.Contains(out, "\x1f") || strings.Contains(out, "clicks"+inc) {
		t.Fatalf("inspect prints the internal stream ID:\n%q", out)
	}
	header, row := "", ""
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 2 && f[0] == "#" {
			header = l
		}
		if len(f) > 2 && f[0] == "0" {
			row = l
		}
	}
	if !strings.Contains(header, "stream") || !strings.Contains(header, "incarnation") {
		t.Fatalf("inspect's footer header %q; want stream and incarnation columns\n%s", header, out)
	}
	if f := strings.Fields(row); len(f) < 3 || f[1] != "clicks" || f[2] != inc {
		t.Fatalf("inspect's footer row %q; want stream clicks, incarnation %s\n%s", row, inc, out)
	}

	code, out, _ = cli(t, "", "inspect", "--json", key, "--dir", dir)
	var rep struct {
		Copies []struct {
			Frames []map[string]any `json:"frames"`
		} `json:"copies"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Copies) == 0 || len(rep.Copies[0].Frames) != 1 {
		t.Fatalf("inspect --json: exit %d\n%s", code, out)
	}
	if f := rep.Copies[0].Frames[0]; f["Stream"] != "clicks" || f["Incarnation"] != inc {
		t.Fatalf("inspect --json frame: Stream %q, Incarnation %q; want %q and %q\n%s", f["Stream"], f["Incarnation"], "clicks", inc, out)
	}
}

// incarnationOf reads a stream's incarnation from its record in dir's
// metastore.
func incarnationOf(t *testing.T, dir, stream string) string {
	t.Helper()
	ms, err := bbolt.Open(filepath.Join(dir, metaFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	it, err := ms.Get(context.Background(), chain.StreamRecordKey(stream))
	if err != nil {
		t.Fatal(err)
	}
	var rec listedStream
	if err := json.Unmarshal(it.Value, &rec); err != nil || rec.Incarnation == "" {
		t.Fatalf("stream record of %s: %s (%v); want an incarnation", stream, it.Value, err)
	}
	return rec.Incarnation
}
