package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/metastore"
)

// streamRecord is the part of a stream's metastore record fsck needs.
type streamRecord struct {
	Name        string `json:"name"`
	Class       string `json:"class"`
	Star        string `json:"star"`
	Incarnation string `json:"incarnation,omitempty"`
}

// id is the stream's ID: what its refs, frames and tails are keyed by.
func (r streamRecord) id() string { return chain.StreamID(r.Name, r.Incarnation) }

// fsckReport accumulates what fsck found.
type fsckReport struct {
	w                              io.Writer
	quiet                          bool
	streams, refs, extents, copies int
	badCopies, problems, notes     int
}

func (r *fsckReport) problem(format string, args ...any) {
	r.problems++
	fmt.Fprintf(r.w, "PROBLEM: "+format+"\n", args...)
}

func (r *fsckReport) note(format string, args ...any) {
	r.notes++
	if !r.quiet {
		fmt.Fprintf(r.w, "note: "+format+"\n", args...)
	}
}

// chainInfo is a chain's epoch record and checkpoint, read once.
type chainInfo struct {
	rec    chain.EpochRecord
	hasRec bool
	cp     absorb.Checkpoint
	hasCP  bool
	tails  map[string]absorb.StreamTail // nil if none or unreadable
}

// fsckCmd: flightlog fsck.
func fsckCmd(fs *flag.FlagSet, _ *globalOpts) func(context.Context, *cmdEnv, []string) int {
	quiet := fs.Bool("q", false, "print problems only, not notes (bad copies another copy covers)")
	return func(ctx context.Context, env *cmdEnv, _ []string) int {
		b, err := env.g.open(ctx, true)
		if err != nil {
			return env.fail(err)
		}
		defer b.Close()
		rep := &fsckReport{w: env.stdout, quiet: *quiet}
		prog := newProgress(env.stderr)
		if err := fsck(ctx, b, rep, prog); err != nil {
			prog.done()
			return env.fail(fmt.Errorf("fsck could not finish: %w", err))
		}
		prog.done()
		fmt.Fprintf(env.stdout, "fsck: %d streams, %d refs, %d extents, %d copies read (%d bad, each covered by a good copy unless listed); %d problem(s)\n",
			rep.streams, rep.refs, rep.extents, rep.copies, rep.badCopies, rep.problems)
		if rep.problems > 0 {
			return exitProblems
		}
		return exitOK
	}
}

// fsck checks every stream's refs: they tile the stream from its first
// readable record with no gap, every extent verifies (checksum and decode)
// from at least one copy in its class's bucket set, every chain extent lies
// below its epoch's cut (or the live epoch's checkpoint), and each chain's
// tails snapshot agrees with the refs. It returns an error only when it
// could not run to the end (metastore or bucket unreachable).
func fsck(ctx context.Context, b *backends, rep *fsckReport, prog *progress) error {
	chains := map[string]*chainInfo{}
	getChain := func(star string, c chain.Class) (*chainInfo, error) {
		k := star + "/" + c.String()
		if ci, ok := chains[k]; ok {
			return ci, nil
		}
		ci := &chainInfo{}
		rec, _, err := chain.ReadEpoch(ctx, b.meta, star, c)
		switch {
		case err == nil:
			ci.rec, ci.hasRec = rec, true
		case !errors.Is(err, metastore.ErrNotFound):
			return nil, err
		}
		cp, _, err := absorb.ReadCheckpoint(ctx, b.meta, star, c)
		switch {
		case err == nil:
			ci.cp, ci.hasCP = cp, true
			if cp.Tails != "" && len(b.sets[c]) > 0 {
				t, err := absorb.ReadTails(ctx, b.sets[c], cp.Tails)
				if err != nil {
					rep.problem("%s: checkpoint's tails snapshot %s: %v", k, cp.Tails, err)
				} else {
					ci.tails = t.Streams
				}
			}
		case errors.Is(err, absorb.ErrCorrupt):
			rep.problem("%s: checkpoint: %v", k, err)
		case !errors.Is(err, metastore.ErrNotFound):
			return nil, err
		}
		chains[k] = ci
		return ci, nil
	}
	// The last ref end of every stream, per chain, to compare with the
	// tails snapshots at the end.
	ends := map[string]map[string]uint64{}
	after := ""
	for {
		items, err := b.meta.Scan(ctx, "streams/", after, 1000)
		if err != nil {
			return err
		}
		for _, it := range items {
			var sr streamRecord
			if err := json.Unmarshal(it.Value, &sr); err != nil {
				rep.problem("stream record %s is not JSON: %v", it.Key, err)
				continue
			}
			c, err := chain.ParseClass(sr.Class)
			if err != nil {
				rep.problem("stream record %s: %v", it.Key, err)
				continue
			}
			if it.Key != chain.StreamRecordKey(sr.Name) {
				rep.problem("stream record %s names stream %q, whose key is %s", it.Key, sr.Name, chain.StreamRecordKey(sr.Name))
			}
			rep.streams++
			ci, err := getChain(sr.Star, c)
			if err != nil {
				return err
			}
			end, err := fsckStream(ctx, b, rep, prog, sr, c, ci)
			if err != nil {
				return err
			}
			k := sr.Star + "/" + c.String()
			if ends[k] == nil {
				ends[k] = map[string]uint64{}
			}
			if end > 0 {
				ends[k][sr.id()] = end
			}
		}
		if len(items) < 1000 {
			break
		}
		after = items[len(items)-1].Key
	}
	for k, ci := range chains {
		if err := fsckOpenable(ctx, b, rep, k, ci); err != nil {
			return err
		}
		if ci.tails == nil || ci.cp.Pending != nil {
			continue
		}
		for id, t := range ci.tails {
			name, inc := chain.SplitStreamID(id)
			got, ok := ends[k][id]
			if !ok {
				rep.note("%s: tails snapshot has stream %q (incarnation %q), which has no record now (deleted)", k, name, inc)
				continue
			}
			if got != t.Next {
				rep.problem("%s: tails snapshot says stream %q ends at %d, its refs end at %d", k, name, t.Next, got)
			}
		}
		for id, end := range ends[k] {
			if _, ok := ci.tails[id]; !ok {
				name, _ := chain.SplitStreamID(id)
				rep.problem("%s: stream %q has refs up to %d but no entry in the tails snapshot", k, name, end)
			}
		}
	}
	return nil
}

// fsckStream checks one stream's refs and returns the end of its last ref.
func fsckStream(ctx context.Context, b *backends, rep *fsckReport, prog *progress, sr streamRecord, c chain.Class, ci *chainInfo) (uint64, error) {
	id := sr.id()
	prefix := chain.RefPrefix(id)
	set := b.sets[c]
	var next uint64
	first := true
	after := ""
	for {
		items, err := b.meta.Scan(ctx, prefix, after, 256)
		if err != nil {
			return next, err
		}
		n := len(items)
		for i, it := range items {
			if !chain.IsRefOf(id, it.Key) {
				items, n = items[:i], 0 // a later incarnation's refs, under an incarnation-less prefix
				break
			}
		}
		for _, it := range items {
			rep.refs++
			prog.update("fsck: %d streams, %d refs, %d extents", rep.streams, rep.refs, rep.extents)
			ref, err := absorb.DecodeRef(it.Value)
			if err != nil {
				rep.problem("ref %s: %v", it.Key, err)
				continue
			}
			if ref.Stream != id || it.Key != chain.RefKey(id, ref.End) {
				rep.problem("ref %s is for stream %q ending at %d (key %s)", it.Key, ref.Stream, ref.End, chain.RefKey(ref.Stream, ref.End))
			}
			if ref.Class != c.String() {
				rep.problem("ref %s points into the %s set; stream %q is %s", it.Key, ref.Class, sr.Name, c)
			}
			switch {
			case first && ref.Start > 0:
				rep.note("stream %q: first readable record is %d (earlier ones trimmed)", sr.Name, ref.Start)
			case !first && ref.Start > next:
				rep.problem("stream %q: gap [%d, %d) between refs", sr.Name, next, ref.Start)
			case !first && ref.Start < next:
				rep.note("stream %q: refs overlap at [%d, %d) (settle repointing)", sr.Name, ref.Start, next)
			}
			first = false
			next = max(next, ref.End)
			if len(set) == 0 {
				rep.problem("ref %s: no %s buckets configured to check it against", it.Key, c)
				continue
			}
			for _, ext := range ref.Extents {
				rep.extents++
				fsckCut(rep, it.Key, ext, ci)
				good := 0
				for i, bucket := range set {
					data, err := bucket.Get(ctx, ext.Key, int64(ext.Offset), int64(ext.Length))
					rep.copies++
					if err == nil {
						_, err = envelope.DecodeFrame(ext.FrameInfo(id), data)
					}
					if ctx.Err() != nil {
						return next, ctx.Err()
					}
					if err != nil {
						rep.badCopies++
						rep.note("ref %s: extent %s [%d+%d) in bucket %s: %v", it.Key, ext.Key, ext.Offset, ext.Length, b.names[c][i], err)
						continue
					}
					good++
				}
				if good == 0 {
					rep.problem("stream %q records [%d, %d): no copy of %s [%d+%d) verifies in %d bucket(s)", sr.Name, ext.FirstSeq, ext.FirstSeq+uint64(ext.Count), ext.Key, ext.Offset, ext.Length, len(set))
				}
			}
		}
		if n < 256 {
			return next, nil
		}
		after = items[len(items)-1].Key
	}
}

// fsckOpenable checks that the next owner's takeover of the chain k (star/
// class) would succeed, without writing anything: from the checkpoint and
// its tails snapshot it walks every slot the takeover would walk (the
// pending round, then each epoch up to its recorded cut, and in the current
// epoch without a cut every slot that is committed now, where the fence
// would stop at the first that is not) and plans its absorb rounds. A plan
// that fails (a stream's frames do not continue its tail) means every Open
// of the star would fail: a problem, named with where the walk broke.
func fsckOpenable(ctx context.Context, b *backends, rep *fsckReport, k string, ci *chainInfo) error {
	if !ci.hasRec || !ci.hasCP || (ci.cp.Tails != "" && ci.tails == nil) {
		return nil // nothing to open, or a problem already reported
	}
	star, cls, _ := strings.Cut(k, "/")
	c, err := chain.ParseClass(cls)
	if err != nil {
		return nil
	}
	set := b.sets[c]
	if len(set) == 0 {
		return nil
	}
	w := ci.rec.W
	tails := map[string]absorb.StreamTail{}
	for id, t := range ci.tails {
		tails[id] = t
	}
	bset := chain.BucketSet{Stores: set, Names: b.names[c], W: w}
	walk := func(e, from, to uint64) error {
		// A slot with no good copy is retried until the context ends: bound
		// it, and report it (it, too, would keep a takeover from finishing).
		wctx, cancel := context.WithTimeout(ctx, fsckWalkBound)
		defer cancel()
		err := chain.Walk(wctx, bset, star, c, e, from, to, func(slot uint64, _ []byte, frames []envelope.FrameInfo) error {
			_, err := absorb.Plan(c.String(), "fsck", []absorb.Slot{{Epoch: e, Slot: slot, Key: chain.SlotKey(star, c, e, slot), Frames: frames}}, tails)
			if err != nil {
				rep.problem("%s cannot be opened: the next owner's walk would fail at epoch %d slot %d: %v", k, e, slot, err)
				return errStopWalk
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStopWalk) && ctx.Err() == nil {
			rep.problem("%s cannot be opened: the next owner's walk of epoch %d [%d, %d) would not finish: %v", k, e, from, to, err)
			return errStopWalk
		}
		return err
	}
	pos := struct{ epoch, next uint64 }{ci.cp.Epoch, ci.cp.Next}
	if p := ci.cp.Pending; p != nil {
		if err := walk(p.Epoch, p.From, p.To); err != nil {
			return walkErr(err)
		}
		pos.epoch, pos.next = p.Epoch, p.To
	}
	for e := pos.epoch; e <= ci.rec.Epoch; e++ {
		from := uint64(0)
		if e == pos.epoch {
			from = pos.next
		}
		cut, ok := ci.rec.CutOf(e)
		if !ok && e != ci.rec.Epoch {
			continue // an epoch that never wrote
		}
		if !ok {
			// The current epoch, not sealed: a successor would fence it at
			// its first slot that is not committed.
			end := from
			for {
				st, err := probeSlot(ctx, set, star, c, e, end)
				if err != nil {
					return err
				}
				if !st.committed(w) {
					break
				}
				end++
			}
			cut.Slot = end
		}
		if from < cut.Slot {
			if err := walk(e, from, cut.Slot); err != nil {
				return walkErr(err)
			}
		}
	}
	return nil
}

// fsckWalkBound bounds the walk of one range by fsckOpenable.
const fsckWalkBound = 30 * time.Second

// errStopWalk ends fsckOpenable's walk at the first failed plan (already
// reported).
var errStopWalk = errors.New("fsck: stop the walk")

func walkErr(err error) error {
	if errors.Is(err, errStopWalk) {
		return nil
	}
	return err
}

// fsckCut checks that a chain extent lies in a slot that counts: below its
// epoch's recorded cut, or below the checkpoint of the live epoch.
func fsckCut(rep *fsckReport, refKey string, ext absorb.Extent, ci *chainInfo) {
	sk, ok := parseSlotKey(ext.Key)
	if !ok || !ci.hasRec {
		return
	}
	if cut, ok := ci.rec.CutOf(sk.epoch); ok {
		if sk.slot >= cut.Slot {
			rep.problem("ref %s points at %s, at or past epoch %d's cut %d: nothing there counts", refKey, ext.Key, sk.epoch, cut.Slot)
		}
		return
	}
	if sk.epoch == ci.rec.Epoch && ci.hasCP && ci.cp.Epoch == sk.epoch && sk.slot >= ci.cp.Next {
		rep.problem("ref %s points at %s, past the checkpoint (epoch %d, slot %d)", refKey, ext.Key, ci.cp.Epoch, ci.cp.Next)
	}
}
