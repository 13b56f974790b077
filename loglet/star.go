package loglet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/internal/invariants"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// Star is one star led by this process: a lane (chain) per configured
// class, the streams placed on the star, and their flight indexes. It
// implements Loglet. All methods are safe for concurrent use.
type Star struct {
	cfg   Config
	log   *slog.Logger
	lanes [2]*lane // by Class; nil when the class is disabled
	hist  *history

	mu      sync.RWMutex
	streams map[string]*streamState
	closed  bool

	closing   chan struct{} // closed by Close: wakes read sessions
	trims     trims         // trim points, retention and its loop (trim.go)
	closeOnce sync.Once
	closeErr  error
	// release closes what OpenDir opened for this star (its bbolt file),
	// after the chains have closed, in reverse order.
	release []func() error
}

var _ Loglet = (*Star)(nil)

// streamRecord is the value at streams/<stream-key>.
type streamRecord struct {
	Name    string `json:"name"`
	Class   string `json:"class"`
	Star    string `json:"star"`
	Created int64  `json:"created_ms"`
	Owner   string `json:"owner"` // who created it
	Nonce   string `json:"nonce"` // unique per CreateStream call: recognises our own write after an ambiguous failure
	// Incarnation is minted at creation (chain.NewIncarnation): the
	// stream's frames, refs and tails are keyed by name and incarnation
	// (chain.StreamID), so a name created again is a fresh stream. Empty in
	// records written before incarnations existed.
	Incarnation string `json:"incarnation,omitempty"`
	// TrimSeq: records below it are unreadable (Star.Trim), and their refs
	// and settled objects are reclaimed. It only grows.
	TrimSeq uint64 `json:"trim_seq,omitempty"`
	// Retention (StreamOptions.Retention), 0 = off.
	RetentionMaxAgeMs int64 `json:"retention_max_age_ms,omitempty"`
	RetentionMaxBytes int64 `json:"retention_max_bytes,omitempty"`
}

// id is the stream's ID (chain.StreamID).
func (r streamRecord) id() string { return chain.StreamID(r.Name, r.Incarnation) }

// decodeStreamRecord parses a stream record.
func decodeStreamRecord(it metastore.Item) (streamRecord, Class, error) {
	var rec streamRecord
	if err := json.Unmarshal(it.Value, &rec); err != nil {
		return rec, 0, fmt.Errorf("loglet: stream record %s is corrupt: %v", it.Key, err)
	}
	if !chain.ValidIncarnation(rec.Incarnation) {
		return rec, 0, fmt.Errorf("loglet: stream record %s is corrupt: incarnation %q", it.Key, rec.Incarnation)
	}
	c, err := chain.ParseClass(rec.Class)
	if err != nil {
		return rec, 0, fmt.Errorf("loglet: stream record %s: %w", it.Key, err)
	}
	return rec, c, nil
}

// Open starts leading cfg.Star. For each configured class it mints the
// chain's first epoch, or takes the chain over from its previous owner: after
// a clean Close straight from the recorded seal; after a crash (or from a
// live leader, which is then deposed) by sealing the checkpoint, fencing the
// old epoch, minting the next, poisoning the old epoch's window past the cut
// and walking every committed slot below it. Every stream continues from its
// tail. If another process wins the mint, Open fails with ErrTakeoverLost.
func Open(ctx context.Context, cfg Config) (*Star, error) {
	if ctx == nil {
		return nil, ErrNilContext
	}
	cfg.applyDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := preflight(ctx, &cfg); err != nil { // see preflight.go
		return nil, fmt.Errorf("loglet: open star %s: %w", cfg.Star, err)
	}
	s := &Star{
		cfg: cfg, log: cfg.Logger,
		streams: map[string]*streamState{},
		closing: make(chan struct{}),
		hist:    &history{meta: cfg.Meta, sets: [2][]objstore.Store{cfg.Standard.Buckets, cfg.Express.Buckets}, frames: newFrameCache(cacheBytes(cfg.ReadCacheMiB))},
	}
	if cfg.RefuseLiveOwner {
		// Check every chain before taking any, so that a refusal leaves
		// nothing taken over. (The core checks again as it reads the
		// epoch record, should one change in between.)
		for _, c := range chain.Classes {
			if cc := s.classConfig(c); len(cc.Buckets) > 0 {
				if err := s.checkLiveOwner(ctx, c); err != nil {
					return nil, fmt.Errorf("loglet: open star %s: %w", cfg.Star, err)
				}
			}
		}
	}
	opened, err := s.openChains(ctx)
	if err != nil {
		for _, l := range s.lanes {
			if l != nil {
				l.crash()
			}
		}
		return nil, fmt.Errorf("loglet: open star %s: %w", cfg.Star, err)
	}
	if err := s.loadStreams(ctx); err != nil {
		s.Close(context.Background())
		return nil, err
	}
	s.startRetention()
	s.log.Info("star open", "star", cfg.Star, "owner", cfg.Owner, "standard_epoch", opened[Standard].Epoch, "express_epoch", opened[Express].Epoch)
	return s, nil
}

// openChains opens the star's chains one after the other, Standard first.
// The first chain is the star's lock: a candidate that loses its takeover
// stops there. A later chain lost to a rival is taken again while this
// process still holds the first (the rival, deposed from it, gives up when
// it checks), and the opening fails if a rival took the first meanwhile.
// So two processes opening one star at once end with one of them holding
// every chain, not with each holding one.
func (s *Star) openChains(ctx context.Context) ([2]chaincore.Opened, error) {
	var opened [2]chaincore.Opened
	var first Class
	haveFirst, chains := false, 0
	for _, c := range chain.Classes {
		cc := s.classConfig(c)
		if len(cc.Buckets) == 0 {
			continue
		}
		chains++
		for attempt := 1; ; attempt++ {
			l := newLane(s, c, *cc)
			s.lanes[c] = l
			o, err := l.awaitOpen(ctx)
			opened[c] = o
			if err == nil {
				break
			}
			if !haveFirst || !errors.Is(err, chaincore.ErrTakeoverLost) || attempt >= maxChainRetakes {
				return opened, s.openError(c, err)
			}
			held, herr := s.holds(ctx, first, opened[first].Epoch)
			if herr != nil || !held {
				return opened, errors.Join(s.openError(c, err), herr)
			}
			l.crash()
			s.lanes[c] = nil
			s.log.Info("lost a chain's takeover to a rival while holding the star's first chain; taking it again",
				"star", s.cfg.Star, "class", c.String(), "first", first.String(), "attempt", attempt, "err", err)
		}
		if o := opened[c]; o.TakeOver {
			s.lanes[c].log.Info("took over", "from_epoch", o.PrevEpoch, "from_owner", o.PrevOwner, "epoch", o.Epoch, "cut", o.FencedCut, "clean", o.Clean, "walked_slots", o.Walked, "took", o.Took)
		}
		if !haveFirst {
			first, haveFirst = c, true
		}
	}
	if chains > 1 {
		held, err := s.holds(ctx, first, opened[first].Epoch)
		if err != nil {
			return opened, fmt.Errorf("loglet: check the %s chain is still ours: %w", first, err)
		}
		if !held {
			return opened, fmt.Errorf("%w: %s: a rival took the chain over while this process opened the others", ErrTakeoverLost, first)
		}
	}
	return opened, nil
}

// maxChainRetakes bounds the takeovers of one later chain in an opening.
const maxChainRetakes = 4

// holds reports whether this process still leads chain c at epoch: the
// epoch record is its, and the checkpoint carries no candidate's seal.
func (s *Star) holds(ctx context.Context, c Class, epoch uint64) (bool, error) {
	rec, _, err := chain.ReadEpoch(ctx, s.cfg.Meta, s.cfg.Star, c)
	if err != nil {
		return false, err
	}
	if rec.Epoch != epoch || rec.Owner != s.cfg.Owner {
		return false, nil
	}
	cp, _, err := absorb.ReadCheckpoint(ctx, s.cfg.Meta, s.cfg.Star, c)
	if err != nil {
		return false, err
	}
	return cp.Owner == s.cfg.Owner && cp.OwnerEpoch == epoch, nil
}

// openError turns a chain's opening failure into the loglet's error.
func (s *Star) openError(c Class, err error) error {
	switch {
	case errors.Is(err, chaincore.ErrTakeoverLost):
		return fmt.Errorf("%w: %s: %v", ErrTakeoverLost, c, err)
	case errors.Is(err, chaincore.ErrLiveOwner):
		return fmt.Errorf("%w: %s: %v", ErrLiveOwner, c, err)
	}
	return err
}

// checkLiveOwner fails with ErrLiveOwner if chain c's current epoch has a
// live owner other than this process (see Config.RefuseLiveOwner).
func (s *Star) checkLiveOwner(ctx context.Context, c Class) error {
	rec, _, err := chain.ReadEpoch(ctx, s.cfg.Meta, s.cfg.Star, c)
	if errors.Is(err, metastore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if chaincore.LiveOwner(rec, s.cfg.Owner) {
		return fmt.Errorf("%w: %s/%s is at epoch %d, owned by %q and not sealed cleanly (it is running, or it crashed without a clean Close)", ErrLiveOwner, s.cfg.Star, c, rec.Epoch, rec.Owner)
	}
	return nil
}

func (s *Star) classConfig(c Class) *ClassConfig {
	if c == Express {
		return &s.cfg.Express
	}
	return &s.cfg.Standard
}

// loadStreams reads every stream record placed on this star, so appends to
// known streams never touch the metastore.
func (s *Star) loadStreams(ctx context.Context) error {
	after := ""
	for {
		items, err := s.cfg.Meta.Scan(ctx, "streams/", after, 1000)
		if err != nil {
			return fmt.Errorf("loglet: load streams: %w", err)
		}
		for _, it := range items {
			rec, c, err := decodeStreamRecord(it)
			if err != nil {
				return err
			}
			if rec.Star != s.cfg.Star {
				continue
			}
			// The chains serve already: a settle pass may look a stream
			// up. (Nothing is retired yet: no delete has run here.)
			if _, err := s.cache(rec, c); err != nil && !errors.Is(err, ErrStreamNotFound) {
				return err
			}
		}
		if len(items) < 1000 {
			return nil
		}
		after = items[len(items)-1].Key
	}
}

// StreamOptions configure CreateStream.
type StreamOptions struct {
	Class Class
	// Star places the stream explicitly; "" places it by hash over
	// Config.Stars.
	Star string
	// Retention trims the stream by age and by bytes (see Retention); the
	// zero value keeps everything.
	Retention Retention
}

// StreamInfo describes a stream.
type StreamInfo struct {
	Name  string
	Class Class
	Star  string
	// Incarnation names this life of the stream: a stream deleted and
	// created again under the same name has a new one ("" for streams
	// created before incarnations existed).
	Incarnation string
	// Retention is the stream's retention as created.
	Retention Retention
}

// CreateStream records a new stream in the metastore, as a new
// incarnation: a name deleted before starts afresh at seq 0, and no record
// of its old incarnation is readable through the new one. It fails with
// ErrStreamExists if the name is taken, and with ErrInvalidStreamName for a
// name no stream can have, or any of whose keys would not fit a backend's
// key limit (over 463 bytes, each byte outside [A-Za-z0-9._-] counting 3).
func (s *Star) CreateStream(ctx context.Context, name string, opts StreamOptions) (StreamInfo, error) {
	if ctx == nil {
		return StreamInfo{}, ErrNilContext
	}
	if s.isClosed() {
		return StreamInfo{}, fmt.Errorf("loglet: create stream %q: %w", name, ErrClosed)
	}
	if err := checkNewStreamName(name); err != nil {
		return StreamInfo{}, err
	}
	if opts.Class != Standard && opts.Class != Express {
		return StreamInfo{}, fmt.Errorf("loglet: stream %q: unknown class %v", name, opts.Class)
	}
	if opts.Retention.MaxAge < 0 || opts.Retention.MaxBytes < 0 {
		return StreamInfo{}, fmt.Errorf("loglet: stream %q: negative retention %+v", name, opts.Retention)
	}
	star := opts.Star
	if star == "" {
		star = chain.PlaceStream(name, s.cfg.Stars)
	}
	if err := chain.ValidateStarName(star); err != nil {
		return StreamInfo{}, fmt.Errorf("loglet: stream %q: %w", name, err)
	}
	if star == s.cfg.Star && s.lanes[opts.Class] == nil {
		return StreamInfo{}, fmt.Errorf("loglet: stream %q: %w: %s", name, ErrClassDisabled, opts.Class)
	}
	rec := streamRecord{Name: name, Class: opts.Class.String(), Star: star, Created: time.Now().UnixMilli(), Owner: s.cfg.Owner,
		Nonce: envelope.NewNonce().String(), Incarnation: chain.NewIncarnation(),
		RetentionMaxAgeMs: opts.Retention.MaxAge.Milliseconds(), RetentionMaxBytes: opts.Retention.MaxBytes}
	if opts.Retention.MaxAge > 0 && rec.RetentionMaxAgeMs == 0 {
		rec.RetentionMaxAgeMs = 1 // under a millisecond: the smallest age a record keeps
	}
	if invariants.RecreateReusesKeys.On() {
		rec.Incarnation = "i" + strings.Repeat("0", chain.IncarnationLen-1)
	}
	val, _ := json.Marshal(rec)
	key := chain.StreamRecordKey(name)
	// The record and its entry in the name index, together.
	_, err := s.cfg.Meta.Commit(ctx, []metastore.Op{
		{Kind: metastore.OpPut, Key: key, Value: val, Expect: metastore.NoVersion},
		{Kind: metastore.OpPut, Key: chain.StreamNameKey(name), Value: val, Expect: metastore.NoVersion},
	})
	if err != nil {
		// A conflict may be our own ambiguous earlier attempt; re-read.
		it, gerr := s.cfg.Meta.Get(ctx, key)
		var got streamRecord
		if gerr != nil && !errors.Is(gerr, metastore.ErrNotFound) {
			// Not known whether the name was free: never report it taken
			// on a guess (the host's retry learns which).
			return StreamInfo{}, fmt.Errorf("loglet: create stream %q: %w (and the re-read to learn whether it applied failed: %v)", name, err, gerr)
		}
		if gerr != nil || json.Unmarshal(it.Value, &got) != nil || got != rec {
			if errors.Is(err, metastore.ErrConflict) {
				return StreamInfo{}, fmt.Errorf("%w: %q", ErrStreamExists, name)
			}
			return StreamInfo{}, fmt.Errorf("loglet: create stream %q: %w", name, err)
		}
	}
	info := StreamInfo{Name: name, Class: opts.Class, Star: star, Incarnation: rec.Incarnation, Retention: rec.retention()}
	if star == s.cfg.Star {
		// Refused only if a DeleteStream of this very incarnation ran
		// meanwhile: created, then deleted.
		s.cache(rec, opts.Class)
	}
	return info, nil
}

// ListOptions bound a ListStreams page.
type ListOptions struct {
	// Prefix keeps the streams whose names begin with it.
	Prefix string
	// StartAfter starts the page after this name (the last name of the
	// previous page; "" from the start).
	StartAfter string
	// Limit bounds the page (<= 0: 1000).
	Limit int
}

// ListStreams returns a page of the streams whose names begin with
// opts.Prefix, in byte order of their names, from the name index (one
// metastore scan of at most Limit keys): the next page starts after the
// last name returned, and a page shorter than Limit is the last. Streams
// of every star are listed. (Streams created before the name index existed
// are not in it.)
func (s *Star) ListStreams(ctx context.Context, opts ListOptions) ([]StreamInfo, error) {
	if ctx == nil {
		return nil, ErrNilContext
	}
	limit := opts.Limit
	if limit <= 0 {
		limit = 1000
	}
	after := ""
	if opts.StartAfter != "" {
		after = chain.StreamNameKey(opts.StartAfter)
	}
	items, err := s.cfg.Meta.Scan(ctx, chain.StreamNameKey(opts.Prefix), after, limit)
	if err != nil {
		return nil, fmt.Errorf("loglet: list streams: %w", err)
	}
	out := make([]StreamInfo, 0, len(items))
	for _, it := range items {
		rec, c, err := decodeStreamRecord(it)
		if err != nil {
			return out, err
		}
		out = append(out, StreamInfo{Name: rec.Name, Class: c, Star: rec.Star, Incarnation: rec.Incarnation, Retention: rec.retention()})
	}
	return out, nil
}

// stream returns the state of a stream this star leads, loading its record
// on a miss (and creating it, for appends with CreateOnAppend: reads never
// create a stream).
func (s *Star) stream(ctx context.Context, name string) (*streamState, error) {
	return s.lookup(ctx, name, false)
}

func (s *Star) streamForAppend(ctx context.Context, name string) (*streamState, error) {
	return s.lookup(ctx, name, s.cfg.CreateOnAppend)
}

func (s *Star) lookup(ctx context.Context, name string, create bool) (*streamState, error) {
	s.mu.RLock()
	st, ok := s.streams[name]
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if !ok {
		if err := checkStreamName(name); err != nil {
			return nil, err
		}
		// A miss: another process may have created it. One metastore
		// read, once per stream per process.
		it, err := s.cfg.Meta.Get(ctx, chain.StreamRecordKey(name))
		switch {
		case errors.Is(err, metastore.ErrNotFound) && create:
			if _, err := s.CreateStream(ctx, name, StreamOptions{Class: s.cfg.DefaultClass, Star: s.cfg.Star}); err != nil && !errors.Is(err, ErrStreamExists) {
				return nil, err
			}
			return s.lookup(ctx, name, false)
		case errors.Is(err, metastore.ErrNotFound):
			return nil, fmt.Errorf("%w: %q", ErrStreamNotFound, name)
		case err != nil:
			return nil, fmt.Errorf("loglet: look up stream %q: %w", name, err)
		}
		rec, c, err := decodeStreamRecord(it)
		if err != nil {
			return nil, err
		}
		if rec.Star != s.cfg.Star {
			nl := &NotLeaderError{Stream: name, Star: rec.Star}
			if ep, _, err := chain.ReadEpoch(ctx, s.cfg.Meta, rec.Star, c); err == nil {
				nl.Leader, nl.Epoch = ep.Owner, ep.Epoch
			}
			return nil, nl
		}
		// The record may be deleted by now: cache refuses an incarnation
		// a DeleteStream retired (see catalogue.go). An append that may
		// create the stream then creates the name afresh, as if the read
		// had come after the delete.
		if st, err = s.cache(rec, c); err != nil {
			if !create || !errors.Is(err, ErrStreamNotFound) {
				return nil, err
			}
			if _, err := s.CreateStream(ctx, name, StreamOptions{Class: s.cfg.DefaultClass, Star: s.cfg.Star}); err != nil && !errors.Is(err, ErrStreamExists) {
				return nil, err
			}
			return s.lookup(ctx, name, false)
		}
	}
	if st.lane == nil {
		return nil, fmt.Errorf("%w: stream %q is %s", ErrClassDisabled, name, st.class)
	}
	return st, nil
}

// newStreamState binds a stream's incarnation to its class's lane (nil if
// the class is disabled here), at its state in the lane's core (keyed by the
// stream's ID: a new incarnation starts at seq 0). retired reports that the
// core retired the incarnation (a DeleteStream): the state must not be
// served. Only cache calls it, under s.mu.
func (s *Star) newStreamState(rec streamRecord, c Class) (st *streamState, retired bool) {
	st = &streamState{name: rec.Name, id: rec.id(), class: c, lane: s.lanes[c], gone: make(chan struct{})}
	if l := st.lane; l != nil {
		l.mu.Lock()
		st.core = l.core.Stream(st.id)
		retired = st.core.Retired()
		l.mu.Unlock()
	}
	if !retired {
		s.trims.observe(rec, time.Now())
	}
	return st, retired
}

// submit validates, encodes, reserves pool budget for and admits b. After it
// returns nil, the batch's outcome is known once p.Done is closed.
func (s *Star) submit(ctx context.Context, name string, b Batch) (*admitted, *lane, error) {
	if ctx == nil {
		return nil, nil, notCommitted(ErrNilContext)
	}
	if err := ctx.Err(); err != nil {
		// An ended context admits nothing: the batch is not committed,
		// and nothing of it is written.
		return nil, nil, notCommitted(fmt.Errorf("loglet: stream %q: the context ended before admission: %w", name, err))
	}
	if len(b.Records) == 0 || len(b.Records) > s.cfg.MaxBatchRecords {
		return nil, nil, notCommitted(fmt.Errorf("%w: %d records (want 1-%d)", ErrInvalidBatch, len(b.Records), s.cfg.MaxBatchRecords))
	}
	st, err := s.streamForAppend(ctx, name)
	if err != nil {
		return nil, nil, notCommitted(err)
	}
	now := time.Now()
	arrival := now.UnixMilli()
	size, charge := 0, 0
	monotone := true
	headers := 0
	var prev int64
	for i, r := range b.Records {
		if len(r.Headers) > envelope.MaxRecordHeaders {
			return nil, nil, notCommitted(fmt.Errorf("%w: record %d has %d headers (max %d)", ErrInvalidBatch, i, len(r.Headers), envelope.MaxRecordHeaders))
		}
		if r.Timestamp < 0 {
			return nil, nil, notCommitted(fmt.Errorf("%w: record %d has a negative timestamp", ErrInvalidBatch, i))
		}
		ts := s.stamp(r.Timestamp, arrival)
		headers += len(r.Headers)
		if ts < prev {
			monotone = false
		}
		prev = ts
		rs := envelope.EncodedRecordSize(Record{Timestamp: ts, Headers: r.Headers, Body: r.Body})
		if rs > s.cfg.MaxRecordBytes {
			return nil, nil, notCommitted(fmt.Errorf("%w: record %d is %d bytes encoded (max %d)", ErrInvalidBatch, i, rs, s.cfg.MaxRecordBytes))
		}
		size += rs
		charge += rs + 10 - varintLen(ts) // room for any re-stamped timestamp
	}
	if headers > envelope.MaxFrameHeaders {
		return nil, nil, notCommitted(fmt.Errorf("%w: batch has %d headers in all (max %d)", ErrInvalidBatch, headers, envelope.MaxFrameHeaders))
	}
	if size > s.cfg.MaxBatchBytes {
		return nil, nil, notCommitted(fmt.Errorf("%w: batch is %d bytes encoded (max %d)", ErrInvalidBatch, size, s.cfg.MaxBatchBytes))
	}
	// Reserve the budget before encoding: a producer blocked at the budget
	// then holds no encoded copy the budget does not count.
	if err := st.lane.reserve(ctx, int64(charge)); err != nil {
		return nil, nil, err
	}
	// One allocation for the batch and its future; the payload is carved
	// from the lane's slab (issue 16: allocations per batch).
	a := &admitted{}
	p := &a.b
	*p = chaincore.Batch{Stream: st.core, Count: len(b.Records), Headers: headers, Charge: int64(charge), Submitted: now, Done: make(chan struct{})}
	p.Payload = st.lane.slab.alloc(charge)
	recs := b.Records
	if !monotone {
		recs = make([]Record, len(b.Records)) // the core re-stamps these
	}
	for i, r := range b.Records {
		r.Timestamp = s.stamp(r.Timestamp, arrival)
		if !monotone {
			recs[i] = r
		}
		if i == 0 {
			p.MinTS = r.Timestamp
		}
		p.MinTS, p.MaxTS = min(p.MinTS, r.Timestamp), max(p.MaxTS, r.Timestamp)
		p.Payload = envelope.AppendRecord(p.Payload, r)
	}
	st.lane.precompress(p)
	if err := st.lane.admit(ctx, p, recs, b.MatchSeqNum, monotone); err != nil {
		return nil, nil, err
	}
	return a, st.lane, nil
}

// admitted is a batch and the future that reports its outcome, allocated
// together.
type admitted struct {
	b chaincore.Batch
	f AckFuture
}

// stamp is the timestamp a record gets at arrival: its own, or arrival if it
// has none; one in the future is capped at arrival (S2's rule: a clock
// mistaken by a factor of 1000 must not stamp every later record of the
// stream in the year 58886), unless Config.UncappedTimestamps.
func (s *Star) stamp(ts, arrival int64) int64 {
	if ts == 0 || (ts > arrival && !s.cfg.UncappedTimestamps) {
		return arrival
	}
	return ts
}

func varintLen(v int64) int {
	u := uint64(v) << 1
	if v < 0 {
		u = ^u
	}
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}

// Append writes b to stream and waits for its acknowledgement: the batch is
// durable in W buckets and every earlier flight of its chain is too. The
// metastore is not touched (except once for a stream this process has not
// seen). An error wraps ErrNotCommitted or ErrOutcomeUnknown.
func (s *Star) Append(ctx context.Context, stream string, b Batch) (Ack, error) {
	a, l, err := s.submit(ctx, stream, b)
	if err != nil {
		return Ack{}, err
	}
	p := &a.b
	select {
	case <-p.Done:
		return l.outcome(p)
	case <-ctx.Done():
		select {
		case <-p.Done: // a known outcome beats "unknown"
			return l.outcome(p)
		default:
		}
		return Ack{}, outcomeUnknown(fmt.Errorf("loglet: stream %q: gave up waiting for the ack: %w", stream, ctx.Err()))
	}
}

// CheckTail returns the stream's tail: the sequence number the next
// admitted record will get and the last admitted timestamp. It counts the
// batches this process admitted and has not acked yet: Tail.Pending says
// how many records those are (Seq−Pending is the durable tail). A
// MatchSeqNum taken from Seq while Pending is non-zero presumes they all
// succeed; if one fails, every later batch fails its match. A producer
// that wants exactly-once retries takes Seq when Pending is 0, or the tail
// in its last Ack.
func (s *Star) CheckTail(ctx context.Context, stream string) (Tail, error) {
	if ctx == nil {
		return Tail{}, ErrNilContext
	}
	st, err := s.stream(ctx, stream)
	if err != nil {
		return Tail{}, err
	}
	st.lane.mu.Lock()
	defer st.lane.mu.Unlock()
	a, d := st.core.Assigned(), st.core.Durable()
	return Tail{Seq: a.Seq, Timestamp: a.Timestamp, Pending: a.Seq - d.Seq}, nil
}

// Read returns durable records of stream from q.Start on: absorbed history
// from refs and the object store, then the unabsorbed tail from the
// leader's flight index, with no gap and no duplicate between them. A start
// at or past the durable tail returns no records and the tail; a start below
// the stream's trim point (Trim, retention) reads from the trim point, and
// no record below it is returned (a trim through this Star at once, one
// another process wrote within 5 seconds: the cached trim point is re-read
// from the stream record when older than that); a start below the oldest
// otherwise readable record returns ErrHistoryTrimmed. As Reader.Read, it
// returns records or an error, never both, and damage is ErrCorrupt.
func (s *Star) Read(ctx context.Context, stream string, q ReadQuery) (ReadResult, error) {
	if ctx == nil {
		return ReadResult{}, ErrNilContext
	}
	if err := ctx.Err(); err != nil {
		return ReadResult{}, err
	}
	st, err := s.stream(ctx, stream)
	if err != nil {
		return ReadResult{}, err
	}
	return s.readStream(ctx, st, q)
}

// readStream is Read of the incarnation st.
func (s *Star) readStream(ctx context.Context, st *streamState, q ReadQuery) (ReadResult, error) {
	maxRecs, maxBytes := limits(q)
	start, err := s.resolve(ctx, st, q.Start)
	if err != nil {
		return ReadResult{}, err
	}
	start = max(start, s.trimFloor(ctx, st, false)) // below a trim: from the first readable record
	v := st.view()
	if st.lane.deadFate() != nil {
		// Deposed: a successor writes this stream now, so history (its
		// refs) may run past this process's durable tail: read it all
		// from there, as a Reader does.
		return s.readDeposed(ctx, st, v, start, maxRecs, maxBytes)
	}
	if start >= v.start {
		recs, err := v.read(start, maxRecs, maxBytes)
		recs, err = recordsOrError(recs, err)
		return result(recs, start, v.durable), err
	}
	// Below the index: absorbed before we looked, so refs hold it. Where
	// history ends, go on from the flight index if the limits leave room,
	// so one Read spans both with no gap and no duplicate (and back to
	// history if the absorb moved the index on meanwhile).
	// Each pass returns records or ends the read, so a read with room left
	// returns every durable record up to the tail it reports, however the
	// absorb moves records from the index into refs meanwhile (the bound
	// only guards against a bug).
	var recs []SequencedRecord
	next, size := start, 0
	for pass := 0; pass < 1<<16 && len(recs) < maxRecs && size < maxBytes; pass++ {
		var more []SequencedRecord
		if next >= v.start {
			more, err = v.read(next, maxRecs-len(recs), maxBytes-size)
		} else {
			more, err = s.hist.read(ctx, st.id, next, maxRecs-len(recs), maxBytes-size)
			if err == nil && len(more) == 0 && len(recs) == 0 {
				err = fmt.Errorf("loglet: read %q at %d: absorbed but not in refs", st.name, next)
			}
		}
		recs = append(recs, more...)
		if err != nil || len(more) == 0 {
			break
		}
		for _, r := range more {
			size += recordSize(r.Record)
		}
		next = more[len(more)-1].Seq + 1
		v = st.view()
	}
	// The tail moved on while refs were read: report it as of now, so it
	// is never behind the records returned.
	recs, err = recordsOrError(recs, err)
	return result(recs, start, coverTail(v.durable, recs)), err
}

// readDeposed serves a read on a chain this process no longer leads: from
// history (the successor's refs), then from what is left of its own flight
// index (released here before the successor's fence, not yet in refs).
func (s *Star) readDeposed(ctx context.Context, st *streamState, v indexView, start uint64, maxRecs, maxBytes int) (ReadResult, error) {
	recs, err := s.hist.read(ctx, st.id, start, maxRecs, maxBytes)
	if err != nil {
		return ReadResult{}, err
	}
	next := start
	if n := len(recs); n > 0 {
		next = recs[n-1].Seq + 1
	}
	if len(recs) < maxRecs && next >= v.start {
		more, merr := v.read(next, maxRecs-len(recs), maxBytes)
		recs, err = append(recs, more...), merr
	}
	recs, err = recordsOrError(recs, err)
	return result(recs, start, coverTail(v.durable, recs)), err
}

// coverTail is tail raised to cover recs: a process may read records past
// its own durable tail (refs a successor wrote), and the Tail it reports is
// never behind the records it returns.
func coverTail(tail Tail, recs []SequencedRecord) Tail {
	if n := len(recs); n > 0 && recs[n-1].Seq+1 > tail.Seq {
		return Tail{Seq: recs[n-1].Seq + 1, Timestamp: max(tail.Timestamp, recs[n-1].Timestamp)}
	}
	return tail
}

func limits(q ReadQuery) (int, int) {
	maxRecs, maxBytes := q.MaxRecords, q.MaxBytes
	if maxRecs <= 0 {
		maxRecs = 1000
	}
	if maxBytes <= 0 {
		maxBytes = 1 << 20
	}
	return maxRecs, maxBytes
}

func result(recs []SequencedRecord, start uint64, tail Tail) ReadResult {
	res := ReadResult{Records: recs, Next: start, Tail: tail}
	if n := len(recs); n > 0 {
		res.Next = recs[n-1].Seq + 1
	}
	return res
}

// resolve turns a Position into a sequence number.
func (s *Star) resolve(ctx context.Context, st *streamState, p Position) (uint64, error) {
	v := st.view()
	switch p.kind {
	case posTailOffset:
		if p.value >= v.durable.Seq {
			return 0, nil
		}
		return v.durable.Seq - p.value, nil
	case posTimestamp:
		if idxMin := v.minTimestamp(); v.start > 0 && (idxMin < 0 || idxMin > p.ts) {
			seq, ok, err := s.hist.seqAtTimestamp(ctx, st.id, p.ts)
			if err != nil || ok {
				return seq, err
			}
		}
		return v.seqFromTimestamp(p.ts), nil
	}
	return p.value, nil
}

// Close is a cooperative handoff: it stops admission (later appends fail
// with ErrClosed), flushes every admitted batch, waits for their acks,
// absorbs everything released, and records a clean seal in each chain's
// epoch record, so the next owner continues without fencing or walking.
// Both chains close at once.
//
// It ends within ctx in every state (a bucket set or the metastore down, a
// halt recovery that cannot finish): when ctx ends first, batches without
// an outcome end with one (never cut: not committed; past a cut the
// recovery fenced: not committed; otherwise outcome unknown), and what
// could not be done is returned. A ctx without a deadline is bounded by
// Config.CloseTimeout. It returns errors.Join of what failed (nil after a
// clean close, and after the close of a chain a successor took over).
// Later calls return the first call's result.
//
// Close(nil) is Close(context.Background()): it closes the star, bounded by
// Config.CloseTimeout, so `defer star.Close(nil)` releases it as a
// deferred Close with a context does. (Every other method returns
// ErrNilContext for a nil ctx; refusing one here would leave the star open,
// its chains unsealed and its goroutines running.)
func (s *Star) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		if ctx == nil {
			ctx = context.Background()
		}
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, s.cfg.CloseTimeout)
			defer cancel()
		}
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.closing)
		s.stopRetention()
		var wg sync.WaitGroup
		var errs [2]error
		for c, l := range s.lanes {
			if l != nil {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[c] = l.close(ctx)
				}()
			}
		}
		wg.Wait()
		s.closeErr = errors.Join(append(errs[:], s.releaseAll()...)...)
		if s.closeErr != nil {
			s.log.Warn("star closed with errors", "star", s.cfg.Star, "err", s.closeErr)
		} else {
			s.log.Info("star closed", "star", s.cfg.Star)
		}
	})
	return s.closeErr
}

// crash stops the star the way a dying process does, for tests: no flush,
// no absorb, no seal. Batches without an outcome end outcome-unknown (or
// not committed, if never cut); what is durable stays for a successor.
func (s *Star) crash() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.closing)
		s.stopRetention()
		for _, l := range s.lanes {
			if l != nil {
				l.crash()
			}
		}
		s.releaseAll() // as a dying process's file locks go with it
	})
}

// releaseAll runs s.release in reverse order and returns their errors.
func (s *Star) releaseAll() []error {
	var errs []error
	for i := len(s.release) - 1; i >= 0; i-- {
		if err := s.release[i](); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// isClosed reports whether Close (or a crash) has begun.
func (s *Star) isClosed() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.closed
}
