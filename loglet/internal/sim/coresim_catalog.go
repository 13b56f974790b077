package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/loglet/internal/catalogcore"
	"github.com/flightlog/flightlog/metastore"
)

// The catalogue run of the core-level simulation drives the stream
// catalogue's core (loglet/internal/catalogcore) for two processes over
// one metastore.Mem: a leader of star s1 and a neighbour leading s2, each
// looking names up (appends, with create-on-append), creating, deleting and
// re-creating them, trimming and reconfiguring them and committing
// consumer offsets, while
// their chains (a model: admissions, acks, absorbs writing refs) run and
// the leader's retention pass finishes deletes from their markers. Several
// operations of each process are in flight at once, and every step — which
// operation's pending request executes next, a chain's progress, a
// metastore failure before or after applying — is drawn from the seed, so
// the interleavings are exact and a seed replays its trace.
//
// Checks: no process serves (or caches, or admits to) an incarnation it
// retired; incarnations never repeat per name, and a process never serves
// a name's incarnation older (in commit order) than one it served; a trim
// point, an offset commit or a configure that applied did so on the
// incarnation its operation was for (a configure's: the one it read
// first); no write of a record takes its trim point back (a configure
// never undoes a trim); and once everything settles, a deleted incarnation
// whose marker is gone has no ref left.

// CatalogOptions configure one catalogue run.
type CatalogOptions struct {
	Seed uint64
	// Trace, if set, receives the run's trace as text.
	Trace io.Writer
}

// CatalogResult is what one catalogue run found.
type CatalogResult struct {
	Seed       uint64
	Trace      uint64 // a hash of the whole trace: equal runs, equal hashes
	Steps      int
	Violations []string

	Ops, Served, Created, Deleted, Trimmed, Offsets, Conflicts, Refused, Recreated, Configured int
}

// Failed reports whether the run found a violation.
func (r *CatalogResult) Failed() bool { return len(r.Violations) > 0 }

// catRec is a stream record as the simulation stores it.
type catRec struct {
	Name, Inc, Nonce, Star string
	Trim                   uint64
	Ret                    int // the options a configure writes (a retention, say)
}

// id is the incarnation's ID as the catalogue's core writes it (the
// chains' model and the refs are keyed by it).
func (r catRec) id() string {
	return catalogcore.Record{Name: r.Name, Incarnation: r.Inc}.ID()
}

// catProc is one process: its cache, its chains' model, its operations.
type catProc struct {
	i         int
	star      string
	cache     map[string]catalogcore.Record // name → incarnation served
	retired   map[string]bool               // stream ID → retired here
	admitted  map[string]uint64
	acked     map[string]uint64
	absorbed  map[string]uint64
	servedGen map[string]int // name → the latest generation served
	drops     int            // cache entries dropped (a forget, a retire)
	ops       []*catOp
}

// token is the cache's token for name, as the shell makes it: the
// incarnation cached, or the count of entries dropped.
func (p *catProc) token(name string) string {
	if rec, ok := p.cache[name]; ok {
		return rec.ID()
	}
	return fmt.Sprintf("#%d", p.drops)
}

// catOp is one operation in flight.
type catOp struct {
	n    int
	kind string
	name string
	op   catalogcore.Op
	star string // a create's placement
	// what the operation was for: a trim's or an offset's incarnation (a
	// configure's: the one its first write was for).
	inc   string
	group string
	ret   int // a configure's new options
	// the retired incarnation's ID (await, drained).
	retired string
}

type catWorld struct {
	o     CatalogOptions
	rng   *rand.Rand
	res   *CatalogResult
	trace *xxhash.Digest
	out   io.Writer
	bad   []string

	meta   *metastore.Mem
	procs  []*catProc
	names  []string
	gens   map[string][]string // name → incarnations in commit order
	refs   map[string]int      // stream ID → refs written by absorbs
	minted int
	opsN   int
	budget int

	failBefore, failAfter float64
	maxOps                int // operations in flight per process
}

// RunCatalog runs one seed of the catalogue simulation.
func RunCatalog(o CatalogOptions) *CatalogResult {
	r := rand.New(rand.NewPCG(o.Seed, 0xca7a))
	w := &catWorld{o: o, rng: r, res: &CatalogResult{Seed: o.Seed}, trace: xxhash.New(), out: o.Trace,
		meta: metastore.NewMem(), gens: map[string][]string{}, refs: map[string]int{}}
	w.budget = 40 + r.IntN(120)
	w.maxOps = 2 + r.IntN(5)
	w.failBefore = []float64{0, 0.03, 0.1}[r.IntN(3)]
	w.failAfter = []float64{0, 0.03, 0.1}[r.IntN(3)]
	for i := range 1 {
		w.names = append(w.names, fmt.Sprintf("n%d", i))
	}
	for i, star := range []string{"s1", "s2"} {
		w.procs = append(w.procs, &catProc{i: i, star: star, cache: map[string]catalogcore.Record{}, retired: map[string]bool{},
			admitted: map[string]uint64{}, acked: map[string]uint64{}, absorbed: map[string]uint64{}, servedGen: map[string]int{}})
	}
	w.tracef("plan ops=%d in-flight=%d names=%d fail-before=%v fail-after=%v", w.budget, w.maxOps, len(w.names), w.failBefore, w.failAfter)
	w.run()
	w.res.Trace = w.trace.Sum64()
	w.res.Violations = w.bad
	return w.res
}

func (w *catWorld) tracef(format string, args ...any) {
	line := fmt.Sprintf("%5d ", w.res.Steps) + fmt.Sprintf(format, args...) + "\n"
	_, _ = w.trace.WriteString(line)
	if w.out != nil {
		_, _ = io.WriteString(w.out, line)
	}
}

func (w *catWorld) violation(format string, args ...any) {
	msg := fmt.Sprintf("step %d: ", w.res.Steps) + fmt.Sprintf(format, args...)
	w.tracef("VIOLATION %s", msg)
	if len(w.bad) < 20 {
		w.bad = append(w.bad, msg)
	}
}

// run steps the world until the budget is spent and everything settled.
func (w *catWorld) run() {
	for w.res.Steps < 100_000 {
		w.res.Steps++
		acts := w.actions()
		if len(acts) == 0 {
			break
		}
		acts[w.rng.IntN(len(acts))]()
		w.checkCaches()
	}
	w.settle()
}

// actions lists what may happen next, in a fixed order.
func (w *catWorld) actions() []func() {
	var acts []func()
	for _, p := range w.procs {
		if w.opsN < w.budget && len(p.ops) < 6 {
			acts = append(acts, func() { w.start(p) })
		}
		for _, op := range p.ops {
			if w.executable(p, op) {
				acts = append(acts, func() { w.advance(p, op) })
			}
		}
		for _, id := range sortedIDs(p.admitted) {
			if p.acked[id] < p.admitted[id] {
				acts = append(acts, func() { p.acked[id]++; w.tracef("p%d ack %s seq=%d", p.i, id, p.acked[id]-1) })
			}
			if p.absorbed[id] < p.acked[id] {
				acts = append(acts, func() {
					p.absorbed[id]++
					w.refs[id]++
					w.tracef("p%d absorb %s seq=%d (a ref)", p.i, id, p.absorbed[id]-1)
				})
			}
		}
	}
	if w.opsN < w.budget {
		acts = append(acts, func() { w.retention(w.procs[w.rng.IntN(2)]) })
	}
	return acts
}

func sortedIDs(m map[string]uint64) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// start begins a new operation at p.
func (w *catWorld) start(p *catProc) {
	w.opsN++
	w.res.Ops++
	name := w.names[w.rng.IntN(len(w.names))]
	op := &catOp{n: w.opsN, name: name}
	switch k := w.rng.IntN(11); {
	case k < 3:
		op.kind, op.op = "append", catalogcore.NewLookup(name, p.star, true)
	case k < 5:
		op.kind, op.star = "create", []string{"s1", "s2"}[w.rng.IntN(2)]
		op.op = catalogcore.NewCreate(name, p.star)
	case k < 7:
		op.kind, op.op = "delete", catalogcore.NewDelete(name)
	case k < 8:
		rec, ok := p.cache[name]
		if !ok {
			w.opsN--
			w.res.Ops--
			return
		}
		op.kind, op.inc = "trim", rec.Incarnation
		op.op = catalogcore.NewTrim(name, rec.Incarnation, rec.TrimSeq+1+uint64(w.rng.IntN(5)))
	case k == 10:
		op.kind, op.ret = "configure", 1+w.rng.IntN(9)
		op.op = catalogcore.NewConfigure(name, "", true)
	default:
		// Offsets.Get: the record and the offset, read at once.
		op.group = []string{"g1", "g2"}[w.rng.IntN(2)]
		it, err := w.meta.Get(context.Background(), chain.StreamRecordKey(name))
		if err != nil {
			w.tracef("p%d op%d offset %s: no record", p.i, op.n, name)
			return
		}
		rec := decodeCatRec(it.Value)
		prev := catalogcore.Offset{Group: op.group, Stream: name, Incarnation: rec.Inc, RecordVersion: catalogcore.Version(it.Version)}
		if oit, err := w.meta.Get(context.Background(), w.offsetKey(prev)); err == nil {
			var v catOffset
			_ = json.Unmarshal(oit.Value, &v)
			prev.Next, prev.Version = v.Next, catalogcore.Version(oit.Version)
		}
		next := prev.Next + uint64(w.rng.IntN(4))
		if w.rng.IntN(8) == 0 && prev.Next > 0 {
			next = prev.Next - 1
		}
		op.kind, op.inc = "offset", rec.Inc
		op.op = catalogcore.NewCommitOffset(prev, next)
	}
	p.ops = append(p.ops, op)
	w.tracef("p%d op%d start %s %s", p.i, op.n, op.kind, name)
	w.finishIfDone(p, op)
}

// executable: the operation's pending request can run now (a wait for
// the admitted batches' outcomes waits for the acks).
func (w *catWorld) executable(p *catProc, op *catOp) bool {
	if r, ok := op.op.Next().(catalogcore.AwaitReleased); ok {
		return p.acked[op.retired] >= r.Seq || w.rng.IntN(50) == 0 // or the context ends
	}
	return op.op.Next() != nil
}

// advance executes op's pending request and steps the result.
func (w *catWorld) advance(p *catProc, op *catOp) {
	req := op.op.Next()
	res := w.exec(p, op, req)
	w.tracef("p%d op%d %s => %s", p.i, op.n, req, res)
	if err := op.op.Step(res); err != nil {
		w.violation("p%d op%d: %v", p.i, op.n, err)
		p.ops = slices.DeleteFunc(p.ops, func(o *catOp) bool { return o == op })
		return
	}
	w.finishIfDone(p, op)
}

// finishIfDone checks and records an operation's outcome once it is over.
func (w *catWorld) finishIfDone(p *catProc, op *catOp) {
	if op.op.Next() != nil {
		return
	}
	out := op.op.Outcome()
	w.tracef("p%d op%d %s %s => %s", p.i, op.n, op.kind, op.name, out)
	p.ops = slices.DeleteFunc(p.ops, func(o *catOp) bool { return o == op })
	switch out.Status {
	case catalogcore.Served:
		w.res.Served++
		id := out.Record.ID()
		if p.retired[id] {
			w.violation("p%d served %s, an incarnation it retired", p.i, id)
		}
		gen := w.gen(op.name, out.Record.Incarnation)
		if gen < p.servedGen[op.name] {
			w.violation("p%d served %s (life %d of %s) after life %d", p.i, id, gen, op.name, p.servedGen[op.name])
		}
		p.servedGen[op.name] = max(p.servedGen[op.name], gen)
		if op.kind == "append" {
			// The chain core's admission (refused once retired).
			if p.retired[id] {
				w.res.Refused++
				return
			}
			p.admitted[id]++
			w.tracef("p%d admitted %s seq=%d", p.i, id, p.admitted[id]-1)
		}
	case catalogcore.Created:
		w.res.Created++
	case catalogcore.Deleted:
		w.res.Deleted++
	case catalogcore.Trimmed:
		w.res.Trimmed++
	case catalogcore.Configured:
		w.res.Configured++
	case catalogcore.Committed:
		w.res.Offsets++
	case catalogcore.Conflict:
		w.res.Conflicts++
	}
}

// gen is inc's place (1, 2, ...) among name's incarnations in commit order
// (0: never committed).
func (w *catWorld) gen(name, inc string) int {
	return slices.Index(w.gens[name], inc) + 1
}

// checkCaches: no process caches an incarnation it retired.
func (w *catWorld) checkCaches() {
	for _, p := range w.procs {
		for name, rec := range p.cache {
			if p.retired[rec.ID()] {
				w.violation("p%d caches %s of %s, an incarnation it retired", p.i, rec.ID(), name)
			}
		}
	}
}

// fault draws a metastore failure: before applying (nothing written) or
// after (written, reported failed).
func (w *catWorld) fault() (before, after bool) {
	return w.rng.Float64() < w.failBefore, w.rng.Float64() < w.failAfter
}

var errSimMeta = errors.New("sim: metastore unavailable")

// commit runs ops with faults, recording the incarnations committed;
// applied says whether it applied, whatever it reports.
func (w *catWorld) commit(ops []metastore.Op) (vs []metastore.Version, applied bool, err error) {
	before, after := w.fault()
	if before {
		return nil, false, errSimMeta
	}
	prior := map[string]catRec{} // the records the commit replaces
	for _, o := range ops {
		if it, err := w.meta.Get(context.Background(), o.Key); err == nil && o.Kind == metastore.OpPut && strings.HasPrefix(o.Key, "streams/") {
			prior[o.Key] = decodeCatRec(it.Value)
		}
	}
	vs, err = w.meta.Commit(context.Background(), ops)
	if err == nil {
		for _, o := range ops {
			if o.Kind == metastore.OpPut && strings.HasPrefix(o.Key, "streams/") {
				rec := decodeCatRec(o.Value)
				if old, ok := prior[o.Key]; ok && old.Inc == rec.Inc && rec.Trim < old.Trim {
					w.violation("a write of %s@%s took its trim point back from %d to %d", rec.Name, rec.Inc, old.Trim, rec.Trim)
				}
				if w.gen(rec.Name, rec.Inc) == 0 {
					w.gens[rec.Name] = append(w.gens[rec.Name], rec.Inc)
				} else if o.Expect == metastore.NoVersion {
					w.violation("incarnation %s of %s committed a second time", rec.Inc, rec.Name)
				}
			}
		}
		if after {
			return nil, true, errSimMeta
		}
		return vs, true, nil
	}
	return vs, false, err
}

func (w *catWorld) get(key string) (metastore.Item, error) {
	if before, _ := w.fault(); before {
		return metastore.Item{}, errSimMeta
	}
	return w.meta.Get(context.Background(), key)
}

func decodeCatRec(b []byte) catRec {
	var r catRec
	_ = json.Unmarshal(b, &r)
	return r
}

func coreRec(r catRec, v metastore.Version) catalogcore.Record {
	return catalogcore.Record{Name: r.Name, Incarnation: r.Inc, Nonce: r.Nonce, Star: r.Star, TrimSeq: r.Trim, Version: catalogcore.Version(v), Data: r}
}

type catOffset struct {
	Next  uint64
	Nonce string
}

func (w *catWorld) offsetKey(o catalogcore.Offset) string {
	return "offsets/" + o.Group + "/" + chain.StreamKey(o.Stream) + "/" + o.Incarnation
}

// exec executes one request as the shell would: one call.
func (w *catWorld) exec(p *catProc, op *catOp, req catalogcore.Request) catalogcore.Result {
	switch r := req.(type) {
	case catalogcore.LookupCache:
		rec, ok := p.cache[r.Name]
		return catalogcore.CacheLooked{Hit: ok, Record: rec, Token: p.token(r.Name)}
	case catalogcore.ReadRecord:
		it, err := w.get(chain.StreamRecordKey(r.Name))
		if errors.Is(err, metastore.ErrNotFound) {
			return catalogcore.RecordRead{NotFound: true, Err: err}
		}
		if err != nil {
			return catalogcore.RecordRead{Err: err}
		}
		return catalogcore.RecordRead{Record: coreRec(decodeCatRec(it.Value), it.Version)}
	case catalogcore.CacheRecord:
		if p.retired[r.Record.ID()] {
			return catalogcore.Cached{Retired: true}
		}
		if r.Record.Star != p.star {
			return catalogcore.Cached{}
		}
		cur, ok := p.cache[r.Record.Name]
		switch {
		case ok && cur.ID() == r.Record.ID():
		case r.Expect != "" && r.Expect != p.token(r.Record.Name):
			return catalogcore.Cached{Other: p.token(r.Record.Name)}
		default:
			p.cache[r.Record.Name] = r.Record
		}
		return catalogcore.Cached{}
	case catalogcore.MintRecord:
		w.minted++
		star := p.star
		if op.kind == "create" {
			star = op.star
		}
		rec := catRec{Name: r.Name, Inc: fmt.Sprintf("i%016x", w.minted), Nonce: fmt.Sprintf("nonce%d", w.minted), Star: star}
		return catalogcore.Minted{Record: coreRec(rec, metastore.NoVersion)}
	case catalogcore.CommitCreate:
		val, _ := json.Marshal(r.Record.Data.(catRec))
		_, applied, err := w.commit([]metastore.Op{
			{Kind: metastore.OpPut, Key: chain.StreamRecordKey(r.Record.Name), Value: val, Expect: metastore.NoVersion},
			{Kind: metastore.OpPut, Key: chain.StreamNameKey(r.Record.Name), Value: val, Expect: metastore.NoVersion},
		})
		if applied && len(w.gens[r.Record.Name]) > 1 {
			w.res.Recreated++
		}
		return catalogcore.CommitDone{Err: err, Conflict: errors.Is(err, metastore.ErrConflict)}
	case catalogcore.CommitDelete:
		rec := r.Record.Data.(catRec)
		val, _ := json.Marshal(rec)
		ops := []metastore.Op{
			{Kind: metastore.OpDelete, Key: chain.StreamRecordKey(r.Record.Name), Expect: metastore.Version(r.Record.Version)},
			{Kind: metastore.OpDelete, Key: chain.StreamNameKey(r.Record.Name), Expect: metastore.AnyVersion},
		}
		if r.Marker {
			ops = append(ops, metastore.Op{Kind: metastore.OpPut, Key: chain.DeletedKey(rec.id()), Value: val, Expect: metastore.NoVersion})
		}
		vs, _, err := w.commit(ops)
		res := catalogcore.CommitDone{Err: err, Conflict: errors.Is(err, metastore.ErrConflict)}
		if err == nil && r.Marker {
			res.MarkerVersion = catalogcore.Version(vs[len(ops)-1])
		}
		return res
	case catalogcore.ForgetName:
		if _, ok := p.cache[r.Name]; ok {
			delete(p.cache, r.Name)
			p.drops++
		}
		return catalogcore.Done{}
	case catalogcore.FinishDeletesOf:
		w.finishDeletes(p, chain.DeletedNamePrefix(r.Name), false)
		return catalogcore.Done{}
	case catalogcore.Retire:
		op.retired = r.Record.ID()
		return w.retire(p, r.Record)
	case catalogcore.AwaitReleased:
		if p.acked[op.retired] < r.Seq {
			return catalogcore.Awaited{Err: errors.New("sim: context ended")}
		}
		return catalogcore.Awaited{}
	case catalogcore.CheckDrained:
		return catalogcore.DrainChecked{Drained: p.absorbed[op.retired] == p.admitted[op.retired]}
	case catalogcore.ReadMarker:
		it, err := w.get(chain.DeletedKey(r.Record.Data.(catRec).id()))
		return catalogcore.MarkerRead{Version: catalogcore.Version(it.Version), Err: err}
	case catalogcore.Reclaim:
		if before, _ := w.fault(); before {
			return catalogcore.Reclaimed{Err: errors.New("sim: reclaim failed")}
		}
		w.refs[r.Record.Data.(catRec).id()] = 0
		return catalogcore.Reclaimed{}
	case catalogcore.DeleteMarker:
		before, _ := w.fault()
		if before {
			return catalogcore.MarkerDeleted{Err: errSimMeta}
		}
		err := w.meta.Delete(context.Background(), chain.DeletedKey(r.Record.Data.(catRec).id()), metastore.Version(r.Version))
		return catalogcore.MarkerDeleted{Err: err, NotFound: errors.Is(err, metastore.ErrNotFound), Conflict: errors.Is(err, metastore.ErrConflict)}
	case catalogcore.PutTrim:
		rec := r.Record.Data.(catRec)
		rec.Trim = r.Seq
		val, _ := json.Marshal(rec)
		_, applied, err := w.commit([]metastore.Op{{Kind: metastore.OpPut, Key: chain.StreamRecordKey(rec.Name), Value: val, Expect: metastore.Version(r.Record.Version)}})
		if applied {
			w.checkLanded(op, "trim")
		}
		return catalogcore.TrimPut{Err: err, Conflict: errors.Is(err, metastore.ErrConflict)}
	case catalogcore.PutConfig:
		rec := r.Record.Data.(catRec)
		if op.inc == "" {
			op.inc = rec.Inc // the incarnation read first: every write must land on it
		}
		rec.Ret = op.ret
		val, _ := json.Marshal(rec)
		vs, applied, err := w.commit([]metastore.Op{{Kind: metastore.OpPut, Key: chain.StreamRecordKey(rec.Name), Value: val, Expect: metastore.Version(r.Record.Version)}})
		if applied {
			w.checkLanded(op, "configure")
		}
		res := catalogcore.ConfigPut{Err: err, Conflict: errors.Is(err, metastore.ErrConflict)}
		if err == nil {
			res.Version = catalogcore.Version(vs[0])
		}
		return res
	case catalogcore.CommitOffsetReq:
		w.minted++
		v := catOffset{Next: r.Next, Nonce: fmt.Sprintf("o%d", w.minted)}
		val, _ := json.Marshal(v)
		vs, applied, err := w.commit([]metastore.Op{
			{Kind: metastore.OpCheck, Key: chain.StreamRecordKey(r.Offset.Stream), Expect: metastore.Version(r.Offset.RecordVersion)},
			{Kind: metastore.OpPut, Key: w.offsetKey(r.Offset), Value: val, Expect: metastore.Version(r.Offset.Version)},
		})
		res := catalogcore.OffsetCommitted{Nonce: v.Nonce, Err: err, Conflict: errors.Is(err, metastore.ErrConflict)}
		if err == nil {
			res.Version = catalogcore.Version(vs[1])
		}
		if applied {
			w.checkLanded(op, "offset")
		}
		return res
	case catalogcore.ReadOffset:
		it, err := w.get(w.offsetKey(r.Offset))
		if errors.Is(err, metastore.ErrNotFound) {
			return catalogcore.OffsetRead{}
		}
		if err != nil {
			return catalogcore.OffsetRead{Err: err}
		}
		var v catOffset
		_ = json.Unmarshal(it.Value, &v)
		return catalogcore.OffsetRead{Found: true, Next: v.Next, Nonce: v.Nonce, Version: catalogcore.Version(it.Version)}
	case catalogcore.Warn:
		return catalogcore.Done{}
	}
	w.violation("p%d op%d: unknown request %T", p.i, op.n, req)
	return catalogcore.Done{}
}

// retire ends an incarnation at p: its chain refuses it from now on and the
// cache drops it (if p leads its star).
func (w *catWorld) retire(p *catProc, rec catalogcore.Record) catalogcore.Retired {
	id := rec.ID()
	if cur, ok := p.cache[rec.Name]; ok && cur.ID() == id {
		delete(p.cache, rec.Name)
		p.drops++
	}
	if rec.Star != p.star {
		return catalogcore.Retired{}
	}
	p.retired[id] = true
	return catalogcore.Retired{Served: true, Admitted: p.admitted[id]}
}

// checkLanded: a trim, offset commit or configure that may have applied did so on the
// incarnation its operation was for (the record holds it right now: the
// commit and this check are one instant).
func (w *catWorld) checkLanded(op *catOp, what string) {
	it, err := w.meta.Get(context.Background(), chain.StreamRecordKey(op.name))
	if err != nil {
		w.violation("op%d: a %s of %s@%s applied with no record", op.n, what, op.name, op.inc)
		return
	}
	if rec := decodeCatRec(it.Value); rec.Inc != op.inc {
		w.violation("op%d: a %s of %s@%s landed on incarnation %s", op.n, what, op.name, op.inc, rec.Inc)
	}
}

// retention is p's retention pass: it finishes the deletes of its star
// from their markers.
func (w *catWorld) retention(p *catProc) {
	w.opsN++
	w.tracef("p%d retention pass", p.i)
	w.finishDeletes(p, chain.DeletedPrefix, true)
}

// finishDeletes runs a FinishDelete, inline, for each marker under prefix
// (of p's star only, if ownStar).
func (w *catWorld) finishDeletes(p *catProc, prefix string, ownStar bool) {
	items, err := w.meta.Scan(context.Background(), prefix, "", 1000)
	if err != nil {
		w.violation("scan markers: %v", err)
		return
	}
	for _, it := range items {
		rec := decodeCatRec(it.Value)
		if ownStar && rec.Star != p.star {
			continue
		}
		op := &catOp{n: w.opsN, kind: "finish", name: rec.Name, op: catalogcore.NewFinishDelete(coreRec(rec, ""), catalogcore.Version(it.Version))}
		for req := op.op.Next(); req != nil; req = op.op.Next() {
			res := w.exec(p, op, req)
			w.tracef("p%d finish %s %s => %s", p.i, rec.id(), req, res)
			if err := op.op.Step(res); err != nil {
				w.violation("p%d finish %s: %v", p.i, rec.id(), err)
				break
			}
		}
		w.tracef("p%d finish %s => %s", p.i, rec.id(), op.op.Outcome())
	}
}

// settle lets every chain run dry and both retention passes run, then
// checks that no deleted incarnation whose marker is gone left a ref.
func (w *catWorld) settle() {
	for _, p := range w.procs {
		for _, id := range sortedIDs(p.admitted) {
			for p.absorbed[id] < p.admitted[id] {
				p.absorbed[id]++
				w.refs[id]++
			}
			p.acked[id] = p.admitted[id]
		}
	}
	saved := w.failBefore
	w.failBefore, w.failAfter = 0, 0
	for _, p := range w.procs {
		w.retention(p)
	}
	w.failBefore = saved
	live := map[string]bool{}
	items, _ := w.meta.Scan(context.Background(), "streams/", "", 1000)
	for _, it := range items {
		live[decodeCatRec(it.Value).id()] = true
	}
	markers := map[string]bool{}
	items, _ = w.meta.Scan(context.Background(), chain.DeletedPrefix, "", 1000)
	for _, it := range items {
		markers[decodeCatRec(it.Value).id()] = true
	}
	ids := make([]string, 0, len(w.refs))
	for id := range w.refs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if w.refs[id] > 0 && !live[id] && !markers[id] {
			w.violation("deleted incarnation %s left %d refs and no marker", id, w.refs[id])
		}
	}
	for _, id := range ids {
		if live[id] && markers[id] {
			w.violation("incarnation %s is live and has a deleted marker", id)
		}
	}
}
