package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/objstore"
)

// slotKey is a parsed chain slot key chains/<star>/<class>/<epoch>/<slot>.
type slotKey struct {
	star        string
	class       chain.Class
	epoch, slot uint64
}

func parseSlotKey(key string) (slotKey, bool) {
	p := strings.Split(key, "/")
	if len(p) != 5 || p[0] != "chains" {
		return slotKey{}, false
	}
	c, err := chain.ParseClass(p[2])
	if err != nil {
		return slotKey{}, false
	}
	e, err1 := strconv.ParseUint(p[3], 10, 64)
	s, err2 := strconv.ParseUint(p[4], 10, 64)
	if err1 != nil || err2 != nil {
		return slotKey{}, false
	}
	return slotKey{p[1], c, e, s}, true
}

// copyReport is what inspect found in one bucket.
type copyReport struct {
	Bucket  string        `json:"bucket"`
	State   string        `json:"state"` // missing, flight, poison, settled, corrupt, error
	Verdict string        `json:"verdict,omitempty"`
	Error   string        `json:"error,omitempty"`
	Kind    string        `json:"kind,omitempty"`
	Epoch   uint64        `json:"epoch,omitempty"`
	Slot    uint64        `json:"slot,omitempty"`
	Nonce   string        `json:"nonce,omitempty"`
	Size    uint64        `json:"size,omitempty"`
	Footer  string        `json:"footer,omitempty"`
	Frames  []frameReport `json:"frames,omitempty"`
	env     envelope.Envelope
}

// frameReport is one frame of a footer as inspect shows it: the stream by
// its name and its incarnation, apart (a frame holds the stream's ID, the
// two joined by a 0x1f byte, which is no way to show it to anyone).
type frameReport struct {
	envelope.FrameInfo
	// Stream is the name (it shadows FrameInfo.Stream, the ID).
	Stream string
	// Incarnation is the stream's incarnation ("" for a stream created
	// before incarnations existed).
	Incarnation string `json:",omitempty"`
}

func frameReports(frames []envelope.FrameInfo) []frameReport {
	out := make([]frameReport, len(frames))
	for i, f := range frames {
		name, inc := chain.SplitStreamID(f.Stream)
		out[i] = frameReport{FrameInfo: f, Stream: name, Incarnation: inc}
	}
	return out
}

// inspectCopy classifies one copy of key from its envelope (one ranged GET
// of 60 bytes) and, for a flight or settled object, reads its footer (one
// more ranged GET).
func inspectCopy(ctx context.Context, b objstore.Store, name, key string, sk slotKey, isSlot bool) copyReport {
	r := copyReport{Bucket: name}
	env, err := chain.ProbeEnvelope(ctx, b, key)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		r.State = "missing"
		return r
	case envelope.IsCorruption(err):
		r.State, r.Error = "corrupt", err.Error()
		return r
	case err != nil:
		r.State, r.Error = "error", err.Error()
		return r
	}
	r.env = env
	r.State, r.Kind, r.Epoch, r.Slot, r.Nonce, r.Size = env.Kind.String(), env.Kind.String(), env.Epoch, env.Slot, env.Nonce.String(), env.Size
	if isSlot {
		switch {
		case env.Epoch != sk.epoch || env.Slot != sk.slot:
			r.Verdict = fmt.Sprintf("FOREIGN: names epoch %d slot %d, the key names epoch %d slot %d", env.Epoch, env.Slot, sk.epoch, sk.slot)
		case env.Kind == envelope.KindFlight:
			r.Verdict = "a flight copy of this slot"
		case env.Kind == envelope.KindPoison:
			r.Verdict = "poison: a fencer killed this slot in this bucket"
		}
	}
	if env.Kind == envelope.KindFlight || env.Kind == envelope.KindSettled {
		r.Footer = fmt.Sprintf("@%d+%d", env.FooterOffset, env.FooterLength)
		footer, err := b.Get(ctx, key, int64(env.FooterOffset), int64(env.FooterLength))
		var frames []envelope.FrameInfo
		if err == nil {
			frames, err = envelope.ParseFooter(env, footer)
			r.Frames = frameReports(frames)
		}
		if err != nil {
			r.State, r.Error = "corrupt", "footer: "+err.Error()
		}
	}
	return r
}

const inspectHelp = `The argument is an object key (chains/<star>/<class>/<epoch>/<slot>, a tails
snapshot's, a settled object's), or a slot number: then --class (default
standard) and --epoch (default: the chain's live epoch, read from its epoch
record in the metastore) name the chain of --star, and the key is that slot's.
  flightlog inspect 12                              slot 12 of the live standard epoch
  flightlog inspect --class express --epoch 3 12    slot 12 of express epoch 3
Exit code 1 when no bucket holds the key.`

// inspectCmd: flightlog inspect KEY|SLOT.
func inspectCmd(fs *flag.FlagSet, _ *globalOpts) func(context.Context, *cmdEnv, []string) int {
	asJSON := fs.Bool("json", false, "print JSON")
	class := fs.String("class", "standard", "with a slot number: the chain's class, standard or express")
	epoch := fs.Uint64("epoch", 0, "with a slot number: the epoch (0: the chain's live epoch)")
	return func(ctx context.Context, env *cmdEnv, args []string) int {
		key := args[0]
		slot, err := strconv.ParseUint(key, 10, 64)
		isNumber := err == nil
		given := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
		if !isNumber && (given["class"] || given["epoch"]) {
			return env.fail(fmt.Errorf("inspect %s: --class and --epoch go with a slot number, not a key", key))
		}
		c, err := chain.ParseClass(*class)
		if err != nil {
			return env.fail(err)
		}
		b, err := env.g.open(ctx, true)
		if err != nil {
			return env.fail(err)
		}
		defer b.Close()
		if isNumber {
			e := *epoch
			if e == 0 {
				rec, _, err := chain.ReadEpoch(ctx, b.meta, env.g.Star, c)
				if err != nil {
					return env.fail(fmt.Errorf("inspect slot %d: the live epoch of %s/%s: %w", slot, env.g.Star, c, err))
				}
				e = rec.Epoch
			}
			key = chain.SlotKey(env.g.Star, c, e, slot)
		}
		sk, isSlot := parseSlotKey(key)
		classes := chain.Classes()
		if isSlot {
			classes = []chain.Class{sk.class}
		}
		var reports []copyReport
		for _, c := range classes {
			for i, s := range b.sets[c] {
				reports = append(reports, inspectCopy(ctx, s, c.String()+"/"+b.names[c][i], key, sk, isSlot))
			}
		}
		if len(reports) == 0 {
			return env.fail(fmt.Errorf("no buckets configured for %s", key))
		}
		found := false
		for _, r := range reports {
			found = found || r.State != "missing"
		}
		if *asJSON {
			out, _ := json.MarshalIndent(map[string]any{"key": key, "copies": reports}, "", "  ")
			fmt.Fprintf(env.stdout, "%s\n", out)
		} else {
			printInspect(env.stdout, key, reports)
		}
		if !found {
			return exitProblems
		}
		return exitOK
	}
}

func printInspect(w io.Writer, key string, reports []copyReport) {
	fmt.Fprintf(w, "key %s\n", key)
	var frames []frameReport
	for _, r := range reports {
		switch r.State {
		case "missing", "error":
			fmt.Fprintf(w, "  %-20s %s %s\n", r.Bucket, r.State, r.Error)
			continue
		}
		fmt.Fprintf(w, "  %-20s %s epoch %d slot %d nonce %s size %d", r.Bucket, r.Kind, r.Epoch, r.Slot, r.Nonce, r.Size)
		if r.Footer != "" {
			fmt.Fprintf(w, " footer %s (%d frames)", r.Footer, len(r.Frames))
		}
		fmt.Fprintln(w)
		if r.Verdict != "" {
			fmt.Fprintf(w, "  %-20s %s\n", "", r.Verdict)
		}
		if r.Error != "" {
			fmt.Fprintf(w, "  %-20s %s: %s\n", "", r.State, r.Error)
		}
		if frames == nil && r.Frames != nil {
			frames = r.Frames
		}
	}
	if frames == nil {
		return
	}
	fmt.Fprintln(w, "\nfooter (from the first readable copy):")
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "#\tstream\tincarnation\tfirst seq\tcount\tmin ts\tmax ts\toffset\tlength\traw\tcodec\tcrc32c\t")
	for i, f := range frames {
		inc := f.Incarnation
		if inc == "" {
			inc = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%08x\t\n", i, f.Stream, inc, f.FirstSeq, f.Count, f.MinTimestamp, f.MaxTimestamp, f.Offset, f.Length, f.RawLength, f.Codec, f.CRC)
	}
	tw.Flush()
}
