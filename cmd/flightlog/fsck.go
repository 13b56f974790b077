package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/repair"
	"github.com/flightlog/flightlog/settle"
)

// streamRecord is the part of a stream's metastore record fsck needs.
type streamRecord struct {
	Name        string `json:"name"`
	Class       string `json:"class"`
	Star        string `json:"star"`
	Incarnation string `json:"incarnation,omitempty"`
	// TrimSeq is the stream's trim point: records below it are unreadable
	// even where a ref still covers them.
	TrimSeq uint64 `json:"trim_seq,omitempty"`
}

// id is the stream's ID: what its refs, frames and tails are keyed by.
func (r streamRecord) id() string { return chain.StreamID(r.Name, r.Incarnation) }

// fsckReport accumulates what fsck found.
type fsckReport struct {
	w                              io.Writer
	quiet                          bool
	streams, refs, extents, copies int
	badCopies, problems, notes     int
	repairable                     int // problems fsck --repair would repair
}

func (r *fsckReport) problem(format string, args ...any) {
	r.problems++
	fmt.Fprintf(r.w, "PROBLEM: "+format+"\n", args...)
}

// repairableProblem is a problem fsck --repair repairs: how is appended.
func (r *fsckReport) repairableProblem(how, format string, args ...any) {
	r.repairable++
	r.problem(format+" (repairable: fsck --repair "+how+")", args...)
}

func (r *fsckReport) note(format string, args ...any) {
	r.notes++
	if !r.quiet {
		fmt.Fprintf(r.w, "note: "+format+"\n", args...)
	}
}

// chainInfo is a chain's epoch record, checkpoint and snapshots, read once.
type chainInfo struct {
	star  string
	class chain.Class
	rc    repair.Chain // the chain as the repair library addresses it
	recs  repair.Records
	rec   chain.EpochRecord
	// hasRec, hasCP: the records exist (and decode).
	hasRec bool
	cp     absorb.Checkpoint
	hasCP  bool
	tails  map[string]absorb.StreamTail // nil if none or unreadable
	// trim is the chain's trim cursor (both positions at chain.Start() when
	// nothing is settled): slots below trim.Deleted are deleted on purpose.
	trim chain.TrimCursor
	// repairSnapshots: a snapshot copy is damaged and fsck --repair would
	// repair it.
	repairSnapshots bool
}

func (ci *chainInfo) key() string { return ci.star + "/" + ci.class.String() }

// cutOf returns epoch e's cut: from the epoch record, or, for an epoch
// settlement has passed (whose cut the record may no longer carry), from
// the trim cursor.
func (ci *chainInfo) cutOf(e uint64) (uint64, bool) {
	if c, ok := ci.rec.CutOf(e); ok {
		return c.Slot, true
	}
	return ci.trim.CutOf(e)
}

// deleted reports whether slot (epoch, slot) is below the trim cursor's
// deleted position: settlement settled it and deleted its copies.
func (ci *chainInfo) deleted(epoch, slot uint64) bool {
	return (chain.Position{Epoch: epoch, Next: slot}).Less(ci.trim.Deleted)
}

// slotCheck is what fsck learnt of one slot (once per run).
type slotCheck struct {
	key       string
	good      bool
	frames    []envelope.FrameInfo // of a good copy
	copies    []repair.Copy
	envelopes int // copies a fence counts as the slot's flight
}

// count counts the copies in state st.
func (sc *slotCheck) count(st repair.State) int {
	n := 0
	for _, c := range sc.copies {
		if c.State == st {
			n++
		}
	}
	return n
}

// slotTarget is a slot fsck --repair would repair.
type slotTarget struct {
	ci          *chainInfo
	epoch, slot uint64
	ev          repair.Evidence
}

// fsckRun is one run of the checks over the backends.
type fsckRun struct {
	b       *backends
	rep     *fsckReport
	prog    *progress
	chains  map[string]*chainInfo
	order   []*chainInfo
	slots   map[string]*slotCheck
	targets []slotTarget
	// settled: the settled objects refs point at, checked once each, by
	// key; settledOrder is the order they were first met in.
	settled      map[string]*settledCheck
	settledOrder []string
	// orphans: settled objects no ref points at and no settle marker
	// names, which fsck --repair reclaims.
	orphans []orphan
}

// orphan is a settled object in one bucket of the Standard set that no
// ref points at.
type orphan struct {
	bucket int
	key    string
}

// fsckCmd: flightlog fsck [--repair].
func fsckCmd(fs *flag.FlagSet, _ *globalOpts) func(context.Context, *cmdEnv, []string) int {
	quiet := fs.Bool("q", false, "print problems only, not notes (poison in a committed slot, trimmed records, slots a fence decides)")
	doRepair := fs.Bool("repair", false, "re-copy every damaged or missing copy of a settled slot from a good copy, and re-copy or rebuild a damaged tails snapshot, reclaim settled objects no ref points at and no settle pass marked; then check again (see the repair package for what it refuses)")
	return func(ctx context.Context, env *cmdEnv, _ []string) int {
		b, err := env.g.open(ctx, true)
		if err != nil {
			return env.fail(err)
		}
		defer b.Close()
		prog := newProgress(env.stderr)
		run, err := runFsck(ctx, b, env.stdout, *quiet, prog)
		if err != nil {
			prog.done()
			return env.fail(fmt.Errorf("fsck could not finish: %w", err))
		}
		if *doRepair && (len(run.targets) > 0 || run.snapshotTargets() > 0 || run.damagedSettled() > 0 || len(run.orphans) > 0) {
			if err := run.repair(ctx, env.stdout); err != nil {
				prog.done()
				return env.fail(fmt.Errorf("fsck --repair could not finish: %w", err))
			}
			fmt.Fprintln(env.stdout, "fsck: checking again after the repair")
			if run, err = runFsck(ctx, b, env.stdout, *quiet, prog); err != nil {
				prog.done()
				return env.fail(fmt.Errorf("fsck could not finish: %w", err))
			}
		}
		prog.done()
		if run.rep.problems > 0 {
			return exitProblems
		}
		return exitOK
	}
}

// runFsck runs every check once and prints what it found and its summary.
func runFsck(ctx context.Context, b *backends, w io.Writer, quiet bool, prog *progress) (*fsckRun, error) {
	run := &fsckRun{b: b, rep: &fsckReport{w: w, quiet: quiet}, prog: prog, chains: map[string]*chainInfo{}, slots: map[string]*slotCheck{}, settled: map[string]*settledCheck{}}
	if err := run.fsck(ctx); err != nil {
		return run, err
	}
	prog.done()
	rep := run.rep
	fmt.Fprintf(w, "fsck: %d streams, %d refs, %d extents, %d copies read (%d bad); %d problem(s)", rep.streams, rep.refs, rep.extents, rep.copies, rep.badCopies, rep.problems)
	if rep.repairable > 0 {
		fmt.Fprintf(w, ", %d repairable with fsck --repair", rep.repairable)
	}
	fmt.Fprintln(w)
	return run, nil
}

// fsck checks, without writing anything:
//   - every stream's refs: they tile the stream from its first readable
//     record with no gap, every chain extent lies below its epoch's cut (or
//     the live epoch's checkpoint) and matches a frame of its slot;
//   - every copy of every live slot, whole (envelope, size, footer, every
//     frame's checksum and decoding): each slot a ref points into, and each
//     slot the next owner's takeover would walk or fence (the pending
//     round, each epoch from the checkpoint up to its cut, and the live
//     epoch from the checkpoint until the first slot that is not committed),
//     by point lookups, never a listing;
//   - every copy of the tails snapshot each checkpoint names, and of the
//     full snapshot it builds on, and that the tails agree with the refs;
//   - that the next owner's takeover would succeed (its walk plans);
//   - every copy of every settled object a ref points at, whole, in the
//     Standard bucket set (ParseSettled, every frame's checksum and
//     decoding, each extent a frame of it), and, by a listing of the
//     settled/ prefix of the Standard buckets (an operator's tool may list;
//     nothing on a hot path does), the settled objects no ref points at.
//
// Slots below a chain's trim cursor's deleted position are absent on
// purpose (settlement moved their records and deleted them): no check
// reads them, and a ref pointing there is a problem.
//
// A damaged or missing copy is a problem even when a good copy covers it;
// the message says whether fsck --repair repairs it. It returns an error
// only when it could not run to the end (metastore or bucket unreachable).
func (run *fsckRun) fsck(ctx context.Context) error {
	// The last ref end of every stream, per chain, to compare with the
	// tails snapshots at the end.
	ends := map[string]map[string]uint64{}
	after := ""
	for {
		items, err := run.b.meta.Scan(ctx, "streams/", after, 1000)
		if err != nil {
			return err
		}
		for _, it := range items {
			var sr streamRecord
			if err := json.Unmarshal(it.Value, &sr); err != nil {
				run.rep.problem("stream record %s is not JSON: %v", it.Key, err)
				continue
			}
			c, err := chain.ParseClass(sr.Class)
			if err != nil {
				run.rep.problem("stream record %s: %v", it.Key, err)
				continue
			}
			if it.Key != chain.StreamRecordKey(sr.Name) {
				run.rep.problem("stream record %s names stream %q, whose key is %s", it.Key, sr.Name, chain.StreamRecordKey(sr.Name))
			}
			run.rep.streams++
			ci, err := run.chain(ctx, sr.Star, c)
			if err != nil {
				return err
			}
			end, err := run.fsckStream(ctx, sr, c, ci)
			if err != nil {
				return err
			}
			k := ci.key()
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
	if err := run.fsckOrphans(ctx); err != nil {
		return err
	}
	for _, ci := range run.order {
		k := ci.key()
		if err := run.fsckUnabsorbed(ctx, ci); err != nil {
			return err
		}
		if err := run.fsckSettlement(ctx, ci); err != nil {
			return err
		}
		if ci.tails == nil || ci.cp.Pending != nil {
			continue
		}
		for id, t := range ci.tails {
			name, inc := chain.SplitStreamID(id)
			got, ok := ends[k][id]
			if !ok {
				run.rep.note("%s: tails snapshot has stream %q (incarnation %q), which has no record now (deleted)", k, name, inc)
				continue
			}
			if got != t.Next {
				run.rep.problem("%s: tails snapshot says stream %q ends at %d, its refs end at %d", k, name, t.Next, got)
			}
		}
		for id, end := range ends[k] {
			if _, ok := ci.tails[id]; !ok {
				name, _ := chain.SplitStreamID(id)
				run.rep.problem("%s: stream %q has refs up to %d but no entry in the tails snapshot", k, name, end)
			}
		}
	}
	return nil
}

// chain reads a chain's records and checks its snapshots, once.
func (run *fsckRun) chain(ctx context.Context, star string, c chain.Class) (*chainInfo, error) {
	k := star + "/" + c.String()
	if ci, ok := run.chains[k]; ok {
		return ci, nil
	}
	b := run.b
	ci := &chainInfo{star: star, class: c}
	run.chains[k] = ci
	run.order = append(run.order, ci)
	rec, _, err := chain.ReadEpoch(ctx, b.meta, star, c)
	switch {
	case err == nil:
		ci.rec, ci.hasRec = rec, true
	case errors.Is(err, chain.ErrBadRecord):
		run.rep.problem("%s: epoch record: %v", k, err)
	case !errors.Is(err, metastore.ErrNotFound):
		return nil, err
	}
	w := len(b.sets[c])/2 + 1
	if ci.hasRec {
		w = ci.rec.W
	}
	ci.rc = repair.Chain{Meta: b.meta, Star: star, Class: c, Set: b.set(c, w)}
	// The trim cursor before the checkpoint: it never passes the
	// checkpoint and both only grow, so read in this order they compare
	// soundly beside a live leader.
	ci.trim = chain.TrimCursor{At: chain.Start(), Deleted: chain.Start()}
	switch t, _, err := chain.ReadTrimCursor(ctx, b.meta, star, c); {
	case err == nil:
		ci.trim = t
	case errors.Is(err, chain.ErrCorruptTrimCursor):
		run.rep.problem("%s: trim cursor: %v (slots are checked as if nothing were settled)", k, err)
	default:
		return nil, err
	}
	cp, _, err := absorb.ReadCheckpoint(ctx, b.meta, star, c)
	switch {
	case err == nil:
		ci.cp, ci.hasCP = cp, true
	case errors.Is(err, absorb.ErrCorrupt):
		run.rep.problem("%s: checkpoint: %v", k, err)
	case !errors.Is(err, metastore.ErrNotFound):
		return nil, err
	}
	if ci.hasCP && (chain.Position{Epoch: cp.Epoch, Next: cp.Next}).Less(ci.trim.At) {
		run.rep.problem("%s: the trim cursor (settled below epoch %d, slot %d) is past the checkpoint (epoch %d, slot %d): settlement passed slots not yet absorbed", k, ci.trim.At.Epoch, ci.trim.At.Next, cp.Epoch, cp.Next)
	}
	if len(b.sets[c]) == 0 {
		return ci, nil
	}
	if ci.hasRec && ci.rec.K != len(b.sets[c]) {
		run.rep.problem("%s: the epoch record has K=%d buckets, this tool was given %d (check the backend flags): its slots are not checked", k, ci.rec.K, len(b.sets[c]))
		ci.hasRec = false
	}
	if ci.recs, err = ci.rc.ReadRecords(ctx); err != nil {
		return nil, err
	}
	if !ci.hasCP || cp.Tails == "" {
		return ci, nil
	}
	snaps, err := ci.rc.CheckSnapshots(ctx, cp)
	if err != nil {
		return nil, err
	}
	readable := true
	for _, s := range snaps {
		what := "the checkpoint's tails snapshot"
		if s.Base {
			what = "the full tails snapshot it builds on,"
		}
		readable = readable && s.Good > 0
		if s.Good == 0 && len(s.Damaged()) > 0 {
			var why []string
			for _, cp := range s.Copies {
				why = append(why, copyFault(cp))
			}
			ci.repairSnapshots = true
			run.rep.repairableProblem("rebuilds it from the refs", "%s: %s %s has no sound copy (%s)", k, what, s.Key, strings.Join(why, "; "))
			continue
		}
		for _, cp := range s.Copies {
			switch cp.State {
			case repair.Missing, repair.Corrupt:
				ci.repairSnapshots = true
				run.rep.repairableProblem("re-copies it from "+s.Source(), "%s: %s %s in bucket %s", k, what, s.Key, copyFault(cp))
			case repair.Unreachable:
				run.rep.problem("%s: %s %s in bucket %s", k, what, s.Key, copyFault(cp))
			}
		}
	}
	if readable {
		t, err := absorb.ReadTails(ctx, b.sets[c], cp.Tails)
		if err != nil {
			run.rep.problem("%s: checkpoint's tails snapshot %s: %v", k, cp.Tails, err)
		} else {
			ci.tails = t.Streams
		}
	}
	return ci, nil
}

// copyFault describes a copy that is not good.
func copyFault(c repair.Copy) string {
	if c.Err != nil {
		return fmt.Sprintf("%s: %s: %v", c.Bucket, c.State, c.Err)
	}
	return fmt.Sprintf("%s: %s", c.Bucket, c.State)
}

// checkSlot checks every copy of a slot (once per run), reports what is
// wrong and whether fsck --repair would repair it, and returns the slot's
// summary.
func (run *fsckRun) checkSlot(ctx context.Context, ci *chainInfo, epoch, slot uint64, ev repair.Evidence, where string) (*slotCheck, error) {
	key := chain.SlotKey(ci.star, ci.class, epoch, slot)
	if sc, ok := run.slots[key]; ok {
		return sc, nil
	}
	r, err := repair.CheckSlot(ctx, ci.rc.Set, ci.star, ci.class, epoch, slot)
	if err != nil {
		return nil, err
	}
	sc := &slotCheck{key: key, good: r.Good > 0, frames: r.Frames, copies: r.Copies, envelopes: r.Envelopes}
	run.slots[key] = sc
	run.rep.copies += len(r.Copies)
	run.prog.update("fsck: %d streams, %d refs, %d extents, %d copies", run.rep.streams, run.rep.refs, run.rep.extents, run.rep.copies)
	if r.Healthy() || r.Empty() {
		return sc, nil
	}
	for _, c := range r.Copies {
		if c.State != repair.Good {
			run.rep.badCopies++
		}
	}
	plan := ci.rc.Plan(ci.recs, r, ev)
	var damaged []string
	for _, i := range r.Damaged() {
		damaged = append(damaged, copyFault(r.Copies[i]))
	}
	switch {
	case len(damaged) == 0:
	case plan.Refused != "":
		run.rep.problem("slot %s (%s): %s (not repairable: %s)", key, where, strings.Join(damaged, "; "), plan.Refused)
	default:
		for j, a := range plan.Actions {
			c := r.Copies[r.Damaged()[j]]
			if a.Note == "" {
				run.rep.repairableProblem("re-copies it from "+r.Source(), "slot %s (%s) in bucket %s", key, where, copyFault(c))
			} else {
				run.rep.problem("slot %s (%s) in bucket %s (not repairable now: %s)", key, where, copyFault(c), a.Note)
			}
		}
		run.targets = append(run.targets, slotTarget{ci: ci, epoch: epoch, slot: slot, ev: ev})
	}
	for _, c := range r.Copies {
		switch c.State {
		case repair.Poison:
			run.rep.note("slot %s (%s): poison in bucket %s (a fencer's; a committed slot may hold up to K-W)", key, where, c.Bucket)
		case repair.Foreign:
			run.rep.problem("slot %s (%s) in bucket %s (not repairable: fsck never touches a foreign object; see flightlog inspect %s)", key, where, copyFault(c), key)
		case repair.Unreachable:
			run.rep.problem("slot %s (%s) in bucket %s", key, where, copyFault(c))
		}
	}
	return sc, nil
}

// fsckStream checks one stream's refs and returns the end of its last ref.
func (run *fsckRun) fsckStream(ctx context.Context, sr streamRecord, c chain.Class, ci *chainInfo) (uint64, error) {
	rep, b := run.rep, run.b
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
			case first && max(ref.Start, sr.TrimSeq) > 0:
				// A trim deletes only the refs wholly below the trim point:
				// the first ref left may start below it, and the records it
				// covers there are unreadable all the same.
				rep.note("stream %q: first readable record is %d (earlier ones trimmed)", sr.Name, max(ref.Start, sr.TrimSeq))
			case !first && ref.Start > next:
				rep.problem("stream %q: gap [%d, %d) between refs", sr.Name, next, ref.Start)
			case !first && ref.Start < next:
				rep.note("stream %q: refs overlap at [%d, %d) (settle repointing)", sr.Name, ref.Start, next)
			}
			first = false
			next = max(next, ref.End)
			if len(set) == 0 && !ref.Settled() {
				rep.problem("ref %s: no %s buckets configured to check it against", it.Key, c)
				continue
			}
			for _, ext := range ref.Extents {
				rep.extents++
				if chain.IsSettledKey(ext.Key) {
					if err := run.fsckSettledExtent(ctx, sr, it.Key, ext); err != nil {
						return next, err
					}
					continue
				}
				fsckCut(rep, it.Key, ext, ci)
				if err := run.fsckExtent(ctx, sr, c, ci, it.Key, ext); err != nil {
					return next, err
				}
			}
		}
		if n < 256 {
			return next, nil
		}
		after = items[len(items)-1].Key
	}
}

// fsckExtent checks that one extent of a ref verifies from at least one
// copy: a chain extent by its slot's check (every copy, whole) and a match
// with a frame of the slot's footer; any other object by a ranged read of
// the extent in each bucket.
func (run *fsckRun) fsckExtent(ctx context.Context, sr streamRecord, c chain.Class, ci *chainInfo, refKey string, ext absorb.Extent) error {
	rep, set := run.rep, run.b.sets[c]
	id := sr.id()
	noCopy := func() {
		rep.problem("stream %q records [%d, %d): no copy of %s [%d+%d) verifies in %d bucket(s)", sr.Name, ext.FirstSeq, ext.FirstSeq+uint64(ext.Count), ext.Key, ext.Offset, ext.Length, len(set))
	}
	if sk, ok := parseSlotKey(ext.Key); ok && sk.star == ci.star && sk.class == c && ci.hasRec {
		sc, err := run.checkSlot(ctx, ci, sk.epoch, sk.slot, repair.Evidence{Referenced: true}, "referenced by "+refKey)
		if err != nil {
			return err
		}
		if !sc.good {
			noCopy()
			return nil
		}
		want := ext.FrameInfo(id)
		for _, f := range sc.frames {
			if f.Offset == want.Offset {
				if f != want {
					rep.problem("ref %s: extent %s [%d+%d) does not match the slot's frame there (stream %q [%d, +%d) crc %08x; the ref says stream %q [%d, +%d) crc %08x)", refKey, ext.Key, ext.Offset, ext.Length, f.Stream, f.FirstSeq, f.Count, f.CRC, want.Stream, want.FirstSeq, want.Count, want.CRC)
				}
				return nil
			}
		}
		rep.problem("ref %s: extent %s [%d+%d) is not a frame of the slot", refKey, ext.Key, ext.Offset, ext.Length)
		return nil
	}
	good := 0
	for i, bucket := range set {
		data, err := bucket.Get(ctx, ext.Key, int64(ext.Offset), int64(ext.Length))
		rep.copies++
		if err == nil {
			_, err = envelope.DecodeFrame(ext.FrameInfo(id), data)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			rep.badCopies++
			rep.problem("ref %s: extent %s [%d+%d) in bucket %s: %v", refKey, ext.Key, ext.Offset, ext.Length, run.b.names[c][i], err)
			continue
		}
		good++
	}
	if good == 0 {
		noCopy()
	}
	return nil
}

// fsckUnabsorbed checks every slot the next owner's takeover of the chain
// would read, by point lookups (never a listing), and that the takeover
// would succeed, without writing anything: from the checkpoint and its
// tails snapshot, the pending round, then each epoch up to its recorded
// cut, and in the current epoch without a cut every slot that is committed
// now, up to the first that is not (where the fence would cut). Each slot's
// every copy is checked whole; the committed ones' frames are planned into
// absorb rounds as the takeover would. A plan that fails (a stream's frames
// do not continue its tail), a committed slot without a good copy (the
// walk would never finish), or a slot a fence cannot decide (a corrupt
// copy counts as neither flight nor poison) means every Open of the star
// would fail: a problem, named with where it breaks.
func (run *fsckRun) fsckUnabsorbed(ctx context.Context, ci *chainInfo) error {
	if !ci.hasRec || !ci.hasCP || len(ci.rc.Set.Stores) == 0 {
		return nil // nothing to open, or a problem already reported
	}
	k := ci.key()
	rep := run.rep
	kk, w := ci.rec.K, ci.rec.W
	canPlan := ci.cp.Tails == "" || ci.tails != nil
	tails := map[string]absorb.StreamTail{}
	for id, t := range ci.tails {
		tails[id] = t
	}
	plan := func(e, slot uint64, sc *slotCheck) {
		if !canPlan {
			return
		}
		if !sc.good {
			rep.problem("%s cannot be opened: the next owner's walk would not finish: epoch %d slot %d is committed but has no good copy", k, e, slot)
			canPlan = false
			return
		}
		_, err := absorb.Plan(ci.class.String(), "fsck", []absorb.Slot{{Epoch: e, Slot: slot, Key: chain.SlotKey(ci.star, ci.class, e, slot), Frames: sc.frames}}, tails)
		if err != nil {
			rep.problem("%s cannot be opened: the next owner's walk would fail at epoch %d slot %d: %v", k, e, slot, err)
			canPlan = false
		}
	}
	// committedRange checks [from, to) of epoch e, every slot of which is
	// committed (a pending round, or below a recorded cut).
	committedRange := func(e, from, to uint64, where string) error {
		for s := from; s < to; s++ {
			sc, err := run.checkSlot(ctx, ci, e, s, repair.Evidence{}, where)
			if err != nil {
				return err
			}
			plan(e, s, sc)
		}
		return nil
	}
	pos := struct{ epoch, next uint64 }{ci.cp.Epoch, ci.cp.Next}
	if d := ci.trim.Deleted; (chain.Position{Epoch: pos.epoch, Next: pos.next}).Less(d) {
		// Slots below the deleted position are gone on purpose (the
		// problem, a cursor past the checkpoint, is reported already).
		pos.epoch, pos.next = d.Epoch, d.Next
	}
	if p := ci.cp.Pending; p != nil {
		if err := committedRange(p.Epoch, p.From, p.To, "the pending absorb round"); err != nil {
			return err
		}
		pos.epoch, pos.next = p.Epoch, p.To
	}
	for e := pos.epoch; e <= ci.rec.Epoch; e++ {
		from := uint64(0)
		if e == pos.epoch {
			from = pos.next
		}
		cut, ok := ci.rec.CutOf(e)
		if ok {
			if err := committedRange(e, from, cut.Slot, fmt.Sprintf("unabsorbed, below epoch %d's cut %d", e, cut.Slot)); err != nil {
				return err
			}
			continue
		}
		if e != ci.rec.Epoch {
			continue // an epoch that never wrote
		}
		// The current epoch, not sealed: a successor would fence it from
		// here, slot by slot, and cut at the first that is not committed.
		for s := from; ; s++ {
			if err := ctx.Err(); err != nil {
				return err
			}
			sc, err := run.checkSlot(ctx, ci, e, s, repair.Evidence{}, "unabsorbed, in the live epoch")
			if err != nil {
				return err
			}
			if sc.envelopes >= w {
				plan(e, s, sc)
				continue
			}
			poisons, missing := sc.count(repair.Poison), sc.count(repair.Missing)
			if missing == len(sc.copies) {
				break
			}
			var occ []string
			for _, c := range sc.copies {
				occ = append(occ, copyFault(c))
			}
			switch {
			case poisons+missing < kk-w+1:
				rep.problem("%s cannot be opened: the next owner's fence cannot decide epoch %d slot %d (%s): a corrupt or foreign copy counts as neither a flight nor a poison, so neither W=%d flight copies nor K-W+1=%d poisons can be reached; see flightlog inspect %s", k, e, s, strings.Join(occ, "; "), w, kk-w+1, sc.key)
			case sc.count(repair.Corrupt) > 0:
				rep.problem("%s: epoch %d slot %d (%s) has a damaged copy and fewer than W=%d flight copies: the next owner's fence will kill it (records in it are lost if they were acked)", k, e, s, strings.Join(occ, "; "), w)
			default:
				rep.note("%s: epoch %d slot %d (%s): not committed; the next owner's fence decides it", k, e, s, strings.Join(occ, "; "))
			}
			break
		}
	}
	return nil
}

// fsckSettlement checks that settlement can go on from the trim cursor:
// a pass walks every absorbed epoch from the cursor's to the checkpoint's
// and needs the cut of each, from the epoch record or the cursor. A cut
// recorded in neither (an epoch record that pruned it while the cursor had
// not passed the epoch, as a star opened several times with settlement
// off used to) is re-derived by the next pass, by a fence of the epoch
// from the cursor: fsck reads, slot by slot, what that fence would decide,
// and says where the cut is, or that no fence can decide the slot there
// and settlement of the chain cannot proceed.
func (run *fsckRun) fsckSettlement(ctx context.Context, ci *chainInfo) error {
	if !ci.hasRec || !ci.hasCP || len(ci.rc.Set.Stores) == 0 {
		return nil // nothing to settle, or a problem already reported
	}
	k, rep := ci.key(), run.rep
	kk, w := ci.rec.K, ci.rec.W
	at := ci.trim.At
	for e := at.Epoch; e < ci.cp.Epoch; e++ {
		if _, ok := ci.cutOf(e); ok {
			continue
		}
		from := uint64(0)
		if e == at.Epoch {
			from = at.Next
		}
		where := fmt.Sprintf("absorbed, not settled: epoch %d's cut is recorded nowhere", e)
		for s := from; ; s++ {
			if err := ctx.Err(); err != nil {
				return err
			}
			sc, err := run.checkSlot(ctx, ci, e, s, repair.Evidence{}, where)
			if err != nil {
				return err
			}
			if sc.envelopes >= w {
				continue // committed
			}
			poisons, missing := sc.count(repair.Poison), sc.count(repair.Missing)
			var occ []string
			for _, c := range sc.copies {
				occ = append(occ, copyFault(c))
			}
			switch {
			case poisons >= kk-w+1:
				rep.note("%s: the cut of epoch %d is recorded nowhere (neither the epoch record nor the trim cursor); the next settle pass re-derives it: slot %d, dead", k, e, s)
			case poisons+missing >= kk-w+1:
				rep.note("%s: the cut of epoch %d is recorded nowhere (neither the epoch record nor the trim cursor); the next settle pass re-derives it by fencing slot %d (%s)", k, e, s, strings.Join(occ, "; "))
			default:
				rep.problem("%s: settlement cannot proceed: the cut of epoch %d is recorded nowhere (neither the epoch record nor the trim cursor), and the fence that would re-derive it cannot decide slot %d (%s): a corrupt or foreign copy counts as neither a flight nor a poison; see flightlog inspect %s", k, e, s, strings.Join(occ, "; "), sc.key)
			}
			break
		}
	}
	return nil
}

// fsckCut checks that a chain extent lies in a slot that counts: below its
// epoch's recorded cut, or below the checkpoint of the live epoch.
func fsckCut(rep *fsckReport, refKey string, ext absorb.Extent, ci *chainInfo) {
	sk, ok := parseSlotKey(ext.Key)
	if !ok || !ci.hasRec {
		return
	}
	if ci.deleted(sk.epoch, sk.slot) {
		rep.problem("ref %s points at %s, below the trim cursor (deleted below epoch %d, slot %d): settlement deleted that slot without repointing the ref", refKey, ext.Key, ci.trim.Deleted.Epoch, ci.trim.Deleted.Next)
		return
	}
	if cut, ok := ci.cutOf(sk.epoch); ok {
		if sk.slot >= cut {
			rep.problem("ref %s points at %s, at or past epoch %d's cut %d: nothing there counts", refKey, ext.Key, sk.epoch, cut)
		}
		return
	}
	if sk.epoch == ci.rec.Epoch && ci.hasCP && ci.cp.Epoch == sk.epoch && sk.slot >= ci.cp.Next {
		rep.problem("ref %s points at %s, past the checkpoint (epoch %d, slot %d)", refKey, ext.Key, ci.cp.Epoch, ci.cp.Next)
	}
}

// snapshotTargets counts the chains whose snapshots fsck --repair would
// repair.
func (run *fsckRun) snapshotTargets() int {
	n := 0
	for _, ci := range run.order {
		if ci.repairSnapshots {
			n++
		}
	}
	return n
}

// repair runs the repairs the checks found (through package repair, which
// checks each slot again and refuses what is unsafe) and prints what it
// did.
func (run *fsckRun) repair(ctx context.Context, w io.Writer) error {
	copied, left := 0, 0
	for _, t := range run.targets {
		res, err := t.ci.rc.RepairSlot(ctx, t.epoch, t.slot, t.ev)
		if err != nil {
			return err
		}
		key := res.Report.Key
		if res.Refused != "" {
			left++
			fmt.Fprintf(w, "repair: %s: not repaired: %s\n", key, res.Refused)
			continue
		}
		for _, a := range res.Actions {
			if a.Done {
				copied++
				fmt.Fprintf(w, "repair: %s in bucket %s (was %s): %s\n", key, a.Bucket, a.Was, a.Note)
			} else {
				left++
				fmt.Fprintf(w, "repair: %s in bucket %s (was %s): not repaired: %s\n", key, a.Bucket, a.Was, a.Note)
			}
		}
	}
	for _, ci := range run.order {
		if !ci.repairSnapshots {
			continue
		}
		results, err := ci.rc.RepairSnapshots(ctx)
		if err != nil {
			return err
		}
		for _, res := range results {
			if res.Refused != "" {
				left++
				fmt.Fprintf(w, "repair: %s: tails snapshot %s: not repaired: %s\n", ci.key(), res.Report.Key, res.Refused)
				continue
			}
			for _, a := range res.Actions {
				if a.Done {
					copied++
					fmt.Fprintf(w, "repair: %s: tails snapshot %s in bucket %s (was %s): %s\n", ci.key(), res.Report.Key, a.Bucket, a.Was, a.Note)
				} else {
					left++
					fmt.Fprintf(w, "repair: %s: tails snapshot %s in bucket %s (was %s): not repaired: %s\n", ci.key(), res.Report.Key, a.Bucket, a.Was, a.Note)
				}
			}
		}
	}
	c, l, err := run.repairSettled(ctx, w)
	copied, left = copied+c, left+l
	if err != nil {
		return err
	}
	if err := run.reclaimOrphans(ctx, w); err != nil {
		return err
	}
	fmt.Fprintf(w, "repair: %d cop(ies) put back, %d left\n", copied, left)
	return nil
}

// settledCopy is one bucket's copy of a settled object as fsck read it.
type settledCopy struct {
	bucket string
	state  string // "good", "missing", "corrupt", "unreachable"
	err    error
}

func (c settledCopy) String() string {
	if c.state == "corrupt" && c.err != nil {
		// As a slot's: "corrupt: footer: ...", "corrupt: frame 0 ...".
		return fmt.Sprintf("%s: corrupt: %s", c.bucket, strings.TrimPrefix(c.err.Error(), "envelope: "))
	}
	if c.err != nil {
		return fmt.Sprintf("%s: %s: %v", c.bucket, c.state, c.err)
	}
	return fmt.Sprintf("%s: %s", c.bucket, c.state)
}

// settledCheck is what fsck learnt of one settled object (once per run).
type settledCheck struct {
	key    string
	frames []envelope.FrameInfo // of a good copy
	copies []settledCopy
	source int // index of a good copy, -1 if none
}

func (sc *settledCheck) good() bool { return sc.source >= 0 }

// damaged returns the indexes of the missing and corrupt copies.
func (sc *settledCheck) damaged() []int {
	var out []int
	for i, c := range sc.copies {
		if c.state == "missing" || c.state == "corrupt" {
			out = append(out, i)
		}
	}
	return out
}

// readSettled reads and checks one copy of a settled object whole: the
// envelope and footer (envelope.ParseSettled: one stream, frames tiling
// from the envelope's first sequence number) and every frame's checksum
// and decoding.
func readSettled(ctx context.Context, bucket objstore.Store, key string) ([]envelope.FrameInfo, []byte, string, error) {
	obj, err := bucket.Get(ctx, key, 0, -1)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return nil, nil, "missing", nil
	case err != nil:
		return nil, nil, "unreachable", err
	}
	_, frames, err := envelope.ParseSettled(obj)
	if err != nil {
		return nil, obj, "corrupt", err
	}
	for i, f := range frames {
		if f.End() > uint64(len(obj)) {
			return nil, obj, "corrupt", fmt.Errorf("frame %d [%d+%d) runs past the object's %d bytes", i, f.Offset, f.Length, len(obj))
		}
		if _, err := envelope.DecodeFrame(f, obj[f.Offset:f.End()]); err != nil {
			return nil, obj, "corrupt", fmt.Errorf("frame %d (records %d-%d): %w", i, f.FirstSeq, f.FirstSeq+uint64(f.Count)-1, err)
		}
	}
	return frames, obj, "good", nil
}

// checkSettled checks every copy of a settled object in the Standard
// bucket set whole (once per run) and reports each damaged one.
func (run *fsckRun) checkSettled(ctx context.Context, key, refKey string) (*settledCheck, error) {
	if sc, ok := run.settled[key]; ok {
		return sc, nil
	}
	sc := &settledCheck{key: key, source: -1}
	set, names := run.b.sets[chain.Standard], run.b.names[chain.Standard]
	for i, bucket := range set {
		frames, _, state, err := readSettled(ctx, bucket, key)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		run.rep.copies++
		sc.copies = append(sc.copies, settledCopy{bucket: names[i], state: state, err: err})
		if state == "good" && sc.source < 0 {
			sc.source, sc.frames = i, frames
		}
	}
	run.settled[key] = sc
	run.settledOrder = append(run.settledOrder, key)
	run.prog.update("fsck: %d streams, %d refs, %d extents, %d copies", run.rep.streams, run.rep.refs, run.rep.extents, run.rep.copies)
	for _, c := range sc.copies {
		if c.state == "good" {
			continue
		}
		run.rep.badCopies++
		switch {
		case c.state == "unreachable":
			run.rep.problem("settled object %s (referenced by %s) in bucket %s", key, refKey, c)
		case sc.good():
			run.rep.repairableProblem("re-copies it from "+sc.copies[sc.source].bucket, "settled object %s (referenced by %s) in bucket %s", key, refKey, c)
		default:
			run.rep.problem("settled object %s (referenced by %s) in bucket %s (not repairable: no good copy of it in any bucket of the standard set; the records it holds are lost unless a copy exists elsewhere)", key, refKey, c)
		}
	}
	return sc, nil
}

// fsckSettledExtent checks one extent of a ref that points into a settled
// object: the object verifies whole from at least one copy of the
// Standard set, and the extent is one of its frames, CRC and all.
func (run *fsckRun) fsckSettledExtent(ctx context.Context, sr streamRecord, refKey string, ext absorb.Extent) error {
	rep := run.rep
	if len(run.b.sets[chain.Standard]) == 0 {
		rep.problem("ref %s: extent %s is a settled object, and no standard buckets are configured to check it against", refKey, ext.Key)
		return nil
	}
	sc, err := run.checkSettled(ctx, ext.Key, refKey)
	if err != nil {
		return err
	}
	if !sc.good() {
		rep.problem("stream %q records [%d, %d): no copy of settled object %s [%d+%d) verifies in %d bucket(s)", sr.Name, ext.FirstSeq, ext.FirstSeq+uint64(ext.Count), ext.Key, ext.Offset, ext.Length, len(sc.copies))
		return nil
	}
	want := ext.FrameInfo(sr.id())
	for _, f := range sc.frames {
		if f.Offset == want.Offset {
			if f != want {
				rep.problem("ref %s: extent %s [%d+%d) does not match the settled object's frame there (stream %q [%d, +%d) crc %08x; the ref says stream %q [%d, +%d) crc %08x)", refKey, ext.Key, ext.Offset, ext.Length, f.Stream, f.FirstSeq, f.Count, f.CRC, want.Stream, want.FirstSeq, want.Count, want.CRC)
			}
			return nil
		}
	}
	rep.problem("ref %s: extent %s [%d+%d) is not a frame of the settled object", refKey, ext.Key, ext.Offset, ext.Length)
	return nil
}

// fsckOrphans lists the settled/ prefix of each Standard bucket (fsck is
// an operator's tool: nothing on a hot path lists) and notes every settled
// object no ref of a stream record points at. One a settle pass marked
// (merged away, or written by a pass whose repoint is not done or was
// lost) is the passes' to delete; any other is an orphan, reclaimable (a
// deleted incarnation's whose reclaim failed, one a reclaim deleted from
// another bucket first, or one written by a version of settle that did
// not mark its objects), and fsck --repair reclaims it.
func (run *fsckRun) fsckOrphans(ctx context.Context) error {
	set, names := run.b.sets[chain.Standard], run.b.names[chain.Standard]
	if len(set) == 0 {
		return nil
	}
	marked, err := settle.MarkedObjects(ctx, run.b.meta)
	if err != nil {
		return err
	}
	for i, bucket := range set {
		after := ""
		for {
			keys, err := bucket.List(ctx, "settled/", after, 1000)
			if err != nil {
				return fmt.Errorf("list the settled objects in bucket %s: %w", names[i], err)
			}
			for _, k := range keys {
				if _, ok := run.settled[k]; ok {
					continue
				}
				if marked[k] {
					run.rep.note("settled object %s in bucket %s: no ref points at it (marked by a settle pass, which deletes it once due)", k, names[i])
					continue
				}
				run.orphans = append(run.orphans, orphan{bucket: i, key: k})
				run.rep.note("settled object %s in bucket %s: no ref points at it (an orphan: reclaimable; fsck --repair reclaims it)", k, names[i])
			}
			if len(keys) < 1000 {
				break
			}
			after = keys[len(keys)-1]
		}
	}
	return nil
}

// reclaimOrphans deletes the orphans fsck found, each after checking
// again that no settle marker names it (a pass that wrote it since marks
// it first) and that the ref that would point at it (its stream's ref
// ending where it ends) does not.
func (run *fsckRun) reclaimOrphans(ctx context.Context, w io.Writer) error {
	if len(run.orphans) == 0 {
		return nil
	}
	set, names := run.b.sets[chain.Standard], run.b.names[chain.Standard]
	marked, err := settle.MarkedObjects(ctx, run.b.meta)
	if err != nil {
		return err
	}
	for _, o := range run.orphans {
		if marked[o.key] {
			fmt.Fprintf(w, "repair: settled object %s in bucket %s: left to the settle pass that marked it\n", o.key, names[o.bucket])
			continue
		}
		if refKey, ok := settledRefKey(o.key); ok {
			it, err := run.b.meta.Get(ctx, refKey)
			if err != nil && !errors.Is(err, metastore.ErrNotFound) {
				return err
			}
			if err == nil {
				if ref, derr := absorb.DecodeRef(it.Value); derr != nil || refPointsAt(ref, o.key) {
					fmt.Fprintf(w, "repair: settled object %s in bucket %s: not reclaimed: ref %s points at it now\n", o.key, names[o.bucket], refKey)
					continue
				}
			}
		}
		if err := set[o.bucket].Delete(ctx, o.key); err != nil && !errors.Is(err, objstore.ErrNotFound) {
			fmt.Fprintf(w, "repair: settled object %s in bucket %s: not reclaimed: %v\n", o.key, names[o.bucket], err)
			continue
		}
		fmt.Fprintf(w, "repair: settled object %s in bucket %s: reclaimed (no ref points at it)\n", o.key, names[o.bucket])
	}
	return nil
}

// settledRefKey is the key of the ref that points at the settled object
// at key while it is live: its stream's ref ending where the object ends
// (settled/<stream>/<start>-<end> is pointed at by refs/<stream>/<end>).
func settledRefKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, "settled/")
	i := strings.LastIndex(rest, "/")
	if !ok || i < 0 {
		return "", false
	}
	_, end, ok := strings.Cut(rest[i+1:], "-")
	return "refs/" + rest[:i+1] + end, ok
}

func refPointsAt(ref absorb.SpanRef, key string) bool {
	for _, e := range ref.Extents {
		if e.Key == key {
			return true
		}
	}
	return false
}

// damagedSettled counts the settled objects with a damaged copy.
func (run *fsckRun) damagedSettled() int {
	n := 0
	for _, k := range run.settledOrder {
		if len(run.settled[k].damaged()) > 0 {
			n++
		}
	}
	return n
}

// repairSettled re-copies each damaged copy of a settled object from a
// good one (the same bytes: the bad copy, read again and still bad, is
// deleted, then PutIfAbsent), and says which it cannot repair: those with
// no good copy in any bucket. It returns the copies put back and left.
func (run *fsckRun) repairSettled(ctx context.Context, w io.Writer) (copied, left int, err error) {
	set := run.b.sets[chain.Standard]
	for _, key := range run.settledOrder {
		sc := run.settled[key]
		bad := sc.damaged()
		if len(bad) == 0 {
			continue
		}
		if !sc.good() {
			left += len(bad)
			fmt.Fprintf(w, "repair: settled object %s: not repaired: no good copy in any bucket of the standard set to copy from\n", key)
			continue
		}
		src := sc.copies[sc.source]
		_, obj, state, rerr := readSettled(ctx, set[sc.source], key)
		if state != "good" {
			left += len(bad)
			fmt.Fprintf(w, "repair: settled object %s: not repaired: the good copy in %s no longer reads as good (%s %v)\n", key, src.bucket, state, rerr)
			continue
		}
		for _, i := range bad {
			c := sc.copies[i]
			if _, _, state, _ := readSettled(ctx, set[i], key); state != c.state {
				left++
				fmt.Fprintf(w, "repair: settled object %s in bucket %s (was %s): not repaired: it now reads as %s\n", key, c.bucket, c.state, state)
				continue
			}
			if c.state == "corrupt" {
				if err := set[i].Delete(ctx, key); err != nil {
					return copied, left, err
				}
			}
			switch err := set[i].PutIfAbsent(ctx, key, obj); {
			case err == nil:
				copied++
				fmt.Fprintf(w, "repair: settled object %s in bucket %s (was %s): re-copied from %s\n", key, c.bucket, c.state, src.bucket)
			case errors.Is(err, objstore.ErrExists):
				left++
				fmt.Fprintf(w, "repair: settled object %s in bucket %s (was %s): not repaired: another writer put it back first\n", key, c.bucket, c.state)
			default:
				return copied, left, err
			}
		}
	}
	return copied, left, nil
}
