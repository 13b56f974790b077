package settlecore

import (
	"encoding/json"
	"errors"
	"fmt"
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

// TestTraces runs the data-driven scripts in testdata: each command starts
// a pass or steps the result of the request it asked for into it, and its
// expected output is what the pass then asks for (or its end). Rewrite the
// expected output after a deliberate change with
//
//	go test ./loglet/internal/settlecore -run TestTraces -rewrite
//
// Commands (arguments are key=value; positions are EPOCH.NEXT; cuts are
// EPOCH@SLOT joined by commas; objects are STREAM:START-END, a settled
// object's name; durations like 30s):
//
//	new [owner=p1 epoch=2 grace=1m k=3 settled=1 maxops= retries=N|none live readahead= writeahead= target= memory]
//	                         (memory: the pass asks for its buffers' bytes)
//	                         (live: the pass asks each stream's liveness)
//	pass upto= checkpoint= [cuts=] [maxslots=] [trim=AT/DELETED trim-cuts=] [idle=OBJECT,...]
//	                         (trim: the caller read the cursor; else the pass reads it;
//	                         idle: the last settled objects of the idle streams named)
//	time +d                                   (the clock moves)
//	trim at= deleted= [cuts=] | trim-failed   (ReadTrim's result)
//	checkpoint [owner= epoch=] [ver=|same] | checkpoint-failed   (same: the version
//	                         last read: the checkpoint did not move)
//	committed | commit-conflict | commit-failed
//	slots-deleted n= | slots-delete-failed n=
//	markers [failed]   (input: one marker a line: OBJECT [at=-d] [ref=STREAM@END] [deleting],
//	                         as versions before chunk markers wrote them, or a chunk
//	                         marker: chunk OBJECT [ref=STREAM@END] OBJECT [ref=...] ... [at=-d] [deleting])
//	ref OBJECT,... | ref-missing | ref-failed
//	settled-ref OBJECT      (GetRef's result: the settled ref of OBJECT, its records rendered)
//	object-deleted | object-delete-failed
//	fenced cut= | fence-failed
//	slots-read n= [full] [failed] [streams=a,b [first=SEQ]]   (the first n slots asked, 100
//	                         bytes each, or with streams one record of each stream a slot,
//	                         the first at SEQ if given; full:
//	                         the pass's bytes are reached; failed: the next slot unreadable)
//	refs [none] [prev=START-END] | refs-failed   (ScanRefs' result: the stream's refs into
//	                         the slots read, one a slot; prev: its settled ref before them)
//	live [dead] [trim=N] | live-failed           (CheckLive's result)
//	range | range-failed                         (GetRange's: the slot's bytes)
//	object-put | object-exists | object-put-failed   (PutObject's result)
//	object-got | object-get-failed   (GetObject's: what the last PutObject of the key wrote,
//	                         or found in place)
//	waited | wait-failed      (Wait's result; failed: the executor's context ended)
//	memory-held | memory-full (HoldMemory's result; full: the budget has not the bytes now)
//	parallel [failed=i,j] [exists=k]   (Parallel's: each call succeeds but the i-th, j-th
//	                         (0-based), which fail transiently, and the k-th PUT, which
//	                         finds an object there)
type harness struct {
	t   *testing.T
	cfg Config
	p   *Pass
	now time.Time
	ver int // metastore versions handed out
	// cpVer is the checkpoint's version as last read.
	cpVer metastore.Version
	// marked maps a marker's key to its object's name, for display.
	marked map[string]string
	// Slots with streams: each slot object, the frames in it by stream,
	// the next seq of each stream, and the bodies PutObject wrote.
	objects map[string][]byte
	frames  map[string][]slotFrame
	seq     map[string]uint64
	bodies  map[string][]byte
	// pad: bytes appended to each record's body (new pad=N), to give a
	// codec something to compress.
	pad int
}

// slotFrame is one stream's frame in a slot object.
type slotFrame struct {
	key string
	f   envelope.FrameInfo
}

var t0 = time.Unix(1_700_000_000, 0)

func TestTraces(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := &harness{t: t, now: t0, marked: map[string]string{}, objects: map[string][]byte{}, frames: map[string][]slotFrame{},
			seq: map[string]uint64{}, bodies: map[string][]byte{}}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return h.run(d)
		})
	})
}

const star = "s1"

func (h *harness) run(d *datadriven.TestData) string {
	if d.Cmd != "new" && d.Cmd != "time" && h.cfg.Owner == "" {
		d.Fatalf(h.t, "new first")
	}
	if d.Cmd != "new" && d.Cmd != "pass" && d.Cmd != "time" && (h.p == nil || h.p.Next() == nil) {
		d.Fatalf(h.t, "%s: no request is waiting", d.Cmd)
	}
	switch d.Cmd {
	case "new":
		h.cfg = Config{Star: star, Class: chain.Express, Owner: h.str(d, "owner", "p1"), Epoch: h.u64(d, "epoch", 2),
			TransitK: int(h.u64(d, "k", 3)), SettledBuckets: int(h.u64(d, "settled", 1)), DoomedGrace: h.dur(d, "grace", time.Minute),
			MaxCommitOps: int(h.u64(d, "maxops", 0)), Liveness: d.HasArg("live"), Codec: h.codec(d),
			ReadAhead: int(h.u64(d, "readahead", 0)), WriteAhead: int(h.u64(d, "writeahead", 0)), TargetBytes: int(h.u64(d, "target", 0)), Memory: d.HasArg("memory")}
		if r := h.str(d, "retries", ""); r == "none" {
			h.cfg.Retries = -1
		} else {
			h.cfg.Retries = int(h.u64(d, "retries", 0))
		}
		h.pad = int(h.u64(d, "pad", 0))
		h.p = nil
		return ""
	case "pass":
		if h.p != nil && h.p.Next() != nil {
			d.Fatalf(h.t, "pass: the last pass still waits on %T", h.p.Next())
		}
		in := Input{Upto: h.pos(d, "upto"), Checkpoint: h.pos(d, "checkpoint"), Cuts: h.cuts(d, "cuts"), MaxSlots: int(h.u64(d, "maxslots", 0))}
		for _, o := range strings.Split(h.str(d, "idle", ""), ",") {
			if o != "" {
				sr := h.settledRef(d, o)
				in.Idle = append(in.Idle, settle.KnownRef{Key: chain.RefKey(sr.Stream, sr.End), Version: h.version(), Ref: sr})
			}
		}
		if d.HasArg("trim") {
			at, del, _ := strings.Cut(h.str(d, "trim", ""), "/")
			in.TrimKnown = true
			in.Trim = chain.TrimCursor{At: parsePos(h.t, d, at), Deleted: parsePos(h.t, d, del), Cuts: h.cuts(d, "trim-cuts")}
			in.TrimVersion = h.version()
		}
		h.p = New(h.cfg, in, h.now)
	case "time":
		if len(d.CmdArgs) != 1 {
			d.Fatalf(h.t, "time +d")
		}
		dd, err := time.ParseDuration(strings.TrimPrefix(d.CmdArgs[0].Key, "+"))
		if err != nil {
			d.Fatalf(h.t, "time: %v", err)
		}
		h.now = h.now.Add(dd)
		return fmt.Sprintf("now +%v\n", h.now.Sub(t0))
	case "trim":
		h.step(TrimRead{Cursor: chain.TrimCursor{At: h.pos(d, "at"), Deleted: h.pos(d, "deleted"), Cuts: h.cuts(d, "cuts")}, Version: h.version()})
	case "trim-failed":
		h.step(TrimRead{Err: errors.New("metastore down")})
	case "checkpoint":
		v := metastore.Version(h.str(d, "ver", ""))
		switch {
		case d.HasArg("same"):
			v = h.cpVer // the checkpoint did not move
		case v == "":
			v = h.version()
		}
		h.cpVer = v
		h.step(CheckpointRead{Owner: h.str(d, "owner", h.cfg.Owner), Epoch: h.u64(d, "epoch", h.cfg.Epoch), Version: v})
	case "checkpoint-failed":
		h.step(CheckpointRead{Err: errors.New("metastore down")})
	case "committed":
		c, ok := h.p.Next().(Commit)
		if !ok {
			d.Fatalf(h.t, "committed: the pass waits on %T", h.p.Next())
		}
		vs := make([]metastore.Version, len(c.Ops))
		for i := range vs {
			vs[i] = h.version()
		}
		h.step(Committed{Versions: vs})
	case "commit-conflict":
		h.step(Committed{Err: fmt.Errorf("metastore: commit: %w", metastore.ErrConflict)})
	case "commit-failed":
		h.step(Committed{Err: errors.New("metastore down")})
	case "slots-deleted":
		h.step(SlotsDeleted{Deleted: int(h.u64(d, "n", 0))})
	case "slots-delete-failed":
		h.step(SlotsDeleted{Deleted: int(h.u64(d, "n", 0)), Err: errors.New("chain: trim: zone-1 down")})
	case "markers":
		if d.HasArg("failed") {
			h.step(MarkersScanned{Err: errors.New("metastore down")})
			break
		}
		var items []metastore.Item
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			chunk := f[0] == "chunk"
			m := settle.Marker{At: h.now.UnixMilli()}
			var names []string
			args := f[1:]
			if chunk {
				// A chunk marker: its objects, each followed by its ref=.
				args = nil
				for _, a := range f[1:] {
					k, v, _ := strings.Cut(a, "=")
					switch {
					case !strings.Contains(a, "="):
						m.Objects = append(m.Objects, settle.Named{Key: h.object(d, a)})
						names = append(names, a)
					case k == "ref" && len(m.Objects) > 0:
						s, end, _ := strings.Cut(v, "@")
						n, _ := strconv.ParseUint(end, 10, 64)
						m.Objects[len(m.Objects)-1].Ref = chain.RefKey(s, n)
					default:
						args = append(args, a)
					}
				}
			} else {
				m.Key = h.object(d, f[0])
			}
			for _, a := range args {
				k, v, _ := strings.Cut(a, "=")
				switch k {
				case "at":
					dd, err := time.ParseDuration(v)
					if err != nil {
						d.Fatalf(h.t, "markers: %v", err)
					}
					m.At = h.now.Add(dd).UnixMilli()
				case "ref":
					s, end, _ := strings.Cut(v, "@")
					n, _ := strconv.ParseUint(end, 10, 64)
					m.Ref = chain.RefKey(s, n)
				case "deleting":
					m.Deleting = true
				default:
					d.Fatalf(h.t, "markers: unknown %q", a)
				}
			}
			var key string
			if chunk {
				var keys []string
				for _, n := range m.Objects {
					keys = append(keys, n.Key)
				}
				key = settle.ChunkMarkerKey(star, h.cfg.Class, keys)
				h.marked[key] = "chunk[" + strings.Join(names, ",") + "]"
			} else {
				key = settle.MarkerKey(star, h.cfg.Class, m.Key)
				h.marked[key] = f[0]
			}
			items = append(items, metastore.Item{Key: key, Value: m.Encode(), Version: h.version()})
		}
		h.step(MarkersScanned{Items: items})
	case "ref":
		sr := absorb.SpanRef{Stream: "x"}
		for _, o := range strings.Split(d.CmdArgs[0].Key, ",") {
			sr.Extents = append(sr.Extents, absorb.Extent{Key: h.object(d, o), FirstSeq: sr.End, Count: 1, Length: 10})
			sr.End++
		}
		v, err := json.Marshal(sr)
		if err != nil {
			d.Fatalf(h.t, "ref: %v", err)
		}
		g, ok := h.p.Next().(GetRef)
		if !ok {
			d.Fatalf(h.t, "ref: the pass waits on %T", h.p.Next())
		}
		h.step(RefGot{Item: metastore.Item{Key: g.Key, Value: v, Version: h.version()}, Found: true})
	case "settled-ref":
		g, ok := h.p.Next().(GetRef)
		if !ok {
			d.Fatalf(h.t, "settled-ref: the pass waits on %T", h.p.Next())
		}
		sr := h.settledRef(d, d.CmdArgs[0].Key)
		v, err := json.Marshal(sr)
		if err != nil {
			d.Fatalf(h.t, "settled-ref: %v", err)
		}
		h.step(RefGot{Item: metastore.Item{Key: g.Key, Value: v, Version: h.version()}, Found: true})
	case "ref-missing":
		h.step(RefGot{})
	case "ref-failed":
		h.step(RefGot{Err: errors.New("metastore down")})
	case "object-deleted":
		h.step(ObjectDeleted{})
	case "object-delete-failed":
		h.step(ObjectDeleted{Err: fmt.Errorf("settled bucket down: %w", objstore.ErrUnavailable)})
	case "fenced":
		h.step(EpochFenced{Cut: h.u64(d, "cut", 0)})
	case "fence-failed":
		h.step(EpochFenced{Err: errors.New("chain: fence: slot 4 undecidable")})
	case "slots-read":
		rs, ok := h.p.Next().(ReadSlots)
		if !ok {
			d.Fatalf(h.t, "slots-read: the pass waits on %T", h.p.Next())
		}
		n := h.u64(d, "n", 0)
		if n > rs.To-rs.From {
			d.Fatalf(h.t, "slots-read: %d slots asked, not %d", rs.To-rs.From, n)
		}
		ev := SlotsRead{Full: d.HasArg("full")}
		streams := h.str(d, "streams", "")
		if d.HasArg("first") {
			for _, id := range strings.Split(streams, ",") {
				h.seq[id] = h.u64(d, "first", 0)
			}
		}
		for i := uint64(0); i < n; i++ {
			pos := chain.Position{Epoch: rs.Epoch, Next: rs.From + i}
			if streams == "" {
				ev.Slots = append(ev.Slots, settle.Slot{Pos: pos, Object: make([]byte, 100)}) // each slot object 100 bytes
				continue
			}
			ev.Slots = append(ev.Slots, h.slot(pos, strings.Split(streams, ",")))
		}
		if d.HasArg("failed") {
			ev.Err = errors.New("chain: walk: slot unreadable")
		}
		h.step(ev)
	case "refs":
		sr, ok := h.p.Next().(ScanRefs)
		if !ok {
			d.Fatalf(h.t, "refs: the pass waits on %T", h.p.Next())
		}
		var items []metastore.Item
		if !d.HasArg("none") {
			items = h.refs(d, sr.Prefix)
		}
		h.step(RefsScanned{Items: items})
	case "refs-failed":
		h.step(RefsScanned{Err: errors.New("metastore down")})
	case "live":
		h.step(Live{Live: !d.HasArg("dead"), TrimSeq: h.u64(d, "trim", 0)})
	case "live-failed":
		h.step(Live{Err: errors.New("catalogue unreadable")})
	case "range":
		g, ok := h.p.Next().(GetRange)
		if !ok {
			d.Fatalf(h.t, "range: the pass waits on %T", h.p.Next())
		}
		obj := h.objects[g.Key]
		h.step(RangeGot{Data: obj[g.Offset : g.Offset+g.Length]})
	case "range-failed":
		h.step(RangeGot{Err: fmt.Errorf("zone down: %w", objstore.ErrUnavailable)})
	case "object-put":
		po, ok := h.p.Next().(PutObject)
		if !ok {
			d.Fatalf(h.t, "object-put: the pass waits on %T", h.p.Next())
		}
		h.bodies[po.Key] = po.Body
		h.step(ObjectPut{})
	case "object-exists": // what is there is what the pass renders: a pass that died wrote it
		if po, ok := h.p.Next().(PutObject); ok {
			h.bodies[po.Key] = po.Body
		}
		h.step(ObjectPut{Err: fmt.Errorf("settled: %w", objstore.ErrExists)})
	case "object-put-failed":
		h.step(ObjectPut{Err: fmt.Errorf("settled bucket down: %w", objstore.ErrUnavailable)})
	case "object-got":
		g, ok := h.p.Next().(GetObject)
		if !ok {
			d.Fatalf(h.t, "object-got: the pass waits on %T", h.p.Next())
		}
		h.step(ObjectGot{Body: h.bodies[g.Key]})
	case "object-get-failed":
		h.step(ObjectGot{Err: fmt.Errorf("settled bucket down: %w", objstore.ErrUnavailable)})
	case "parallel":
		pr, ok := h.p.Next().(Parallel)
		if !ok {
			d.Fatalf(h.t, "parallel: the pass waits on %T", h.p.Next())
		}
		idx := func(key string) map[int]bool {
			out := map[int]bool{}
			for _, v := range strings.Split(h.str(d, key, ""), ",") {
				if v != "" {
					n, _ := strconv.Atoi(v)
					out[n] = true
				}
			}
			return out
		}
		failed, exists, refused := idx("failed"), idx("exists"), idx("refused")
		errOf := func(i int) error {
			switch {
			case failed[i]:
				return fmt.Errorf("bucket down: %w", objstore.ErrUnavailable)
			case refused[i]:
				return fmt.Errorf("bucket refuses: %w", objstore.ErrPermanent)
			case exists[i]:
				return fmt.Errorf("settled: %w", objstore.ErrExists)
			}
			return nil
		}
		var done ParallelDone
		for i, q := range pr.Puts { // the calls numbered in the order shown: puts, then deletes
			if err := errOf(i); err == nil || exists[i] {
				h.bodies[q.Key] = q.Body
			}
			done.Puts = append(done.Puts, ObjectPut{Err: errOf(i)})
		}
		for i := range pr.Deletes {
			done.Deletes = append(done.Deletes, ObjectDeleted{Err: errOf(len(pr.Puts) + i)})
		}
		for i, g := range pr.Gets {
			if err := errOf(len(pr.Puts) + len(pr.Deletes) + i); err != nil {
				done.Gets = append(done.Gets, RangeGot{Err: err})
				continue
			}
			obj := h.objects[g.Key]
			done.Gets = append(done.Gets, RangeGot{Data: obj[g.Offset : g.Offset+g.Length]})
		}
		h.step(done)
	case "memory-held":
		h.step(MemoryHeld{})
	case "memory-full":
		h.step(MemoryHeld{Err: errors.New("budget: in use")})
	case "waited":
		h.step(Waited{})
	case "wait-failed":
		h.step(Waited{Err: errors.New("context canceled")})
	default:
		d.Fatalf(h.t, "unknown command %q", d.Cmd)
	}
	return h.render()
}

// answers pairs each request with its event's type.
var answers = map[string]string{
	"ReadTrim": "TrimRead", "ReadCheckpoint": "CheckpointRead", "Commit": "Committed", "DeleteSlots": "SlotsDeleted",
	"ScanMarkers": "MarkersScanned", "GetRef": "RefGot", "DeleteObject": "ObjectDeleted", "FenceEpoch": "EpochFenced",
	"ReadSlots": "SlotsRead", "Wait": "Waited", "ScanRefs": "RefsScanned", "CheckLive": "Live",
	"GetRange": "RangeGot", "PutObject": "ObjectPut", "GetObject": "ObjectGot", "Parallel": "ParallelDone", "HoldMemory": "MemoryHeld",
}

func (h *harness) step(ev Event) {
	req := strings.TrimPrefix(fmt.Sprintf("%T", h.p.Next()), "settlecore.")
	if got := strings.TrimPrefix(fmt.Sprintf("%T", ev), "settlecore."); answers[req] != got {
		h.t.Fatalf("the pass waits on %s, not on what %s answers", req, got)
	}
	h.p.Step(h.now, ev)
}

func (h *harness) version() metastore.Version {
	h.ver++
	return metastore.Version(fmt.Sprintf("v%d", h.ver))
}

// render is what the pass asks now: its logs, then its request or its end.
func (h *harness) render() string {
	var b strings.Builder
	for _, l := range h.p.Logs() {
		fmt.Fprintf(&b, "log %s %v\n", l.Msg, l.Attrs)
	}
	req := h.p.Next()
	if req == nil {
		done, res, err := h.p.Done()
		if !done {
			h.t.Fatalf("the pass asks for nothing and is not done")
		}
		fmt.Fprintf(&b, "done: cursor at=%s deleted=%s cuts=%s; %s", pos(res.Trim.At), pos(res.Trim.Deleted), cuts(res.Trim.Cuts), res.Describe())
		fmt.Fprintf(&b, " merged=%d deleted-objects=%d freed=%d", res.Merged, res.DeletedObjects, res.FreedBytes)
		if res.Retries > 0 {
			fmt.Fprintf(&b, " retries=%d", res.Retries)
		}
		if res.IdleMerges > 0 || len(res.IdleLooked) > 0 {
			fmt.Fprintf(&b, " idle-merges=%d idle-looked=%s", res.IdleMerges, strings.Join(res.IdleLooked, ","))
		}
		if res.DoomedWaiting > 0 || !res.DoomedDue.IsZero() {
			fmt.Fprintf(&b, " doomed-waiting=%d due=+%v", res.DoomedWaiting, res.DoomedDue.Sub(t0))
		}
		b.WriteString("\n")
		if res.DeleteErr != nil {
			fmt.Fprintf(&b, "  delete-err: %v\n", res.DeleteErr)
		}
		if err != nil {
			fmt.Fprintf(&b, "  err: %v\n", err)
			if errors.Is(err, settle.ErrDeposed) {
				b.WriteString("  (deposed)\n")
			}
		}
		return b.String()
	}
	fmt.Fprintf(&b, "[%s] ", h.p.Phase())
	switch r := req.(type) {
	case ReadTrim:
		b.WriteString("read-trim")
	case ReadCheckpoint:
		b.WriteString("read-checkpoint")
	case Commit:
		fmt.Fprintf(&b, "commit %s:", r.What)
		for _, op := range r.Ops {
			b.WriteString("\n  ")
			b.WriteString(h.op(op))
		}
	case DeleteSlots:
		fmt.Fprintf(&b, "delete-slots e=%d [%d,%d)", r.Epoch, r.From, r.To)
	case ScanMarkers:
		fmt.Fprintf(&b, "scan-markers after=%q limit=%d", h.name(r.After), r.Limit)
	case GetRef:
		fmt.Fprintf(&b, "get-ref %s", r.Key)
	case DeleteObject:
		fmt.Fprintf(&b, "delete-object b=%d %s", r.Bucket, r.Key)
	case FenceEpoch:
		fmt.Fprintf(&b, "fence e=%d from=%d", r.Epoch, r.From)
	case ReadSlots:
		fmt.Fprintf(&b, "read-slots e=%d [%d,%d) max-bytes=%d", r.Epoch, r.From, r.To, r.MaxBytes)
	case ScanRefs:
		fmt.Fprintf(&b, "scan-refs %s after=%s limit=%d", r.Prefix, r.After, r.Limit)
	case CheckLive:
		fmt.Fprintf(&b, "check-live %s", r.Stream)
	case GetRange:
		fmt.Fprintf(&b, "get-range settled=%v b=%d %s [%d+%d)", r.Settled, r.Bucket, r.Key, r.Offset, r.Length)
	case PutObject:
		h.nameMarker(r.Key)
		fmt.Fprintf(&b, "put-object b=%d %s (%d bytes)", r.Bucket, r.Key, len(r.Body))
	case GetObject:
		fmt.Fprintf(&b, "get-object b=%d %s", r.Bucket, r.Key)
	case Wait:
		fmt.Fprintf(&b, "wait %v", r.For)
	case HoldMemory:
		fmt.Fprintf(&b, "hold-memory %d", r.Bytes)
	case Parallel:
		fmt.Fprintf(&b, "parallel limit=%d:", r.Limit)
		for _, q := range r.Puts {
			h.nameMarker(q.Key)
			fmt.Fprintf(&b, "\n  put-object b=%d %s (%d bytes)", q.Bucket, q.Key, len(q.Body))
		}
		for _, q := range r.Deletes {
			fmt.Fprintf(&b, "\n  delete-object b=%d %s", q.Bucket, q.Key)
		}
		for _, q := range r.Gets {
			fmt.Fprintf(&b, "\n  get-range settled=%v b=%d %s [%d+%d)", q.Settled, q.Bucket, q.Key, q.Offset, q.Length)
		}
	default:
		fmt.Fprintf(&b, "%T", r)
	}
	b.WriteString("\n")
	return b.String()
}

// codec is new's codec= (none if not given): the settled objects' and
// the slots' frames'.
func (h *harness) codec(d *datadriven.TestData) envelope.Codec {
	c, err := envelope.ParseCodec(h.str(d, "codec", "none"))
	if err != nil {
		d.Fatalf(h.t, "new: %v", err)
	}
	return c
}

// slot builds the slot object at pos holding one record of each stream.
func (h *harness) slot(pos chain.Position, streams []string) settle.Slot {
	w := envelope.NewBundleWriter()
	for _, id := range streams {
		seq := h.seq[id]
		rec := envelope.Record{Timestamp: int64(1000 + seq), Body: []byte(fmt.Sprintf("%s-%d%s", id, seq, strings.Repeat(".", h.pad)))}
		if err := w.AddFrame(id, seq, 1, rec.Timestamp, rec.Timestamp, envelope.AppendRecord(nil, rec), h.cfg.Codec); err != nil {
			h.t.Fatal(err)
		}
		h.seq[id] = seq + 1
	}
	obj, frames := w.Finish(pos.Epoch, pos.Next, envelope.Nonce{})
	key := chain.SlotKey(star, h.cfg.Class, pos.Epoch, pos.Next)
	h.objects[key] = obj
	for _, f := range frames {
		// A slot read again (a pass after one that died) replaces its frame.
		h.frames[f.Stream] = slices.DeleteFunc(h.frames[f.Stream], func(sf slotFrame) bool { return sf.key == key })
		h.frames[f.Stream] = append(h.frames[f.Stream], slotFrame{key: key, f: f})
	}
	return settle.Slot{Pos: pos, Object: obj, Frames: frames}
}

// refs is the refs under prefix: a settled one before them (prev=), then
// one a frame of the stream's in the slots read.
func (h *harness) refs(d *datadriven.TestData, prefix string) []metastore.Item {
	id := ""
	for s := range h.frames {
		if chain.RefPrefix(s) == prefix {
			id = s
		}
	}
	if id == "" {
		d.Fatalf(h.t, "refs: no stream has refs under %s", prefix)
	}
	var items []metastore.Item
	add := func(sr absorb.SpanRef) {
		v, err := json.Marshal(sr)
		if err != nil {
			d.Fatalf(h.t, "refs: %v", err)
		}
		items = append(items, metastore.Item{Key: chain.RefKey(id, sr.End), Value: v, Version: h.version()})
	}
	if p := h.str(d, "prev", ""); p != "" {
		add(h.settledRef(d, id+":"+p))
	}
	for _, sf := range h.frames[id] {
		f := sf.f
		add(absorb.SpanRef{Stream: id, Star: star, Class: h.cfg.Class.String(), Start: f.FirstSeq, End: f.FirstSeq + uint64(f.Count), MinTS: f.MinTimestamp, MaxTS: f.MaxTimestamp,
			Extents: []absorb.Extent{{Key: sf.key, Offset: f.Offset, Length: f.Length, RawLength: f.RawLength, Codec: f.Codec, CRC: f.CRC,
				FirstSeq: f.FirstSeq, Count: f.Count, MinTimestamp: f.MinTimestamp, MaxTimestamp: f.MaxTimestamp}}})
	}
	return items
}

// settledRef is the settled ref of the object STREAM:START-END, one frame
// of one record a seq (rendered, kept in h.objects for the ranged GETs).
func (h *harness) settledRef(d *datadriven.TestData, name string) absorb.SpanRef {
	id, _, _ := strings.Cut(name, ":")
	key := h.object(d, name)
	_, r, _ := strings.Cut(name, ":")
	a, b, _ := strings.Cut(r, "-")
	start, _ := strconv.ParseUint(a, 10, 64)
	end, _ := strconv.ParseUint(b, 10, 64)
	run := settle.Run{FirstSeq: start}
	for seq := start; seq < end; seq++ {
		run.Records = append(run.Records, envelope.Record{Timestamp: int64(1000 + seq), Body: []byte(fmt.Sprintf("%s-%d", id, seq))})
	}
	obj, frames, err := settle.Render(id, start, end, []settle.Run{run}, envelope.CodecNone, 1<<20)
	if err != nil {
		d.Fatalf(h.t, "settled ref %s: %v", name, err)
	}
	h.objects[key] = obj
	f := frames[0]
	return absorb.SpanRef{Stream: id, Star: star, Class: h.cfg.Class.String(), Start: start, End: end, MinTS: f.MinTimestamp, MaxTS: f.MaxTimestamp,
		Extents: []absorb.Extent{{Key: key, Offset: f.Offset, Length: f.Length, RawLength: f.RawLength, Codec: f.Codec, CRC: f.CRC,
			FirstSeq: f.FirstSeq, Count: f.Count, MinTimestamp: f.MinTimestamp, MaxTimestamp: f.MaxTimestamp}}}
}

// op describes one op of a Commit.
func (h *harness) op(op metastore.Op) string {
	kind := map[metastore.OpKind]string{metastore.OpPut: "put", metastore.OpDelete: "delete", metastore.OpCheck: "check"}[op.Kind]
	key := h.name(op.Key)
	val := ""
	switch {
	case op.Key == chain.TrimKey(star, h.cfg.Class):
		if t, err := chain.DecodeTrimCursor(op.Value); err == nil && op.Kind == metastore.OpPut {
			val = fmt.Sprintf(" at=%s deleted=%s cuts=%s owner=%s", pos(t.At), pos(t.Deleted), cuts(t.Cuts), t.Owner)
		}
	case strings.HasPrefix(op.Key, settle.MarkerPrefix(star, h.cfg.Class)) && op.Kind == metastore.OpPut:
		m, err := settle.DecodeMarker(op.Value)
		if err == nil {
			val = fmt.Sprintf(" deleting=%v", m.Deleting)
			if m.Key != "" {
				h.nameMarker(m.Key)
				key = h.name(op.Key)
			}
			if len(m.Objects) > 0 {
				if _, ok := h.marked[op.Key]; !ok {
					h.marked[op.Key] = "chunk" + strconv.Itoa(len(h.marked))
					key = h.name(op.Key)
				}
				kind := "doomed"
				if m.Objects[0].Ref != "" {
					kind = "pending"
				}
				var names []string
				for _, n := range m.Objects {
					names = append(names, shortObject(n.Key))
				}
				val += fmt.Sprintf(" %s=%s", kind, strings.Join(names, ","))
			}
		}
	}
	expect := string(op.Expect)
	if op.Expect == metastore.NoVersion {
		expect = "absent"
	}
	return fmt.Sprintf("%s %s%s @%s", kind, key, val, expect)
}

// shortObject names a settled object's key STREAM:START-END (by its
// last two path elements: the stream key's name part and the range).
func shortObject(key string) string {
	parts := strings.Split(key, "/")
	if len(parts) < 3 {
		return key
	}
	rng := parts[len(parts)-1]
	a, b, _ := strings.Cut(rng, "-")
	start, _ := strconv.ParseUint(a, 10, 64)
	end, _ := strconv.ParseUint(b, 10, 64)
	stream := parts[len(parts)-2]
	if _, id, ok := strings.Cut(stream, "_"); ok {
		stream = id
	}
	return fmt.Sprintf("%s:%d-%d", stream, start, end)
}

// nameMarker names the one-object marker key of the settled object at
// objKey after the object, for display.
func (h *harness) nameMarker(objKey string) {
	if k := settle.MarkerKey(star, h.cfg.Class, objKey); h.marked[k] == "" {
		h.marked[k] = shortObject(objKey)
	}
}

// name shortens a metastore key for display.
func (h *harness) name(key string) string {
	switch key {
	case chain.TrimKey(star, h.cfg.Class):
		return "trim"
	case chain.CheckpointKey(star, h.cfg.Class):
		return "checkpoint"
	}
	if o, ok := h.marked[key]; ok {
		return "marker(" + o + ")"
	}
	return key
}

// object is the settled object's key of a name STREAM:START-END.
func (h *harness) object(d *datadriven.TestData, name string) string {
	s, r, ok := strings.Cut(name, ":")
	a, b, ok2 := strings.Cut(r, "-")
	start, err1 := strconv.ParseUint(a, 10, 64)
	end, err2 := strconv.ParseUint(b, 10, 64)
	if !ok || !ok2 || err1 != nil || err2 != nil {
		d.Fatalf(h.t, "object %q is not STREAM:START-END", name)
	}
	return chain.SettledKey(s, start, end)
}

func (h *harness) str(d *datadriven.TestData, key, def string) string {
	if !d.HasArg(key) {
		return def
	}
	var v string
	d.ScanArgs(h.t, key, &v)
	return v
}

func (h *harness) u64(d *datadriven.TestData, key string, def uint64) uint64 {
	s := h.str(d, key, "")
	if s == "" {
		return def
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		d.Fatalf(h.t, "%s=%q: %v", key, s, err)
	}
	return v
}

func (h *harness) dur(d *datadriven.TestData, key string, def time.Duration) time.Duration {
	s := h.str(d, key, "")
	if s == "" {
		return def
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		d.Fatalf(h.t, "%s=%q: %v", key, s, err)
	}
	return v
}

func (h *harness) pos(d *datadriven.TestData, key string) chain.Position {
	s := h.str(d, key, "")
	if s == "" {
		d.Fatalf(h.t, "%s= is required", key)
	}
	return parsePos(h.t, d, s)
}

func parsePos(t *testing.T, d *datadriven.TestData, s string) chain.Position {
	e, n, ok := strings.Cut(s, ".")
	ev, err1 := strconv.ParseUint(e, 10, 64)
	nv, err2 := strconv.ParseUint(n, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		d.Fatalf(t, "position %q is not EPOCH.NEXT", s)
	}
	return chain.Position{Epoch: ev, Next: nv}
}

func (h *harness) cuts(d *datadriven.TestData, key string) []chain.Cut {
	s := h.str(d, key, "")
	if s == "" {
		return nil
	}
	var out []chain.Cut
	for _, c := range strings.Split(s, ",") {
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

// slotList is the slots' positions, a range per epoch: 1.[2,5) 2.[0,6).
func slotList(ss []settle.Slot) string {
	var parts []string
	for i := 0; i < len(ss); {
		j := i + 1
		for j < len(ss) && ss[j].Pos.Epoch == ss[i].Pos.Epoch && ss[j].Pos.Next == ss[j-1].Pos.Next+1 {
			j++
		}
		parts = append(parts, fmt.Sprintf("%d.[%d,%d)", ss[i].Pos.Epoch, ss[i].Pos.Next, ss[j-1].Pos.Next+1))
		i = j
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

func pos(p chain.Position) string { return fmt.Sprintf("%d.%d", p.Epoch, p.Next) }

func cuts(cs []chain.Cut) string {
	if len(cs) == 0 {
		return "-"
	}
	var parts []string
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%d@%d", c.Epoch, c.Slot))
	}
	return strings.Join(parts, ",")
}
