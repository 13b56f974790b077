package chaincore

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/settle"
)

// TestTraces runs the data-driven scripts in testdata: each command steps
// the core (an admit, an I/O result, time passing) and its expected output
// is the trace of what the core then asks for, in order. Rewrite the
// expected output after a deliberate change with
//
//	go test ./loglet/internal/chaincore -run TestTraces -rewrite
//
// Commands (arguments are key=value; durations like 20ms; +d is relative):
//
//	new [k= w= window= flush= flight= commit= straggle= backlog= absorb= early= maxslots= sealcheck= refuse-live]
//	                      (early: Config.AbsorbEarlyPercent, 0 unless given)
//	epoch-read missing | epoch-read failed | epoch-read epoch= [owner=] [sealed=cut] [window=] [cuts=1@4/2@7]
//	first-minted [only]   (the first mint, then (not with only) the checkpoint's creation)
//	first-mint-taken | checkpoint-created | checkpoint-create-failed | checkpoint-exists
//	sealed [cp-epoch= cp-next= tails=key base=key pending=from-to doomed=key,key] | seal-moved
//	seal-raced            (the checkpoint moved under the seal's attempt)
//	admit STREAM [n=records] [match=seq] [at=+d]   (several: one line each in the input)
//	retire STREAM | drained STREAM   (the stream's incarnation was deleted; is it all absorbed?)
//	tick +d
//	rendered e= s= | render-failed e= s=
//	copy e= s= b= ours|ghost|foreign|failed|refused   (or: copies e= s= ours ours failed)
//	                      (refused: failed with objstore.ErrPermanent, a bucket refusing for good)
//	fenced e= cut= [only] | fence-failed e= | fence-refused e= s=   (refused: buckets refuse for good)
//	                      (the buckets' fence; first, if the fence is at them, the trim
//	                      cursor and the epoch record are read as found: nothing settled,
//	                      the record the succession started from; then, unless only,
//	                      read again as found)
//	cursor-read [at=E.N owner= cuts=E@S/E@S] | cursor-read failed   (the fence's trim cursor)
//	                      (the fence's epoch record: epoch-read)
//	fence-cut-lost e= owner= epoch=   (the cursor and the record say owner's epoch settled
//	                                   e away, its cut recorded nowhere)
//	minted | mint-lost owner= epoch= | mint-sealed by= | mint-failed
//	probed
//	tails-read [orphans=key,key damaged=1]   (input: stream=next ...)
//	walked e= next=       (input: one line per slot: SLOT STREAM@FIRST+COUNT ...;
//	                      fence=TOKEN or prod=ID/SEQ after a frame: its footer's mark)
//	tails-read            (input also: STREAM.token=T, STREAM.prod=ID/SEQ/START-END)
//	admit ... [producer=ID/SEQ] [token=T] [fence[=SET]]
//	round-done            (the round's remaining steps succeed: its snapshot's PUT, its
//	                      commit, and every snapshot of its drop deleted)
//	snapshot-put [failed] | round-snapshot-taken   (the snapshot's PUT; taken: the
//	                      snapshot's key holds another object)
//	round-done [sealed] | round-committed [only] | round-failed | round-deposed by= | round-too-large
//	                      (the commit, after the snapshot's PUT if that is out; then,
//	                      unless only, every snapshot of the drop deleted)
//	round-split chunks=E,E,...  (the commit finds the round too large for one
//	                      Commit: the ends of its chunks; after the snapshot's PUT)
//	round-marked [failed] (a split round's MarkRoundPending: the checkpoint held
//	                      records the round as pending)
//	refs-committed [failed] | refs-deposed by=   (the chunk of refs out)
//	snapshots-dropped [none]   (the drop: every snapshot deleted, or none)
//	snapshots             (the last round's snapshot key, the doomed snapshots
//	                      its checkpoint records and those it deletes)
//	settle-passed [at=E.N deleted=E.N doomed-due=+d requests=N]   (new settle=interval turns
//	                         settlement on; requests: the metastore requests the pass made)
//	settle-failed         (a pass that failed before it learnt anything)
//	epoch-sealed | epoch-seal-failed
//	checkpoint-read [owner= epoch=]   (the result of the last seal check asked: the
//	                                   checkpoint sealed by owner for epoch)
//	corrupt-tail stream= next=        (a bug upstream: the absorb's tail no longer matches)
//	close | abort
//	stats
//	absorb-stats          (rounds, early rounds, the backlog, the checkpoint)
//	stall-stats           (the backlog's stall under way and the ended ones' count and time)
func TestTraces(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := &harness{t: t, renders: map[UploadID][]RenderStream{}}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return h.run(d)
		})
	})
}

// harness drives one core in a script.
type harness struct {
	t         *testing.T
	c         *Core
	cfg       Config
	now       time.Time
	t0        time.Time
	streams   map[string]*Stream
	renders   map[UploadID][]RenderStream // the streams of each render asked for
	wake      time.Time
	lastReq   []Request   // every request asked for, in order
	round     CommitRound // the last round commit asked for (an AdvanceRound's too)
	refsTo    int         // the end of the last CommitRefs' chunk
	drop      []string    // the snapshots its round deletes once committed
	dropOut   bool        // a DropSnapshots is out
	snapBytes int         // the encoded size of the last PutSnapshot's snapshot
	// checkEpoch is the epoch the last ReadCheckpoint was asked under.
	checkEpoch uint64
}

var epoch0 = time.Unix(1_000_000, 0)

func (h *harness) run(d *datadriven.TestData) string {
	if d.Cmd != "new" && h.c == nil {
		d.Fatalf(h.t, "new first")
	}
	switch d.Cmd {
	case "new":
		h.newCore(d)
	case "epoch-read":
		if d.HasArg("missing") {
			h.step(EpochRead{Err: fmt.Errorf("chain: read epoch: %w", metastore.ErrNotFound)})
			break
		}
		if d.HasArg("failed") {
			h.step(EpochRead{Err: errors.New("metastore: unavailable")})
			break
		}
		rec := chain.EpochRecord{Epoch: h.u64(d, "epoch", 1), Owner: h.str(d, "owner", "p0"), Window: int(h.u64(d, "window", uint64(h.cfg.Window))),
			K: len(h.cfg.Buckets), W: h.cfg.W, Buckets: h.cfg.Buckets}
		if d.HasArg("sealed") {
			rec.Seal = &chain.Cut{Epoch: rec.Epoch, Slot: h.u64(d, "sealed", 0), Clean: true}
		}
		if d.HasArg("k") {
			rec.K = int(h.u64(d, "k", 0))
		}
		if cuts := h.str(d, "cuts", ""); cuts != "" { // cuts=1@4/2@7
			rec.Cuts = h.cuts(d, cuts)
		}
		ev := EpochRead{Record: rec, Version: metastore.Version(fmt.Sprintf("v%d", rec.Epoch))}
		if h.askedCheckpoint() {
			// The checkpoint read with it: cp-epoch, cp-next, tails, base,
			// doomed, pending as for "sealed" (cp-failed: unreadable).
			if d.HasArg("cp-failed") {
				ev.CheckpointErr = errors.New("metastore: unavailable")
			} else {
				ev.Checkpoint, ev.CheckpointVersion, ev.CheckpointRead = h.checkpointArgs(d), "cp", true
			}
		}
		h.step(ev)
	case "first-minted":
		rec := chain.EpochRecord{Epoch: 1, Owner: h.cfg.Owner, Window: h.cfg.Window, K: len(h.cfg.Buckets), W: h.cfg.W, Buckets: h.cfg.Buckets}
		h.step(FirstMinted{Record: rec, Version: "v1"})
		if d.HasArg("only") {
			break
		}
		out := h.ready()
		h.step(CheckpointCreated{Held: h.heldAt(1, 0, 1)})
		return join(out, h.ready())
	case "checkpoint-created":
		h.step(CheckpointCreated{Held: h.heldAt(1, 0, 1)})
	case "checkpoint-create-failed":
		h.step(CheckpointCreated{Err: errors.New("metastore: unavailable")})
	case "checkpoint-exists":
		h.step(CheckpointCreated{Err: fmt.Errorf("absorb: create checkpoint: %w, sealed by \"p2\" at epoch 2", absorb.ErrCheckpointExists)})
	case "first-mint-taken":
		h.step(FirstMinted{Err: fmt.Errorf("chain: mint first epoch: %w", chain.ErrEpochTaken)})
	case "seal-minted":
		req, ok := h.lastOf(func(r Request) bool { _, ok := r.(SealMint); return ok }).(SealMint)
		if !ok {
			d.Fatalf(h.t, "no seal-mint asked for")
		}
		next := req.Next
		next.Epoch = req.Prev.Epoch + 1
		held := absorb.Held{Checkpoint: req.Checkpoint, Version: "cp2"}
		held.Checkpoint.Owner, held.Checkpoint.OwnerEpoch = h.cfg.Owner, next.Epoch
		h.step(SealMinted{Record: next, Version: metastore.Version(fmt.Sprintf("v%d", next.Epoch)), Held: held})
	case "seal-mint-moved":
		h.step(SealMinted{Err: fmt.Errorf("absorb: seal and mint: %w: %w", absorb.ErrEpochMoved, metastore.ErrConflict)})
	case "seal-mint-raced":
		h.step(SealMinted{Err: fmt.Errorf("absorb: seal and mint: %w: %w", absorb.ErrSealRaced, metastore.ErrConflict)})
	case "seal-mint-failed":
		h.step(SealMinted{Err: errors.New("metastore: unavailable")})
	case "sealed":
		cp := h.checkpointArgs(d)
		held := h.heldAt(cp.Epoch, cp.Next, h.c.succ.prev.Epoch+1)
		held.Checkpoint.Tails, held.Checkpoint.TailsBase, held.Checkpoint.Doomed, held.Checkpoint.Pending = cp.Tails, cp.TailsBase, cp.Doomed, cp.Pending
		h.step(Sealed{Held: held, Checkpoint: cp})
	case "seal-moved":
		h.step(Sealed{Err: absorb.ErrEpochMoved})
	case "seal-raced":
		h.step(Sealed{Err: fmt.Errorf("absorb: seal: %w: %w", absorb.ErrSealRaced, metastore.ErrConflict)})
	case "admit":
		out := h.admit(d, d.CmdArgs)
		for _, line := range lines(d.Input) {
			args, err := parseArgs(line)
			if err != nil {
				d.Fatalf(h.t, "%v", err)
			}
			out += h.admit(d, args)
		}
		return join(out, h.ready())
	case "retire", "drained":
		name := d.CmdArgs[0].Key
		st := h.streams[name]
		if d.Cmd == "retire" {
			st = h.c.Retire(name)
			h.streams[name] = st
		}
		return fmt.Sprintf("%s drained=%v\n", name, st.Drained()) + h.ready()
	case "tick":
		h.advance(d)
		h.step(Tick{})
	case "rendered":
		id := h.upload(d)
		h.step(Rendered{Upload: id, Obj: make([]byte, 100), Frames: h.frames(id)})
	case "render-failed":
		h.step(Rendered{Upload: h.upload(d), Err: errors.New("frame over the format's limits")})
	case "copy", "copies":
		id := h.upload(d)
		var statuses []string
		b := -1
		if d.Cmd == "copy" {
			b = int(h.u64(d, "b", 0))
		}
		for _, a := range d.CmdArgs {
			switch a.Key {
			case "ours", "ghost", "foreign", "failed", "refused":
				statuses = append(statuses, a.Key)
			}
		}
		for i, st := range statuses {
			bucket := b
			if bucket < 0 {
				bucket = i
			}
			h.step(CopyDone{Upload: id, Result: copyResult(bucket, st)})
		}
	case "fenced":
		out := h.fenceReads()
		h.step(Fenced{Epoch: h.u64(d, "e", 1), Result: chain.FenceResult{Cut: h.u64(d, "cut", 0)}})
		if out = join(out, h.ready()); d.HasArg("only") {
			return out
		}
		return join(out, h.fenceReads())
	case "fence-refused":
		out := h.fenceReads()
		h.step(Fenced{Epoch: h.u64(d, "e", 1), Err: &chain.UndecidedError{Epoch: h.u64(d, "e", 1), Slot: h.u64(d, "s", 0), K: len(h.cfg.Buckets), W: h.cfg.W,
			Err: fmt.Errorf("buckets refuse for good: %w (NoSuchBucket)", objstore.ErrPermanent)}})
		return join(out, h.ready())
	case "fence-cut-lost":
		owner, epoch := h.str(d, "owner", "p2"), h.u64(d, "epoch", 3)
		h.step(TrimCursorRead{Cursor: chain.TrimCursor{At: chain.Position{Epoch: epoch}, Deleted: chain.Position{Epoch: epoch}, Owner: owner}})
		out := h.ready()
		h.step(EpochRead{Record: chain.EpochRecord{Epoch: epoch, Owner: owner}, Version: metastore.Version(fmt.Sprintf("v%d", epoch))})
		return join(out, h.ready())
	case "fence-failed":
		out := h.fenceReads()
		h.step(Fenced{Epoch: h.u64(d, "e", 1), Err: errors.New("slot 3: 2 buckets unreachable")})
		return join(out, h.ready())
	case "cursor-read":
		if d.HasArg("failed") {
			h.step(TrimCursorRead{Err: errors.New("metastore: unavailable")})
			break
		}
		t := chain.TrimCursor{At: h.pos(d, "at"), Owner: h.str(d, "owner", "")}
		t.Deleted = t.At
		if cuts := h.str(d, "cuts", ""); cuts != "" {
			t.Cuts = h.cuts(d, cuts)
		}
		h.step(TrimCursorRead{Cursor: t})
	case "minted":
		next := h.c.nextRecord(h.c.succ)
		next.Epoch = h.c.succ.prev.Epoch + 1
		held := h.c.held
		held.Checkpoint.OwnerEpoch = next.Epoch
		h.step(Minted{Record: next, Version: metastore.Version(fmt.Sprintf("v%d", next.Epoch)), Held: held})
	case "mint-lost":
		rec := chain.EpochRecord{Epoch: h.u64(d, "epoch", 2), Owner: h.str(d, "owner", "p2")}
		h.step(Minted{Record: rec, Err: fmt.Errorf("%w: test", chain.ErrMintLost)})
	case "mint-sealed":
		by := h.str(d, "by", "p2")
		h.step(Minted{SealedBy: by, Err: &absorb.SealedError{Owner: by, OwnerEpoch: 2}})
	case "mint-failed":
		h.step(Minted{Err: errors.New("metastore: unavailable")})
	case "probed":
		h.step(Probed{Epoch: h.u64(d, "e", 1)})
	case "tails-read":
		t := absorb.Tails{Streams: map[string]absorb.StreamTail{}}
		for _, f := range strings.Fields(d.Input) {
			name, v, _ := strings.Cut(f, "=")
			if name, attr, ok := strings.Cut(name, "."); ok {
				st := t.Streams[name]
				switch attr {
				case "token":
					st.FencingToken = v
				case "prod": // ID/SEQ/START-END
					st.Producers = append(st.Producers, h.producerTail(d, v))
				default:
					d.Fatalf(h.t, "tails-read: unknown %q", attr)
				}
				t.Streams[name] = st
				continue
			}
			n, _ := strconv.ParseUint(v, 10, 64)
			st := t.Streams[name]
			st.Next = n
			t.Streams[name] = st
		}
		// base= names the full snapshot a delta read builds on, with
		// base-streams= streams; changed= the delta's streams.
		t.Base = h.str(d, "base", "")
		ev := TailsRead{Streams: TailsViewOf(t.Streams), Base: t.Base, BaseStreams: int(h.u64(d, "base-streams", 0))}
		if ch := h.str(d, "changed", ""); ch != "" {
			ev.Changed = strings.Split(ch, ",")
		}
		if o := h.str(d, "orphans", ""); o != "" {
			ev.Orphans = strings.Split(o, ",")
		}
		if h.str(d, "damaged", "") != "" {
			ev.Err = fmt.Errorf("absorb: tails snapshot: %w", absorb.ErrCorrupt)
		}
		h.step(ev)
	case "walked":
		e := h.u64(d, "e", 1)
		ev := Walked{Epoch: e, Next: h.u64(d, "next", 0)}
		for _, line := range lines(d.Input) {
			f := strings.Fields(line)
			slot, _ := strconv.ParseUint(f[0], 10, 64)
			s := absorb.Slot{Epoch: e, Slot: slot, Key: chain.SlotKey(h.cfg.Star, h.cfg.Class, e, slot)}
			for _, fr := range f[1:] {
				// fence=TOKEN and prod=ID/SEQ mark the frame before them
				// (a fence batch at its first record, a producer's batch
				// of all its records), as the flight's footer does.
				if k, v, ok := strings.Cut(fr, "="); ok && len(s.Frames) > 0 {
					last := s.Frames[len(s.Frames)-1]
					switch k {
					case "fence":
						s.Fences = append(s.Fences, envelope.FenceMark{Stream: last.Stream, Seq: last.FirstSeq, Token: v})
					case "prod":
						id, seq, _ := strings.Cut(v, "/")
						n, _ := strconv.ParseUint(seq, 10, 64)
						s.Producers = append(s.Producers, envelope.ProducerMark{Stream: last.Stream, FirstSeq: last.FirstSeq, Count: last.Count, ID: id, Seq: n})
					default:
						d.Fatalf(h.t, "walked: unknown mark %q", k)
					}
					continue
				}
				name, rest, _ := strings.Cut(fr, "@")
				a, b, _ := strings.Cut(rest, "+")
				first, _ := strconv.ParseUint(a, 10, 64)
				n, _ := strconv.ParseUint(b, 10, 32)
				s.Frames = append(s.Frames, envelope.FrameInfo{Stream: name, FirstSeq: first, Count: uint32(n), Offset: 60, Length: 10, RawLength: 10})
			}
			ev.Slots = append(ev.Slots, s)
		}
		h.step(ev)
	case "settle-passed":
		res := settle.Result{Trim: chain.TrimCursor{At: h.pos(d, "at"), Deleted: h.pos(d, "deleted")}}
		if due := h.str(d, "doomed-due", ""); due != "" {
			dur, err := time.ParseDuration(strings.TrimPrefix(due, "+"))
			if err != nil {
				d.Fatalf(h.t, "doomed-due: %v", err)
			}
			res.DoomedWaiting, res.DoomedDue = 1, h.now.Add(dur)
		}
		res.MetaRequests = int(h.u64(d, "requests", 0))
		res.Retries, res.RefScans = int(h.u64(d, "retries", 0)), int(h.u64(d, "scans", 0))
		for i := range int(h.u64(d, "settled", 0)) {
			k := settle.KnownRef{Key: fmt.Sprintf("refs/s%d", i)}
			k.Ref.Stream = fmt.Sprintf("s%d", i)
			res.Settled = append(res.Settled, k)
		}
		h.step(SettlePassed{Result: res})
	case "settle-failed":
		// A pass that failed before it got anywhere: an empty Result.
		h.step(SettlePassed{Err: errors.New("metastore: unavailable")})
	case "settle-stats":
		s := h.c.Stats(h.now).Settle
		return fmt.Sprintf("passes=%d failures=%d retries=%d requests=%d scans=%d settled-refs=%d\n",
			s.Passes, s.Failures, s.Retries, s.MetaRequests, s.RefScans, s.SettledRefs)
	case "round-done":
		// sealed: the round's Commit recorded the seal it carried (else
		// it is reported unrecorded, as when a re-read resolved it).
		out := h.snapshotPut()
		ev := h.committed(nil)
		if d.HasArg("sealed") {
			ev.Sealed = "sealed"
		}
		h.step(ev)
		return join(out, h.dropped(true))
	case "snapshot-put":
		if d.HasArg("failed") {
			h.step(SnapshotPut{Round: h.c.ab.planned.round, Err: errors.New("absorb: tails snapshot: 1 of 2 copies: bucket down")})
			break
		}
		h.step(SnapshotPut{Round: h.c.ab.planned.round, Bytes: h.snapBytes})
	case "round-snapshot-taken":
		h.step(SnapshotPut{Round: h.c.ab.planned.round, Err: fmt.Errorf("absorb: tails snapshot %s: 0 of 1 copies: %w", h.c.ab.planned.snapKey, absorb.ErrSnapshotTaken)})
	case "round-committed":
		out := h.snapshotPut()
		h.step(h.committed(nil))
		if d.HasArg("only") {
			return join(out, h.ready())
		}
		return join(out, h.dropped(true))
	case "round-failed":
		out := h.snapshotPut()
		h.step(h.committed(errors.New("metastore: unavailable")))
		return join(out, h.ready())
	case "round-split":
		out := h.snapshotPut()
		var ends []int
		for _, v := range strings.Split(h.str(d, "chunks", ""), ",") {
			n, err := strconv.Atoi(v)
			if err != nil {
				d.Fatalf(h.t, "chunks: %v", err)
			}
			ends = append(ends, n)
		}
		h.step(RoundCommitted{Round: h.c.ab.planned.round, Held: h.c.held, Split: ends})
		return join(out, h.ready())
	case "round-marked":
		r := h.c.ab.planned.round
		if d.HasArg("failed") {
			h.step(RoundMarked{Round: r, Held: h.c.held, Err: errors.New("metastore: unavailable")})
			break
		}
		held := h.c.held
		held.Checkpoint.Pending = &r
		h.step(RoundMarked{Round: r, Held: held})
	case "refs-committed":
		var err error
		if d.HasArg("failed") {
			err = errors.New("metastore: unavailable")
		}
		h.step(RefsCommitted{Round: h.c.ab.planned.round, To: h.refsTo, Held: h.c.held, Err: err})
	case "refs-deposed":
		h.step(RefsCommitted{Round: h.c.ab.planned.round, To: h.refsTo, Err: &absorb.SealedError{Owner: h.str(d, "by", "p2"), OwnerEpoch: 2}})
	case "round-too-large":
		out := h.snapshotPut()
		h.step(h.committed(fmt.Errorf("absorb: ref too large: %w", metastore.ErrTooLarge)))
		return join(out, h.ready())
	case "round-deposed":
		out := h.snapshotPut()
		h.step(h.committed(&absorb.SealedError{Owner: h.str(d, "by", "p2"), OwnerEpoch: 2}))
		return join(out, h.ready())
	case "snapshots-dropped":
		return h.dropped(!d.HasArg("none"))
	case "checkpoint-read":
		// The result of the check out, tagged with the epoch it was asked
		// under, as the worker echoes it.
		h.step(CheckpointRead{Epoch: h.checkEpoch, Checkpoint: absorb.Checkpoint{Owner: h.str(d, "owner", "p1"), OwnerEpoch: h.u64(d, "epoch", h.c.rec.Epoch)}})
	case "corrupt-tail":
		// A test-only disturbance: the absorb's view of a stream's tail no
		// longer matches what the stream releases (a bug upstream).
		h.c.ab.tails.set(h.str(d, "stream", "a"), absorb.StreamTail{Next: h.u64(d, "next", 99)})
	case "epoch-sealed":
		h.step(EpochSealed{Version: "vs", Held: h.c.held})
	case "epoch-seal-failed":
		h.step(EpochSealed{Err: errors.New("metastore: unavailable")})
	case "close":
		h.c.Close(h.now)
	case "abort":
		h.c.Abort(h.now, errors.New("close: context deadline exceeded"))
	case "snapshots":
		// The planned round's snapshot key; what its checkpoint records as
		// doomed and what it deletes are decided at its commit.
		if p := h.c.ab.planned; p != nil && (h.round.Round != p.round || h.round.SnapshotKey != p.snapKey) {
			return fmt.Sprintf("key=%s\ndoomed: decided at the commit\n", p.snapKey)
		}
		return fmt.Sprintf("key=%s\ndoomed=%v\ndrop=%v\n", h.round.SnapshotKey, h.round.Doomed, h.drop)
	case "under-replicated":
		// The list a repair works from (Stats().UnderReplSlots) and the count.
		s := h.c.Stats(h.now)
		return fmt.Sprintf("slots=%v count=%d\n", s.UnderReplSlots, s.UnderReplicated)
	case "absorb-stats":
		s := h.c.Stats(h.now)
		return fmt.Sprintf("rounds=%d early=%d backlog=%d/%d checkpoint=%d/%d\n", s.AbsorbRounds, s.AbsorbEarlyRounds, s.Backlog.Flights, s.Backlog.MaxFlights, s.CheckpointEpoch, s.Checkpoint)
	case "stall-stats":
		s := h.c.Stats(h.now).Backlog
		return fmt.Sprintf("stalling=%v for=%v stalls=%v stalled=%v\n", s.Stalling, s.StallingFor, stallCounts(s.Stalls), time.Duration(s.StalledNanos))
	case "stats":
		s := h.c.Stats(h.now)
		return fmt.Sprintf("phase=%s epoch=%d window=%d/%d released=%d queued=%d flights=%d acked=%d unknown=%d not-committed=%d halts=%d backlog=%d/%d stalling=%v(%s) stalls=%v index=%dB rounds=%d checkpoint=%d/%d under-replicated=%d\n",
			s.Phase, s.Epoch, s.WindowInFlight, s.WindowSize, s.ReleasePoint, s.Pool.QueuedBatches, s.Flights, s.AckedBatches, s.FailedOutcomeUnknown, s.FailedNotCommitted, s.Halts,
			s.Backlog.Flights, s.Backlog.MaxFlights, s.Backlog.Stalling, s.Backlog.StallingCause, stallCounts(s.Backlog.Stalls), s.FlightIndexBytes, s.AbsorbRounds, s.CheckpointEpoch, s.Checkpoint, s.UnderReplicated)
	default:
		d.Fatalf(h.t, "unknown command %q", d.Cmd)
	}
	return h.ready()
}

func (h *harness) newCore(d *datadriven.TestData) {
	k := int(h.u64(d, "k", 3))
	names := make([]string, k)
	for i := range names {
		names[i] = fmt.Sprintf("b%d", i)
	}
	h.cfg = Config{Star: "s", Class: chain.Express, Owner: "p1", Buckets: names, W: int(h.u64(d, "w", uint64(k/2+1))),
		Window: int(h.u64(d, "window", 4)), FlushDeadline: h.dur(d, "flush", 20*time.Millisecond), FlightBytes: int64(h.u64(d, "flight", 4096)),
		MaxBatchBytes: 16, CommitDeadline: h.dur(d, "commit", time.Second), StragglerTimeout: h.dur(d, "straggle", 5*time.Second),
		BacklogFlights: int(h.u64(d, "backlog", 16)), BacklogBytes: int64(h.u64(d, "backlog-bytes", 1<<20)),
		AbsorbInterval: h.dur(d, "absorb", 100*time.Millisecond), AbsorbMaxSlots: int(h.u64(d, "maxslots", 8)),
		AbsorbEarlyPercent: int(h.u64(d, "early", 0)),
		RefuseLiveOwner:    d.HasArg("refuse-live"), SealCheckInterval: h.dur(d, "sealcheck", 0),
		SettleInterval: h.dur(d, "settle", 0)}
	if d.HasArg("found-epoch") {
		// The host's read handed over (Config.Found): found-epoch,
		// found-owner, found-sealed, and the checkpoint's arguments.
		rec := chain.EpochRecord{Epoch: h.u64(d, "found-epoch", 1), Owner: h.str(d, "found-owner", "p0"), Window: h.cfg.Window, K: k, W: h.cfg.W, Buckets: names}
		if d.HasArg("found-sealed") {
			rec.Seal = &chain.Cut{Epoch: rec.Epoch, Slot: h.u64(d, "found-sealed", 0), Clean: true}
		}
		h.cfg.Found = &EpochRead{Record: rec, Version: metastore.Version(fmt.Sprintf("v%d", rec.Epoch)),
			CheckpointRead: true, Checkpoint: h.checkpointArgs(d), CheckpointVersion: "cp"}
	}
	h.now, h.t0 = epoch0, epoch0
	h.streams = map[string]*Stream{}
	h.renders = map[UploadID][]RenderStream{}
	h.wake = time.Time{}
	h.c = New(h.cfg, h.now)
}

// checkpointArgs is the checkpoint a trace line describes: cp-epoch,
// cp-next, tails, base, doomed (a,b), pending (from-to).
func (h *harness) checkpointArgs(d *datadriven.TestData) absorb.Checkpoint {
	cp := absorb.Checkpoint{Epoch: h.u64(d, "cp-epoch", 1), Next: h.u64(d, "cp-next", 0), Tails: h.str(d, "tails", ""), TailsBase: h.str(d, "base", "")}
	if doomed := h.str(d, "doomed", ""); doomed != "" {
		cp.Doomed = strings.Split(doomed, ",")
	}
	if p := h.str(d, "pending", ""); p != "" {
		a, b, _ := strings.Cut(p, "-")
		from, _ := strconv.ParseUint(a, 10, 64)
		to, _ := strconv.ParseUint(b, 10, 64)
		cp.Pending = &absorb.Round{Epoch: cp.Epoch, From: from, To: to}
	}
	return cp
}

// askedCheckpoint reports whether the last ReadEpoch the core asked for
// asked for the checkpoint too.
func (h *harness) askedCheckpoint() bool {
	r, ok := h.lastOf(func(r Request) bool { _, ok := r.(ReadEpoch); return ok }).(ReadEpoch)
	return ok && r.Checkpoint
}

// lastOf returns the latest request asked for that match says, or nil.
func (h *harness) lastOf(match func(Request) bool) Request {
	for i := len(h.lastReq) - 1; i >= 0; i-- {
		if match(h.lastReq[i]) {
			return h.lastReq[i]
		}
	}
	return nil
}

// heldAt is a checkpoint at (epoch, next) carrying this owner's seal for
// sealEpoch, as a worker returns it.
func (h *harness) heldAt(epoch, next, sealEpoch uint64) absorb.Held {
	return absorb.Held{Checkpoint: absorb.Checkpoint{Epoch: epoch, Next: next, Owner: h.cfg.Owner, OwnerEpoch: sealEpoch}, Version: "cp"}
}

// fenceReads answers the fence's reads of the trim cursor and the epoch
// record, if the fence is at them, as found: nothing settled (the cursor at
// the chain's start), the record the succession started from. It returns
// what the core asked for after each.
func (h *harness) fenceReads() string {
	var out string
	for s := h.c.succ; s != nil && h.c.succ == s && s.step == stepFence && s.fstage != fenceSlots; {
		switch s.fstage {
		case fenceReadCursor, fenceRereadCursor:
			h.step(TrimCursorRead{Cursor: chain.TrimCursor{At: chain.Start(), Deleted: chain.Start()}})
		default:
			h.step(EpochRead{Record: s.prev, Version: s.prevVer})
		}
		out = join(out, h.ready())
	}
	return out
}

// snapshotPut answers the planned round's snapshot PUT, if it is out, as
// written, and returns what the core asked for then.
func (h *harness) snapshotPut() string {
	if p := h.c.ab.planned; p == nil || p.written || !h.c.ab.busy {
		return ""
	}
	h.step(SnapshotPut{Round: h.c.ab.planned.round, Bytes: h.snapBytes})
	return h.ready()
}

// committed is the result of the round commit out: err, or the checkpoint
// held advanced to the round's end, naming its snapshot.
func (h *harness) committed(err error) RoundCommitted {
	r := h.c.ab.planned.round
	held := h.c.held
	if err == nil {
		held.Checkpoint.Epoch, held.Checkpoint.Next, held.Checkpoint.Tails, held.Checkpoint.Pending = r.Epoch, r.To, h.round.SnapshotKey, nil
	}
	return RoundCommitted{Round: r, Held: held, Err: err}
}

// dropped answers the drop out, if there is one (every snapshot deleted,
// or none), and returns what the core asked for before and after.
func (h *harness) dropped(all bool) string {
	out := h.ready()
	if !h.dropOut {
		return out
	}
	var ev SnapshotsDropped
	if all {
		ev.Dropped = h.drop
	}
	h.dropOut = false
	h.step(ev)
	return join(out, h.ready())
}

// producerTail parses ID/SEQ/START-END, a batch remembered at the script's
// start.
func (h *harness) producerTail(d *datadriven.TestData, v string) absorb.ProducerTail {
	f := strings.Split(v, "/")
	if len(f) != 3 {
		d.Fatalf(h.t, "prod: %q is not ID/SEQ/START-END", v)
	}
	a, b, _ := strings.Cut(f[2], "-")
	seq, err1 := strconv.ParseUint(f[1], 10, 64)
	start, err2 := strconv.ParseUint(a, 10, 64)
	end, err3 := strconv.ParseUint(b, 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		d.Fatalf(h.t, "prod: %q is not ID/SEQ/START-END", v)
	}
	return absorb.ProducerTail{ID: f[0], Seq: seq, Start: start, End: end, At: h.now.UnixMilli()}
}

// cuts parses E@S/E@S.
func (h *harness) cuts(d *datadriven.TestData, v string) []chain.Cut {
	var out []chain.Cut
	for _, c := range strings.Split(v, "/") {
		e, slot, _ := strings.Cut(c, "@")
		ev, err1 := strconv.ParseUint(e, 10, 64)
		sv, err2 := strconv.ParseUint(slot, 10, 64)
		if err1 != nil || err2 != nil {
			d.Fatalf(h.t, "cuts: %q is not epoch@slot", c)
		}
		out = append(out, chain.Cut{Epoch: ev, Slot: sv})
	}
	return out
}

func (h *harness) step(ev Event) { h.c.Step(h.now, ev) }

func (h *harness) advance(d *datadriven.TestData) {
	for _, a := range d.CmdArgs {
		if strings.HasPrefix(a.Key, "+") {
			dur, err := time.ParseDuration(a.Key[1:])
			if err != nil {
				d.Fatalf(h.t, "%v", err)
			}
			h.now = h.now.Add(dur)
		}
	}
}

func (h *harness) admit(d *datadriven.TestData, args []datadriven.CmdArg) string {
	name := args[0].Key
	n := 1
	var match *uint64
	var prod ProducerID
	var fencing Fencing
	for _, a := range args[1:] {
		switch a.Key {
		case "n":
			n, _ = strconv.Atoi(a.Vals[0])
		case "match":
			m, _ := strconv.ParseUint(a.Vals[0], 10, 64)
			match = &m
		case "at":
			dur, _ := time.ParseDuration(strings.TrimPrefix(a.Vals[0], "+"))
			h.now = h.now.Add(dur)
		case "producer": // producer=ID/SEQ
			id, seq, _ := strings.Cut(a.Vals[0], "/")
			s, err := strconv.ParseUint(seq, 10, 64)
			if err != nil {
				d.Fatalf(h.t, "producer: %q is not ID/SEQ", a.Vals[0])
			}
			prod = ProducerID{ID: id, Seq: s}
		case "token":
			fencing.Token = a.Vals[0]
		case "fence": // fence=SET, or fence alone: clear the token
			fencing.Fence = true
			if len(a.Vals) > 0 {
				fencing.Set = a.Vals[0]
			}
		}
	}
	st := h.streams[name]
	if st == nil {
		st = h.c.Stream(name)
		h.streams[name] = st
	}
	var payload []byte
	for i := 0; i < n; i++ {
		payload = envelope.AppendRecord(payload, envelope.Record{Timestamp: 1, Body: []byte("x")})
	}
	b := &Batch{Stream: st, Count: n, Payload: payload, Charge: int64(len(payload)), Submitted: h.now, MinTS: 1, MaxTS: 1,
		Producer: prod, Fencing: fencing}
	if err := h.c.Admit(h.now, b, nil, match, true); err != nil {
		return fmt.Sprintf("admit %s: %v\n", name, err)
	}
	return fmt.Sprintf("admitted %s[%d,%d)\n", name, b.Start, b.End())
}

func (h *harness) upload(d *datadriven.TestData) UploadID {
	return UploadID{Epoch: h.u64(d, "e", 1), Slot: h.u64(d, "s", 0)}
}

// frames is what rendering id's batches gives: one frame per stream, in
// first-arrival order.
func (h *harness) frames(id UploadID) []envelope.FrameInfo {
	var out []envelope.FrameInfo
	for i, st := range h.renders[id] {
		f := envelope.FrameInfo{Stream: st.Name, FirstSeq: st.Parts[0].Start, Offset: 60 + uint64(i)*10, Length: 10, RawLength: 10}
		for _, p := range st.Parts {
			f.Count += uint32(p.Count)
		}
		out = append(out, f)
	}
	return out
}

func copyResult(bucket int, st string) chain.CopyResult {
	switch st {
	case "ours":
		return chain.CopyResult{Bucket: bucket, Status: chain.CopyOurs}
	case "ghost":
		return chain.CopyResult{Bucket: bucket, Status: chain.CopyOurs, Ghost: true}
	case "foreign":
		return chain.CopyResult{Bucket: bucket, Status: chain.CopyForeign, Err: errors.New("poison of p2")}
	case "refused":
		return chain.CopyResult{Bucket: bucket, Status: chain.CopyFailed, Attempts: 1,
			Err: fmt.Errorf("s3: put: %w (NoSuchBucket)", objstore.ErrPermanent)}
	}
	return chain.CopyResult{Bucket: bucket, Status: chain.CopyFailed, Err: errors.New("bucket down")}
}

// ready takes the core's Ready, advances it, and prints it.
func (h *harness) ready() string {
	rd := h.c.Ready()
	h.c.Advance(rd)
	var b strings.Builder
	for _, id := range rd.Cancels {
		fmt.Fprintf(&b, "cancel e=%d s=%d\n", id.Epoch, id.Slot)
	}
	h.lastReq = append(h.lastReq, rd.Requests...)
	for _, r := range rd.Requests {
		b.WriteString(h.request(r))
		b.WriteString("\n")
	}
	for _, o := range rd.Outcomes {
		if o.Fate.Kind == Acked {
			fmt.Fprintf(&b, "ack %s[%d,%d)\n", o.Stream.name, o.Start, o.End())
			continue
		}
		cause := fmt.Sprint(o.Fate.Cause)
		if d := o.Fate.Deposed; d != nil {
			cause = fmt.Sprintf("deposed (leader %q epoch %d): %s", d.Leader, d.Epoch, cause)
		}
		fmt.Fprintf(&b, "%s %s[%d,%d): %s\n", o.Fate.Kind, o.Stream.name, o.Start, o.End(), cause)
	}
	for _, lg := range rd.Logs {
		if lg.Level < slog.LevelInfo || lg.Msg == "garbage probe" {
			continue
		}
		fmt.Fprintf(&b, "log %s %q", strings.ToLower(lg.Level.String()), lg.Msg)
		for _, a := range lg.Attrs {
			if a.Key == "err" || a.Key == "backoff" {
				continue
			}
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		}
		b.WriteString("\n")
	}
	if rd.PoolFreed > 0 {
		fmt.Fprintf(&b, "pool freed %dB\n", rd.PoolFreed)
	}
	if o := rd.Opened; o != nil {
		if o.Err != nil {
			fmt.Fprintf(&b, "open failed: %v\n", o.Err)
		} else {
			fmt.Fprintf(&b, "opened epoch=%d takeover=%v cut=%d clean=%v walked=%d\n", o.Epoch, o.TakeOver, o.FencedCut, o.Clean, o.Walked)
		}
	}
	if rd.Dead != nil {
		fmt.Fprintf(&b, "dead: %s\n", rd.Dead.Kind)
	}
	if rd.Stopped {
		b.WriteString("stopped\n")
		if err := h.c.CloseError(); err != nil {
			for _, l := range strings.Split(err.Error(), "\n") {
				fmt.Fprintf(&b, "close error: %s\n", l)
			}
		}
	}
	if !rd.WakeAt.Equal(h.wake) {
		h.wake = rd.WakeAt
		if rd.WakeAt.IsZero() {
			b.WriteString("wake none\n")
		} else {
			fmt.Fprintf(&b, "wake +%v\n", rd.WakeAt.Sub(h.now))
		}
	}
	if b.Len() == 0 {
		return "(nothing)\n"
	}
	return b.String()
}

func (h *harness) request(r Request) string {
	switch r := r.(type) {
	case Render:
		h.renders[r.Upload] = r.Streams
		var parts []string
		for _, st := range r.Streams {
			for _, p := range st.Parts {
				parts = append(parts, fmt.Sprintf("%s[%d,%d)", st.Name, p.Start, p.Start+uint64(p.Count)))
			}
		}
		return fmt.Sprintf("render e=%d s=%d %s", r.Upload.Epoch, r.Upload.Slot, strings.Join(parts, " "))
	case PutCopy:
		return fmt.Sprintf("put e=%d s=%d b=%d", r.Upload.Epoch, r.Upload.Slot, r.Bucket)
	case ReadEpoch:
		if r.Checkpoint {
			return "read-epoch and-checkpoint"
		}
		return "read-epoch"
	case ReadTrimCursor:
		return "read-trim-cursor"
	case MintFirst:
		return fmt.Sprintf("mint-first owner=%s", r.Record.Owner)
	case CreateCheckpoint:
		return fmt.Sprintf("create-checkpoint e=%d", r.Epoch)
	case Seal:
		return fmt.Sprintf("seal for=%d at=%s", r.Epoch+1, r.EpochVersion)
	case SealMint:
		var cuts []string
		for _, k := range r.Next.Cuts {
			cuts = append(cuts, fmt.Sprintf("%d@%d", k.Epoch, k.Slot))
		}
		return fmt.Sprintf("seal-mint e=%d from=%s cp=%d/%d at=%s cuts=[%s]", r.Prev.Epoch+1, r.PrevVersion, r.Checkpoint.Epoch, r.Checkpoint.Next, r.CheckpointVersion, strings.Join(cuts, " "))
	case Fence:
		return fmt.Sprintf("fence e=%d from=%d window=%d", r.Epoch, r.From, r.Window)
	case Settle:
		return fmt.Sprintf("settle upto=%d.%d checkpoint=%d.%d", r.Upto.Epoch, r.Upto.Next, r.Checkpoint.Epoch, r.Checkpoint.Next)
	case Mint:
		var cuts []string
		for _, k := range r.Next.Cuts {
			cuts = append(cuts, fmt.Sprintf("%d@%d", k.Epoch, k.Slot))
		}
		return fmt.Sprintf("mint e=%d from=%s cuts=[%s]", r.Prev.Epoch+1, r.PrevVersion, strings.Join(cuts, " "))
	case Probe:
		return fmt.Sprintf("probe e=%d cut=%d window=%d", r.Epoch, r.Cut, r.Window)
	case ReadTails:
		out := "read-tails"
		if r.Key != "" {
			out += " " + r.Key
		}
		if r.Rebuild {
			out += " rebuild"
		}
		return out
	case ReadCheckpoint:
		h.checkEpoch = r.Epoch
		return "read-checkpoint"
	case Walk:
		return fmt.Sprintf("walk e=%d [%d,%d) max=%d", r.Epoch, r.From, r.To, r.Max)
	case PutSnapshot:
		body, err := r.Encode() // the executor's encoding
		if err != nil {
			h.t.Fatalf("encode the snapshot: %v", err)
		}
		h.snapBytes = len(body)
		snap := fmt.Sprintf("full(%d)", r.Streams.Len())
		if r.Base != "" {
			snap = fmt.Sprintf("delta(%d)", r.Streams.Len())
		}
		return fmt.Sprintf("put-snapshot e=%d [%d,%d) snap=%s", r.Round.Epoch, r.Round.From, r.Round.To, snap)
	case CommitRound:
		h.round = r
		h.drop = h.c.ab.planned.drop
		var refs []string
		for _, ref := range r.Refs {
			refs = append(refs, fmt.Sprintf("%s[%d,%d)", ref.Stream, ref.Start, ref.End))
		}
		out := fmt.Sprintf("commit-round e=%d [%d,%d) refs=%s at=%d.%d", r.Round.Epoch, r.Round.From, r.Round.To, strings.Join(refs, " "), r.Held.Checkpoint.Epoch, r.Held.Checkpoint.Next)
		if r.Seal.Record.Epoch != 0 {
			out += fmt.Sprintf(" +seal e=%d cut=%d", r.Seal.Record.Epoch, r.Seal.Cut)
		}
		return out
	case MarkRoundPending:
		return fmt.Sprintf("mark-round-pending e=%d [%d,%d) at=%d.%d", r.Round.Epoch, r.Round.From, r.Round.To, r.Held.Checkpoint.Epoch, r.Held.Checkpoint.Next)
	case CommitRefs:
		h.refsTo = r.To
		var refs []string
		for _, ref := range r.Refs {
			refs = append(refs, fmt.Sprintf("%s[%d,%d)", ref.Stream, ref.Start, ref.End))
		}
		out := fmt.Sprintf("commit-refs e=%d [%d,%d) refs=%s to=%d", r.Round.Epoch, r.Round.From, r.Round.To, strings.Join(refs, " "), r.To)
		if r.MayExist {
			out += " may-exist"
		}
		return out
	case AdvanceRound:
		h.round = CommitRound{Held: r.Held, Round: r.Round, SnapshotKey: r.SnapshotKey, SnapshotBase: r.SnapshotBase, Doomed: r.Doomed}
		h.drop = h.c.ab.planned.drop
		return fmt.Sprintf("advance-round e=%d [%d,%d) at=%d.%d", r.Round.Epoch, r.Round.From, r.Round.To, r.Held.Checkpoint.Epoch, r.Held.Checkpoint.Next)
	case DropSnapshots:
		h.dropOut = true
		return fmt.Sprintf("drop-snapshots %v", r.Keys)
	case SealEpoch:
		return fmt.Sprintf("seal-epoch e=%d cut=%d", r.Record.Epoch, r.Cut)
	}
	return fmt.Sprintf("%T", r)
}

func (h *harness) u64(d *datadriven.TestData, key string, def uint64) uint64 {
	for _, a := range d.CmdArgs {
		if a.Key == key && len(a.Vals) > 0 {
			v, err := strconv.ParseUint(a.Vals[0], 10, 64)
			if err != nil {
				d.Fatalf(h.t, "%s: %v", key, err)
			}
			return v
		}
	}
	return def
}

// pos parses key=EPOCH.NEXT (default: the chain's start).
func (h *harness) pos(d *datadriven.TestData, key string) chain.Position {
	v := h.str(d, key, "1.0")
	e, n, _ := strings.Cut(v, ".")
	ev, err1 := strconv.ParseUint(e, 10, 64)
	nv, err2 := strconv.ParseUint(n, 10, 64)
	if err1 != nil || err2 != nil {
		d.Fatalf(h.t, "%s: %q is not EPOCH.NEXT", key, v)
	}
	return chain.Position{Epoch: ev, Next: nv}
}

func (h *harness) str(d *datadriven.TestData, key, def string) string {
	for _, a := range d.CmdArgs {
		if a.Key == key && len(a.Vals) > 0 {
			return a.Vals[0]
		}
	}
	return def
}

func (h *harness) dur(d *datadriven.TestData, key string, def time.Duration) time.Duration {
	for _, a := range d.CmdArgs {
		if a.Key == key && len(a.Vals) > 0 {
			v, err := time.ParseDuration(a.Vals[0])
			if err != nil {
				d.Fatalf(h.t, "%s: %v", key, err)
			}
			return v
		}
	}
	return def
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func parseArgs(line string) ([]datadriven.CmdArg, error) {
	var out []datadriven.CmdArg
	fields := strings.Fields(line)
	if len(fields) > 0 && fields[0] == "admit" {
		fields = fields[1:]
	}
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		a := datadriven.CmdArg{Key: k}
		if ok {
			a.Vals = []string{v}
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, errors.New("empty admit line")
	}
	return out, nil
}

func stallCounts(m map[string]uint64) string {
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if v > 0 {
			keys = append(keys, fmt.Sprintf("%s:%d", k, v))
		}
	}
	slices.Sort(keys)
	return "[" + strings.Join(keys, " ") + "]"
}

// join concatenates the outputs of several steps, leaving out those that
// asked for nothing unless all did.
func join(outs ...string) string {
	var b strings.Builder
	for _, o := range outs {
		if o != "(nothing)\n" {
			b.WriteString(o)
		}
	}
	if b.Len() == 0 {
		return "(nothing)\n"
	}
	return b.String()
}
