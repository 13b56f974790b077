package loglet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/loglet/internal/catalogcore"
	"github.com/flightlog/flightlog/metastore"
)

// Stream trim, retention and the reclaim of a deleted stream's data.
//
// A stream's record carries its trim point (streamRecord.TrimSeq): records
// below it are unreadable, through every read path of every process. Trim
// raises it by CAS on the record first and reclaims second: it deletes the
// refs that end at or below the trim point and the settled objects behind
// them. Chain slots (transit data) are shared between streams and are never
// deleted here: the settler repoints what is live and trims the slots. A
// reclaim that fails leaves a correct state (the records are unreadable
// already) and is retried by the next Trim of the stream, or by the
// leader's retention pass, which retries every failed reclaim. A deleted
// incarnation's reclaim works off its durable marker (catalogue.go).

// Retention bounds what a stream keeps (StreamOptions.Retention). The
// leader's retention pass (every Config.RetentionInterval, default a minute)
// trims each stream of its star that has one. Zero fields are off, and so
// is retention by default. Star.ConfigureStream changes a stream's
// retention after creation, from any process: the leader's next pass
// applies it.
type Retention struct {
	// MaxAge trims records whose timestamp is older than now − MaxAge
	// (by record timestamp, the first record at or after the cutoff
	// being the new trim point).
	MaxAge time.Duration
	// MaxBytes keeps about the newest MaxBytes of record bytes. It is an
	// estimate from the refs' decoded frame lengths (and the unabsorbed
	// flights' payloads), and trims at frame-run granularity, so a stream
	// keeps a little more than MaxBytes, never less. (Settled history's
	// frames hold up to 256 KiB each, so a stream whose MaxBytes is about
	// that small keeps up to a frame more.)
	MaxBytes int64
}

func (r Retention) on() bool { return r.MaxAge > 0 || r.MaxBytes > 0 }

// retention is the record's retention.
func (r streamRecord) retention() Retention {
	return Retention{MaxAge: time.Duration(r.RetentionMaxAgeMs) * time.Millisecond, MaxBytes: r.RetentionMaxBytes}
}

// trimRefresh bounds how stale this process's view of a stream's trim
// point may be when another process (the CLI, say) trimmed it: a leader's
// read re-reads the stream record when its cached trim point is older than
// this, and a read session re-reads it when it opens.
const trimRefresh = 5 * time.Second

// trims is a Star's cache of trim points and retention by stream ID, the
// reclaims to retry, and the retention loop.
type trims struct {
	mu      sync.Mutex
	byID    map[string]*trimEntry
	pending map[string]uint64 // stream ID → reclaim up to (a trim's; a delete's are its marker's)
	// gen is the star's catalogue generation as the last retention pass
	// read it before refreshing the retention it holds (genOK: it did,
	// every record read), see refreshRetention.
	gen   catalogGen
	genOK bool

	stop context.CancelFunc
	done chan struct{}
}

type trimEntry struct {
	seq     uint64
	ret     Retention
	checked time.Time
}

// observe records what rec says, as of now: the trim point only grows.
func (t *trims) observe(rec streamRecord, now time.Time) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID == nil {
		t.byID = map[string]*trimEntry{}
	}
	e := t.byID[rec.id()]
	if e == nil {
		e = &trimEntry{}
		t.byID[rec.id()] = e
	}
	e.seq = max(e.seq, rec.TrimSeq)
	e.ret = rec.retention()
	e.checked = now
	return e.seq
}

// reconfigured records rec's retention, as this process just wrote it
// (ConfigureStream), if it holds the stream: its next retention pass
// applies it.
func (t *trims) reconfigured(rec streamRecord, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.byID[rec.id()]; e != nil {
		e.seq = max(e.seq, rec.TrimSeq)
		e.ret = rec.retention()
		e.checked = now
	}
}

// cached returns the cached trim point of id and whether it is fresh.
func (t *trims) cached(id string, now time.Time) (uint64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.byID[id]
	if e == nil {
		return 0, false
	}
	return e.seq, now.Sub(e.checked) < trimRefresh
}

func (t *trims) forget(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.byID, id)
}

func (t *trims) retry(id string, upTo uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending == nil {
		t.pending = map[string]uint64{}
	}
	t.pending[id] = max(t.pending[id], upTo)
}

func (t *trims) cleared(id string, upTo uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending[id] <= upTo {
		delete(t.pending, id)
	}
}

// trimFloor is the first readable seq of st as this process knows it: the
// cached trim point, re-read from the stream record when it is older than
// trimRefresh (or always, if fresh is set). A failed re-read keeps the
// cached value: the records below it stay unreadable whatever happens.
func (s *Star) trimFloor(ctx context.Context, st *streamState, fresh bool) uint64 {
	now := time.Now()
	seq, ok := s.trims.cached(st.id, now)
	if ok && !fresh {
		return seq
	}
	if got, ok, _ := s.rereadRecord(ctx, st, now); ok {
		return got
	}
	return seq
}

// rereadRecord reads st's record and caches its trim point and retention,
// as of now, returning the trim point; ok is false if the read failed, or
// the record is another incarnation's or none: then gone says the
// incarnation is deleted (the read path's lookups say so), not that the
// read failed.
func (s *Star) rereadRecord(ctx context.Context, st *streamState, now time.Time) (seq uint64, ok, gone bool) {
	it, err := s.cfg.Meta.Get(ctx, chain.StreamRecordKey(st.name))
	if errors.Is(err, metastore.ErrNotFound) {
		return 0, false, true
	}
	if err != nil {
		return 0, false, false
	}
	rec, _, err := decodeStreamRecord(it)
	if err != nil {
		return 0, false, false
	}
	if rec.id() != st.id {
		return 0, false, true
	}
	return s.trims.observe(rec, now), true, false
}

// Trim makes the records of stream below seq unreadable, at once through
// this process and through every Reader (which reads the stream record on
// every Read and session). Another leader of the stream sees it within
// trimRefresh (5s), and a read session opened after Trim returns sees it at
// once. A read starting below the trim point returns from it (the first
// readable record); no read returns a record below it.
//
// The trim point only grows: a seq at or below the current one is a no-op,
// and a seq past the stream's durable tail is clamped to the tail (a trim
// never reaches records not yet written). It is recorded in the stream
// record by CAS; then the refs wholly below it and the settled objects
// behind them are deleted. Trim returns nil once the trim point is
// recorded: a failed reclaim is logged and retried by the next Trim and by
// the leader's retention pass (the records are unreadable meanwhile).
//
// The stream must be on this star: otherwise a *NotLeaderError, and an
// unknown stream is ErrStreamNotFound.
func (s *Star) Trim(ctx context.Context, name string, seq uint64) error {
	if ctx == nil {
		return ErrNilContext
	}
	if s.isClosed() {
		return fmt.Errorf("loglet: trim stream %q: %w", name, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	st, err := s.stream(ctx, name)
	if err != nil {
		return err
	}
	trimSeq, err := s.raiseTrim(ctx, st, seq)
	if err != nil {
		return err
	}
	s.reclaimOrRetry(ctx, st.id, trimSeq)
	return nil
}

// raiseTrim sets the stream record's TrimSeq to max(its own, seq clamped to
// the durable tail) by CAS, updates the cache and returns the trim point.
// The decisions (same incarnation only, retries on conflict) are
// catalogcore.Trim's.
func (s *Star) raiseTrim(ctx context.Context, st *streamState, seq uint64) (uint64, error) {
	seq = min(seq, st.view().durable.Seq)
	_, inc := chain.SplitStreamID(st.id)
	out := s.runCatalog(ctx, catalogcore.NewTrim(st.name, inc, seq), &catalogRun{name: st.name})
	switch out.Status {
	case catalogcore.Trimmed:
		rec := out.Record.Data.(recordData).rec
		rec.TrimSeq = out.Seq
		if out.Wrote {
			s.log.Info("stream trimmed", "stream", st.name, "trim_seq", out.Seq)
		}
		return s.trims.observe(rec, time.Now()), nil
	case catalogcore.NotFound:
		if out.Record.Name != "" {
			return 0, fmt.Errorf("%w: %q was deleted (and created again)", ErrStreamNotFound, st.name)
		}
		return 0, fmt.Errorf("%w: %q", ErrStreamNotFound, st.name)
	case catalogcore.Corrupt:
		return 0, out.Err
	}
	if out.Attempts > 0 {
		// Not known to have applied: the cache keeps the old point, and a
		// retry finds out (a CAS to the same point is a no-op).
		return 0, fmt.Errorf("loglet: trim stream %q to %d: %w", st.name, seq, out.Err)
	}
	return 0, fmt.Errorf("loglet: trim stream %q: %w", st.name, out.Err)
}

// reclaimOrRetry reclaims id's data below upTo, queueing a retry on failure.
func (s *Star) reclaimOrRetry(ctx context.Context, id string, upTo uint64) {
	if err := s.reclaim(ctx, id, upTo); err != nil {
		s.log.Warn("reclaiming trimmed data failed; the retention pass retries", "stream", nameOfID(id), "up_to", upTo, "err", err)
		s.trims.retry(id, upTo)
		return
	}
	s.trims.cleared(id, upTo)
}

// reclaim deletes every ref of id that ends below upTo (by CAS on its
// version) and, before each, the settled objects it points at from the
// Standard bucket set, except any the first surviving ref points into (an
// object spanning upTo). The stream's last ref is always kept, even below
// upTo: it carries the absorbed tail, which a successor (and a Reader)
// learns from the refs (the simulation found a trim past the absorbed tail
// that deleted it: the successor then learned an older tail and its walk
// could never continue the stream). Transit slots are left to the settler.
// It is idempotent, and ^uint64(0) reclaims every ref of the incarnation.
func (s *Star) reclaim(ctx context.Context, id string, upTo uint64) error {
	prefix := chain.RefPrefix(id)
	settledPrefix := chain.SettledPrefixKey(id)
	for round := 0; round < 4; round++ {
		var doomed []metastore.Item
		var refs []absorb.SpanRef
		keep := map[string]bool{}
		after := ""
		later := false // a ref past the ones to reclaim exists
	scan:
		for {
			items, err := s.cfg.Meta.Scan(ctx, prefix, after, 256)
			if err != nil {
				return err
			}
			n := len(items)
			items = refsOf(id, items)
			for _, it := range items {
				ref, err := absorb.DecodeRef(it.Value)
				if err != nil {
					return &CorruptError{Object: "ref " + it.Key, Err: err}
				}
				if ref.End >= upTo {
					for _, e := range ref.Extents {
						keep[e.Key] = true
					}
					later = true
					break scan
				}
				doomed, refs = append(doomed, it), append(refs, ref)
			}
			if n < 256 || len(items) < n {
				break
			}
			after = items[n-1].Key
		}
		if !later && len(doomed) > 0 && upTo != ^uint64(0) {
			// The stream's last ref carries its absorbed tail, which a
			// successor (and a Reader) learns from the refs: keep it even
			// below the trim point (the trim may reach records not absorbed
			// yet, whose refs come later).
			last := refs[len(refs)-1]
			for _, e := range last.Extents {
				keep[e.Key] = true
			}
			doomed, refs = doomed[:len(doomed)-1], refs[:len(refs)-1]
		}
		if len(doomed) == 0 {
			return nil
		}
		conflicts := 0
		for i, it := range doomed {
			seen := map[string]bool{}
			for _, e := range refs[i].Extents {
				if !chain.IsSettledKey(e.Key) || !strings.HasPrefix(e.Key, settledPrefix) || keep[e.Key] || seen[e.Key] {
					continue
				}
				seen[e.Key] = true
				for _, b := range s.cfg.Standard.Stores {
					if err := b.Delete(ctx, e.Key); err != nil {
						return fmt.Errorf("delete settled object %s: %w", e.Key, err)
					}
				}
			}
			err := s.cfg.Meta.Delete(ctx, it.Key, it.Version)
			if errors.Is(err, metastore.ErrConflict) {
				conflicts++ // the settler repointed it meanwhile: scan again
				continue
			}
			if err != nil {
				return fmt.Errorf("delete ref %s: %w", it.Key, err)
			}
		}
		if conflicts == 0 {
			return nil
		}
	}
	return fmt.Errorf("refs of %q below %d kept changing under the reclaim", nameOfID(id), upTo)
}

// startRetention starts the leader's retention loop (unless disabled).
func (s *Star) startRetention() {
	if s.cfg.RetentionInterval < 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.trims.stop, s.trims.done = cancel, make(chan struct{})
	go func() {
		defer close(s.trims.done)
		t := time.NewTicker(s.cfg.RetentionInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				s.runRetention(ctx, now)
			}
		}
	}()
}

// deposed reports that a successor has sealed or taken every chain this
// star leads: it leads nothing any more.
func (s *Star) deposed() bool {
	leads := false
	for i := range s.lanes {
		l := s.lanes[i].Load()
		if l == nil {
			continue
		}
		leads = true
		if f := l.deadFate(); f == nil || f.Deposed == nil {
			return false
		}
	}
	return leads
}

// stopRetention stops the loop and waits for a pass under way to end.
func (s *Star) stopRetention() {
	if s.trims.stop != nil {
		s.trims.stop()
		<-s.trims.done
	}
}

// runRetention is one retention pass as of now: it finishes the deletes of
// this star's streams (their markers: see catalogue.go), retries failed
// reclaims, then trims every stream of this star that has retention, by age
// and by bytes (see Retention): first those cached with retention, then
// refreshRetention, then those it turned on or cached (loadRetained: Open
// loads no record). Errors are logged; the next
// pass tries again.
//
// The streams with retention come before the refresh, which reads a record
// per stream without retention: the simulation found a star of 2,000
// streams whose refresh took two minutes (at 18 ms a read, one at a time)
// and so held retention back from every stream for that long, past the
// interval, and past the final reads of a run that had waited 90 s for
// retention to settle.
func (s *Star) runRetention(ctx context.Context, now time.Time) {
	if s.deposed() {
		// Its successor runs retention now; a pass here would only repeat
		// the successor's reads and trims, pass after pass, for as long as
		// the host keeps the deposed Star open.
		return
	}
	if !s.isClosed() {
		s.finishDeletes(ctx, chain.DeletedPrefix, true)
	}
	s.trims.mu.Lock()
	pending := make(map[string]uint64, len(s.trims.pending))
	for id, upTo := range s.trims.pending {
		pending[id] = upTo
	}
	s.trims.mu.Unlock()
	for id, upTo := range pending {
		s.reclaimOrRetry(ctx, id, upTo)
	}
	s.mu.RLock()
	var sts []*streamState
	for _, st := range s.streams {
		sts = append(sts, st)
	}
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return
	}
	done := make(map[*streamState]bool, len(sts))
	s.retainAll(ctx, sts, done, now)
	if s.refreshRetention(ctx, sts, now) {
		// It cached streams with a retention: trim them too.
		s.mu.RLock()
		sts = make([]*streamState, 0, len(s.streams))
		for _, st := range s.streams {
			sts = append(sts, st)
		}
		s.mu.RUnlock()
	}
	s.retainAll(ctx, sts, done, now)
}

// retainAll applies retention as of now to each stream of sts that has it
// (as cached) and is not done, marking it done.
func (s *Star) retainAll(ctx context.Context, sts []*streamState, done map[*streamState]bool, now time.Time) {
	for _, st := range sts {
		if ctx.Err() != nil {
			return
		}
		if done[st] || st.lane == nil || !s.trims.retained(st.id) {
			continue
		}
		done[st] = true
		if err := s.retain(ctx, st, now); err != nil {
			s.log.Warn("retention pass failed for a stream", "stream", st.name, "err", err)
		}
	}
}

// retained reports that id's cached retention is on.
func (t *trims) retained(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.byID[id]
	return e != nil && e.ret.on()
}

// refreshParallel bounds the record reads a retention refresh has in
// flight: a star of thousands of streams is re-read in about
// streams / refreshParallel metastore round trips.
const refreshParallel = 16

// refreshRetention re-reads the records of the streams of sts whose
// cached retention is off, when the star's catalogue generation moved
// since the last pass read it (and at the first pass): a ConfigureStream
// by another process puts the generation with the record, so the pass
// after it sees a retention turned on. Then too it scans the star's
// records for the streams with a retention that are not cached
// (loadRetained: Open loads no record), and reports whether it read the
// records. (A stream with retention re-reads
// its record at every pass anyway: retain.) The generation is read before
// the records, and recorded only once every record read succeeded, so a
// change is never skipped; while it stands still, a pass reads nothing more
// than the generation. A record found deleted (none, or another
// incarnation's) is no failure: there is no retention to refresh, and
// counting it one made every later pass re-read every record, the
// generation standing still or not, as long as the deleted stream stayed
// cached. Each trim and delete of the star moves it too, so under
// retention that trims every pass, a pass reads each record once, up to
// refreshParallel at a time.
func (s *Star) refreshRetention(ctx context.Context, sts []*streamState, now time.Time) bool {
	it, err := s.cfg.Meta.Get(ctx, chain.CatalogGenKey(s.cfg.Star))
	g := catalogGen{found: err == nil, version: it.Version, value: string(it.Value)}
	ok := err == nil || errors.Is(err, metastore.ErrNotFound)
	s.trims.mu.Lock()
	same := ok && s.trims.genOK && s.trims.gen == g
	s.trims.mu.Unlock()
	if same {
		return false
	}
	if !s.loadRetained(ctx) {
		ok = false
	}
	var (
		wg     sync.WaitGroup
		failed atomic.Bool
		slots  = make(chan struct{}, refreshParallel)
	)
	for _, st := range sts {
		if ctx.Err() != nil {
			failed.Store(true)
			break
		}
		if st.lane == nil || s.trims.retained(st.id) {
			continue
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			if _, read, gone := s.rereadRecord(ctx, st, now); !read && !gone {
				failed.Store(true) // the next pass reads again
			}
		}()
	}
	wg.Wait()
	if failed.Load() {
		ok = false
	}
	s.trims.mu.Lock()
	s.trims.gen, s.trims.genOK = g, ok
	s.trims.mu.Unlock()
	return true
}

// retain applies st's retention as of now.
func (s *Star) retain(ctx context.Context, st *streamState, now time.Time) error {
	floor := s.trimFloor(ctx, st, true)
	s.trims.mu.Lock()
	e := s.trims.byID[st.id]
	var ret Retention
	if e != nil {
		ret = e.ret
	}
	s.trims.mu.Unlock()
	cut := floor
	if ret.MaxAge > 0 {
		seq, err := s.resolve(ctx, st, AtTimestamp(now.Add(-ret.MaxAge).UnixMilli()))
		if err != nil {
			return err
		}
		cut = max(cut, seq)
	}
	if ret.MaxBytes > 0 {
		seq, err := s.byteCut(ctx, st, floor, ret.MaxBytes)
		if err != nil {
			return err
		}
		cut = max(cut, seq)
	}
	if cut <= floor {
		return nil
	}
	trimSeq, err := s.raiseTrim(ctx, st, cut)
	if err != nil {
		return err
	}
	s.reclaimOrRetry(ctx, st.id, trimSeq)
	return nil
}

// byteCut is the highest seq at or past floor from which st still holds at
// least maxBytes (estimated: the decoded lengths of the refs' frame runs at or
// past floor, and the unabsorbed flights' payloads), cut at a frame run's
// boundary.
func (s *Star) byteCut(ctx context.Context, st *streamState, floor uint64, maxBytes int64) (uint64, error) {
	v := st.view()
	var total int64
	for _, b := range v.entries {
		total += int64(len(b.Payload))
	}
	type run struct {
		end   uint64
		bytes int64
	}
	var runs []run
	prefix := chain.RefPrefix(st.id)
	after := chain.RefKey(st.id, floor)
	for {
		items, err := s.cfg.Meta.Scan(ctx, prefix, after, 256)
		if err != nil {
			return 0, err
		}
		n := len(items)
		items = refsOf(st.id, items)
		for _, it := range items {
			ref, err := absorb.DecodeRef(it.Value)
			if err != nil {
				return 0, &CorruptError{Object: "ref " + it.Key, Err: err}
			}
			for _, e := range ref.Extents {
				end := e.FirstSeq + uint64(e.Count)
				if end <= floor || e.FirstSeq >= v.start {
					continue // trimmed, or in the flight index (counted above)
				}
				runs = append(runs, run{end, int64(e.RawLength)})
				total += int64(e.RawLength)
			}
		}
		if n < 256 || len(items) < n {
			break
		}
		after = items[n-1].Key
	}
	cut := floor
	for _, r := range runs {
		if total-r.bytes < maxBytes {
			break // dropping this run would keep less than maxBytes
		}
		total -= r.bytes
		cut = r.end
	}
	return cut, nil
}
