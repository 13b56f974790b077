package loglet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/internal/invariants"
	"github.com/flightlog/flightlog/loglet/internal/catalogcore"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
	"github.com/flightlog/flightlog/metastore"
)

// The catalogue: which incarnation of each name this star serves, and the
// end of an incarnation's life. Its decisions (lookup, create, delete and
// its cleanup, and, in trim.go and offsets.go, the trim point and offset
// commits) are loglet/internal/catalogcore's operations; this file is their
// shell (runCatalog executes each request as one call) and holds the cache.
//
// A Star caches the records of the streams it leads (s.streams, under
// s.mu), so appends to known streams never touch the metastore. Open loads
// none: a stream's record is read at its first lookup, and the retention
// pass loads the records with a Retention (loadRetained). Every
// insert into that cache goes through cache, and every deletion through
// retire, under one rule: an incarnation retired by a deletion is never
// served again. retire marks it in its chain's core (chaincore.Core.Retire:
// admission refuses it from then on, under the lane's lock, whoever holds
// its state) and drops it from the cache, both under s.mu; cache refuses a
// retired incarnation under the same lock. So once DeleteStream returns, no
// cache entry serves the deleted incarnation, a lookup that read its record
// before the delete committed does not cache it, and no append is admitted
// to it. And the cache never goes back: a record replaces only what the
// lookup (or create) saw cached (cacheTokenLocked); one that moved meanwhile
// sends it back to read the record again.
//
// The end of the incarnation's data is durable: DeleteStream writes a
// marker (chain.DeletedKey, the deleted record as its value) in the Commit
// that deletes the record, and the marker stays until every ref of the
// incarnation is reclaimed and its chain will write no more of them (the
// core's Stream.Drained: every batch admitted before the delete is
// absorbed). The star's retention pass works off the markers of its star,
// so refs absorbed after the delete, a delete whose Commit applied but
// reported failure, and a crash in between are all reclaimed.

// cache returns the cached state of rec's incarnation, caching it first if
// the name has none or another incarnation, provided the cache did not move
// since the caller looked: expect is its token then (cacheToken; ""
// replaces whatever is cached). If it moved, other is its token now and
// nothing is cached. A retired incarnation is not cached:
// ErrStreamNotFound.
func (s *Star) cache(rec streamRecord, c Class, expect string) (st *streamState, other string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.streams[rec.Name]; ok && st.id == rec.id() {
		return st, "", nil
	}
	if tok := s.cacheTokenLocked(rec.Name); expect != "" && expect != tok {
		return nil, tok, nil
	}
	st, retired := s.newStreamState(rec, c)
	if retired {
		return nil, "", fmt.Errorf("%w: %q (this incarnation was deleted)", ErrStreamNotFound, rec.Name)
	}
	s.streams[rec.Name] = st
	return st, "", nil
}

// cacheTokenLocked is the cache's token for name (catalogcore.CacheLooked):
// the incarnation it holds, or, on a miss, the count of entries dropped (by
// a delete, or a forget) among the names sharing its hash bucket, so that a
// lookup that missed before a drop of its name sees the cache moved (a drop
// of another name in the bucket costs it one more read, no more). Under
// s.mu.
func (s *Star) cacheTokenLocked(name string) string {
	if st, ok := s.streams[name]; ok {
		return st.id
	}
	return "#" + strconv.FormatUint(s.drops[dropBucket(name)], 10)
}

// dropBuckets is the number of Star.drops counters.
const dropBuckets = 64

// dropBucket is name's bucket of Star.drops (FNV-1a).
func dropBucket(name string) int {
	h := uint32(2166136261)
	for i := 0; i < len(name); i++ {
		h = (h ^ uint32(name[i])) * 16777619
	}
	return int(h % dropBuckets)
}

// retire ends rec's incarnation on this star: its chain's core refuses
// admission to it from now on, and the cache drops it (its read sessions
// end), together under s.mu. It returns the incarnation's state in the
// core, that core's lane (a retake may swap the class's lane since: the
// state is that lane's) and the tail admission had reached (what was
// admitted before the retire), or nil if no lane of this process serves
// it.
func (s *Star) retire(rec streamRecord, c Class) (*chaincore.Stream, *lane, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.streams[rec.Name]; st != nil && st.id == rec.id() {
		st.dropped()
		delete(s.streams, rec.Name)
		s.drops[dropBucket(rec.Name)]++
	}
	s.trims.forget(rec.id())
	l := s.lane(c)
	if rec.Star != s.cfg.Star || l == nil {
		return nil, nil, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	cst := l.core.Retire(rec.id())
	return cst, l, cst.Assigned().Seq
}

// forgetName drops whatever incarnation of name the cache holds (its read
// sessions end): the next lookup reads the record again.
func (s *Star) forgetName(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.streams[name]; st != nil {
		st.dropped()
		delete(s.streams, name)
		s.drops[dropBucket(name)]++
	}
}

// DeleteStream removes a stream's record: the incarnation is unreadable at
// once (a name created again is a fresh stream). In the same Commit it
// writes a marker of the deleted incarnation, which stays until its data is
// all reclaimed.
//
// Once DeleteStream returns nil, no append is admitted to the deleted
// incarnation (appends fail with ErrStreamNotFound, unless
// Config.CreateOnAppend creates the name afresh), on this process and
// whichever lookup raced it. Appends admitted before the delete took
// effect are ordered before it: they keep their course, and DeleteStream
// waits (within ctx) until each has its outcome, so no ack for the
// incarnation follows its return. (A leader of the stream's star in
// another process learns of the delete at its next retention pass.)
//
// Then it reclaims the incarnation's data: every ref of it, and the
// settled objects they point at (chain slots are shared between streams:
// the settler reclaims them). Refs still to be written by the absorb of
// what was admitted before the delete, a reclaim that failed, and a crash
// meanwhile are reclaimed by the retention pass of the stream's star, which
// works off the marker and deletes it when nothing is left. DeleteStream
// returns nil once the record is deleted, whether or not the reclaim
// finished.
//
// A Commit that fails is re-read: if the record is gone (or is another
// incarnation's), the delete applied and DeleteStream goes on as above;
// if it cannot be known, the error is returned, and a retry that then finds
// no record returns ErrStreamNotFound after finishing the delete's work
// from its marker.
func (s *Star) DeleteStream(ctx context.Context, name string) error {
	if ctx == nil {
		return ErrNilContext
	}
	if s.isClosed() {
		return fmt.Errorf("loglet: delete stream %q: %w", name, ErrClosed)
	}
	out := s.runCatalog(ctx, catalogcore.NewDelete(name), &catalogRun{name: name})
	switch out.Status {
	case catalogcore.Deleted:
		return nil
	case catalogcore.NotFound:
		return fmt.Errorf("%w: %q", ErrStreamNotFound, name)
	default:
		return fmt.Errorf("loglet: delete stream %q: %w", name, out.Err)
	}
}

// finishDeletes runs finishDelete on every marker under prefix (of this
// star only, if ownStar), logging failures: the next pass retries.
func (s *Star) finishDeletes(ctx context.Context, prefix string, ownStar bool) {
	after := ""
	for {
		items, err := s.cfg.Meta.Scan(ctx, prefix, after, 256)
		if err != nil {
			s.log.Warn("listing deleted streams to reclaim failed; the next retention pass retries", "err", err)
			return
		}
		for _, it := range items {
			if ctx.Err() != nil {
				return
			}
			if rec, _, err := decodeStreamRecord(it); ownStar && err == nil && rec.Star != s.cfg.Star {
				continue
			}
			if err := s.finishDelete(ctx, it); err != nil {
				s.log.Warn("reclaiming a deleted stream's data failed; the retention pass retries", "marker", it.Key, "err", err)
			}
		}
		if len(items) < 256 {
			return
		}
		after = items[len(items)-1].Key
	}
}

// finishDelete retires the deleted incarnation a marker names (if this
// star serves it), reclaims every ref of it, and deletes the marker once
// nothing more can come (catalogcore.FinishDelete decides). Otherwise the
// marker stays for the next pass (or for the leader of its star).
func (s *Star) finishDelete(ctx context.Context, marker metastore.Item) error {
	rec, c, err := decodeStreamRecord(marker)
	if err != nil {
		return err
	}
	cr := coreRecord(rec, c, metastore.Item{Key: chain.StreamRecordKey(rec.Name), Value: marker.Value})
	out := s.runCatalog(ctx, catalogcore.NewFinishDelete(cr, catalogcore.Version(marker.Version)), &catalogRun{name: rec.Name})
	if out.Status == catalogcore.Failed {
		return out.Err
	}
	return nil
}

// awaitReleased waits until every batch of st admitted below seq has its
// outcome (the stream's durable tail reaches seq, or the chain stops
// serving), or ctx ends.
func (l *lane) awaitReleased(ctx context.Context, st *chaincore.Stream, seq uint64) error {
	for seq > 0 {
		ch := l.changed(st, seq-1)
		if ch == nil {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// drained reports whether this lane serves and its core will write no more
// refs of st (chaincore.Stream.Drained).
func (l *lane) drained(st *chaincore.Stream) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dead == nil && st.Drained()
}

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
	// Retention (StreamOptions.Retention), 0 = off. ConfigureStream
	// rewrites them (by CAS on the record's version).
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

// loadRetained caches the records of this star's streams that have a
// Retention, so the retention pass (which trims the streams cached) trims
// the ones nobody appends to or reads. The retention pass runs it when the
// star's catalogue generation moved (refreshRetention), not Open: Open
// loads no stream record, and every other stream's record is read at its
// first lookup (one metastore read per stream per process). It reports
// whether it read every record (a failed scan is tried again at the next
// pass).
//
// A record read here never replaces what a lookup cached meanwhile, and a
// name dropped (a delete) after its page was read is left to its next
// lookup: each page's names are cached under the cache's tokens as they
// were before the page was read (catalogcore.CacheLooked). A record that
// does not decode is logged and skipped: its stream fails its own lookup.
func (s *Star) loadRetained(ctx context.Context) bool {
	gen, genOK := s.liveSnapshot(ctx) // before the records (seedLive)
	after := ""
	for {
		s.mu.RLock()
		drops := s.drops
		s.mu.RUnlock()
		items, err := s.cfg.Meta.Scan(ctx, "streams/", after, 1000)
		if err != nil {
			s.log.Warn("loading the stream records with retention failed; the next retention pass retries", "err", err)
			return false
		}
		for _, it := range items {
			rec, c, err := decodeStreamRecord(it)
			if err != nil {
				s.log.Warn("stream record does not decode; its stream fails its lookups", "key", it.Key, "err", err)
				continue
			}
			if rec.Star != s.cfg.Star || !rec.retention().on() {
				continue
			}
			expect := "#" + strconv.FormatUint(drops[dropBucket(rec.Name)], 10)
			st, _, err := s.cache(rec, c, expect)
			if err != nil && !errors.Is(err, ErrStreamNotFound) {
				s.log.Warn("caching a stream record with retention failed", "stream", rec.Name, "err", err)
			}
			if err == nil && st != nil { // nil: a lookup moved the cache meanwhile
				s.seedLive(st.id, rec.TrimSeq, gen, genOK)
			}
		}
		if len(items) < 1000 {
			return true
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
	// zero value keeps everything. ConfigureStream changes it later.
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
	// Retention is the stream's retention as its record holds it: as
	// created, or as ConfigureStream last changed it.
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
	if _, _, err := s.newRecord(name, opts); err != nil {
		return StreamInfo{}, err
	}
	x := &catalogRun{name: name, opts: opts}
	out := s.runCatalog(ctx, catalogcore.NewCreate(name, s.cfg.Star), x)
	switch out.Status {
	case catalogcore.Created:
		rec := out.Record.Data.(recordData).rec
		return StreamInfo{Name: name, Class: opts.Class, Star: rec.Star, Incarnation: rec.Incarnation, Retention: rec.retention()}, nil
	case catalogcore.Exists:
		return StreamInfo{}, fmt.Errorf("%w: %q", ErrStreamExists, name)
	}
	return StreamInfo{}, s.createError(name, out, x)
}

// createError is the error of a create that failed.
func (s *Star) createError(name string, out catalogcore.Outcome, x *catalogRun) error {
	switch {
	case x.mintErr != nil:
		return x.mintErr
	case out.Cause != nil:
		// Not known whether the name was free: never report it taken on
		// a guess (the host's retry learns which).
		return fmt.Errorf("loglet: create stream %q: %w (and the re-read to learn whether it applied failed: %v)", name, out.Err, out.Cause)
	}
	return fmt.Errorf("loglet: create stream %q: %w", name, out.Err)
}

// newRecord makes a new incarnation's record of name, checking opts.
func (s *Star) newRecord(name string, opts StreamOptions) (streamRecord, Class, error) {
	if err := checkNewStreamName(name); err != nil {
		return streamRecord{}, 0, err
	}
	if opts.Class != Standard && opts.Class != Express {
		return streamRecord{}, 0, fmt.Errorf("loglet: stream %q: unknown class %v", name, opts.Class)
	}
	if opts.Retention.MaxAge < 0 || opts.Retention.MaxBytes < 0 {
		return streamRecord{}, 0, fmt.Errorf("loglet: stream %q: negative retention %+v", name, opts.Retention)
	}
	star := opts.Star
	if star == "" {
		star = chain.PlaceStream(name, s.cfg.Stars)
	}
	if err := chain.ValidateStarName(star); err != nil {
		return streamRecord{}, 0, fmt.Errorf("loglet: stream %q: %w", name, err)
	}
	if star == s.cfg.Star && s.lane(opts.Class) == nil {
		return streamRecord{}, 0, fmt.Errorf("loglet: stream %q: %w: %s", name, ErrClassDisabled, opts.Class)
	}
	rec := streamRecord{Name: name, Class: opts.Class.String(), Star: star, Created: time.Now().UnixMilli(), Owner: s.cfg.Owner,
		Nonce: envelope.NewNonce().String(), Incarnation: chain.NewIncarnation(),
		RetentionMaxAgeMs: retentionAgeMs(opts.Retention.MaxAge), RetentionMaxBytes: opts.Retention.MaxBytes}
	if invariants.RecreateReusesKeys.On() {
		rec.Incarnation = "i" + strings.Repeat("0", chain.IncarnationLen-1)
	}
	return rec, opts.Class, nil
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
	token := ""
	if !ok {
		token = s.cacheTokenLocked(name)
	}
	s.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if !ok {
		if err := checkStreamName(name); err != nil {
			return nil, err
		}
		// A miss: another process may have created it. One metastore
		// read, once per stream per process. (The core's first request,
		// LookupCache, is answered here inline: a hit, on every append,
		// allocates no Op.)
		op := catalogcore.NewLookup(name, s.cfg.Star, create)
		if err := op.Step(catalogcore.CacheLooked{Token: token}); err != nil {
			return nil, fmt.Errorf("loglet: look up stream %q: %w", name, err)
		}
		x := &catalogRun{name: name, opts: StreamOptions{Class: s.cfg.DefaultClass, Star: s.cfg.Star}}
		out := s.runCatalog(ctx, op, x)
		switch out.Status {
		case catalogcore.Served:
			st = x.st
		case catalogcore.NotFound:
			if out.Record.Name != "" {
				return nil, fmt.Errorf("%w: %q (this incarnation was deleted)", ErrStreamNotFound, name)
			}
			return nil, fmt.Errorf("%w: %q", ErrStreamNotFound, name)
		case catalogcore.NotLeader:
			rec := out.Record.Data.(recordData)
			nl := &NotLeaderError{Stream: name, Star: rec.rec.Star}
			if ep, _, err := chain.ReadEpoch(ctx, s.cfg.Meta, rec.rec.Star, rec.class); err == nil {
				nl.Leader, nl.Epoch = ep.Owner, ep.Epoch
			}
			return nil, nl
		case catalogcore.Corrupt:
			return nil, out.Err
		default:
			if x.creating {
				return nil, s.createError(name, out, x)
			}
			return nil, fmt.Errorf("loglet: look up stream %q: %w", name, out.Err)
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
	st = &streamState{name: rec.Name, id: rec.id(), class: c, lane: s.lane(c), gone: make(chan struct{})}
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

// The shell of the catalogue's core (loglet/internal/catalogcore): it
// executes each request an operation asks as one call (a metastore read or
// commit, a step of the cache or of a chain's core, a log line) and steps
// the result back; the core decides what comes next.

// recordData is what a catalogcore.Record carries for the shell: the
// decoded record, its class, and the metastore item it was read from.
type recordData struct {
	rec   streamRecord
	class Class
	item  metastore.Item
}

// coreRecord is rec as the catalogue's core sees it.
func coreRecord(rec streamRecord, c Class, it metastore.Item) catalogcore.Record {
	return catalogcore.Record{Name: rec.Name, Incarnation: rec.Incarnation, Nonce: rec.Nonce, Star: rec.Star, TrimSeq: rec.TrimSeq,
		Version: catalogcore.Version(it.Version), Data: recordData{rec: rec, class: c, item: it}}
}

// catalogRun is one operation's execution state in the shell: what the
// requests' execution learnt that the outcome's caller needs (the cached
// state served, the chain core's state of a retired incarnation).
type catalogRun struct {
	name string
	opts StreamOptions // a create's (MintRecord)
	// creating: the requests are a create's (since its MintRecord); its
	// errors are a create's.
	creating bool
	mintErr  error
	st       *streamState      // the state the cache served
	cst      *chaincore.Stream // the retired incarnation's state in its chain core
	cstLane  *lane             // the lane of that core
	// gen, genOK: the catalogue generation taken before the record was
	// read or written (Star.liveSnapshot), to seed liveness with.
	gen   catalogGen
	genOK bool
}

// runCatalog executes op's requests until it ends, and returns its outcome.
func (s *Star) runCatalog(ctx context.Context, op catalogcore.Op, x *catalogRun) catalogcore.Outcome {
	for req := op.Next(); req != nil; req = op.Next() {
		res := s.execCatalog(ctx, req, x)
		if res == nil {
			return catalogcore.Outcome{Status: catalogcore.Failed, Err: fmt.Errorf("loglet: the catalogue cannot execute %T", req)}
		}
		if err := op.Step(res); err != nil {
			// A bug of the shell (a result of the wrong type): say so.
			return catalogcore.Outcome{Status: catalogcore.Failed, Err: err}
		}
	}
	return op.Outcome()
}

// readRecord reads name's stream record for the core.
func (s *Star) readRecord(ctx context.Context, name string) catalogcore.RecordRead {
	return readCoreRecord(ctx, s.cfg.Meta, name)
}

// readCoreRecord reads name's stream record from meta for the core.
func readCoreRecord(ctx context.Context, meta metastore.Store, name string) catalogcore.RecordRead {
	it, err := meta.Get(ctx, chain.StreamRecordKey(name))
	if errors.Is(err, metastore.ErrNotFound) {
		return catalogcore.RecordRead{NotFound: true, Err: err}
	}
	if err != nil {
		return catalogcore.RecordRead{Err: err}
	}
	rec, c, err := decodeStreamRecord(it)
	if err != nil {
		return catalogcore.RecordRead{Corrupt: true, Err: err,
			Record: catalogcore.Record{Name: name, Version: catalogcore.Version(it.Version), Data: recordData{item: it}}}
	}
	return catalogcore.RecordRead{Record: coreRecord(rec, c, it)}
}

// execCatalog executes one request: one call. Nil: a request it does not
// know (a bug).
func (s *Star) execCatalog(ctx context.Context, req catalogcore.Request, x *catalogRun) catalogcore.Result {
	switch r := req.(type) {
	case catalogcore.LookupCache:
		x.creating = false
		s.mu.RLock()
		st, ok := s.streams[r.Name]
		token := s.cacheTokenLocked(r.Name)
		s.mu.RUnlock()
		if !ok {
			return catalogcore.CacheLooked{Token: token}
		}
		x.st = st
		name, inc := chain.SplitStreamID(st.id)
		return catalogcore.CacheLooked{Hit: true, Record: catalogcore.Record{Name: name, Incarnation: inc, Star: s.cfg.Star}}
	case catalogcore.ReadRecord:
		x.gen, x.genOK = s.liveSnapshot(ctx)
		return s.readRecord(ctx, r.Name)
	case catalogcore.CacheRecord:
		d := r.Record.Data.(recordData)
		st, other, err := s.cache(d.rec, d.class, r.Expect)
		switch {
		case err != nil:
			return catalogcore.Cached{Retired: true}
		case other != "":
			return catalogcore.Cached{Other: other}
		}
		x.st = st
		s.seedLive(st.id, d.rec.TrimSeq, x.gen, x.genOK)
		return catalogcore.Cached{}
	case catalogcore.MintRecord:
		x.creating = true
		rec, c, err := s.newRecord(r.Name, x.opts)
		if err != nil {
			x.mintErr = err
			return catalogcore.Minted{Err: err}
		}
		val, _ := json.Marshal(rec)
		return catalogcore.Minted{Record: coreRecord(rec, c, metastore.Item{Key: chain.StreamRecordKey(r.Name), Value: val})}
	case catalogcore.CommitCreate:
		d := r.Record.Data.(recordData)
		x.gen, x.genOK = s.liveSnapshot(ctx)
		// The record and its entry in the name index, together.
		_, err := s.cfg.Meta.Commit(ctx, []metastore.Op{
			{Kind: metastore.OpPut, Key: d.item.Key, Value: d.item.Value, Expect: metastore.NoVersion},
			{Kind: metastore.OpPut, Key: chain.StreamNameKey(r.Record.Name), Value: d.item.Value, Expect: metastore.NoVersion},
		})
		return catalogcore.CommitDone{Err: err, Conflict: errors.Is(err, metastore.ErrConflict)}
	case catalogcore.CommitDelete:
		d := r.Record.Data.(recordData)
		ops := []metastore.Op{
			{Kind: metastore.OpDelete, Key: d.item.Key, Expect: d.item.Version},
			{Kind: metastore.OpDelete, Key: chain.StreamNameKey(r.Record.Name), Expect: metastore.AnyVersion},
		}
		marker := -1
		if r.Marker {
			marker = len(ops)
			ops = append(ops, metastore.Op{Kind: metastore.OpPut, Key: chain.DeletedKey(d.rec.id()), Value: d.item.Value, Expect: metastore.NoVersion})
		}
		// The star's catalogue generation, so settlement's cached liveness
		// answers learn of the delete (liveness.go).
		ops = append(ops, catalogGenOp(s.recordStar(d.rec), d.rec.id()))
		vs, err := s.cfg.Meta.Commit(ctx, ops)
		s.catalogChanged(d.rec.id())
		res := catalogcore.CommitDone{Err: err, Conflict: errors.Is(err, metastore.ErrConflict)}
		if err == nil && marker >= 0 && len(vs) == len(ops) {
			res.MarkerVersion = catalogcore.Version(vs[marker])
		}
		return res
	case catalogcore.ForgetName:
		s.forgetName(r.Name)
		return catalogcore.Done{}
	case catalogcore.FinishDeletesOf:
		s.finishDeletes(ctx, chain.DeletedNamePrefix(r.Name), false)
		return catalogcore.Done{}
	case catalogcore.Retire:
		d := r.Record.Data.(recordData)
		cst, l, admitted := s.retire(d.rec, d.class)
		x.cst, x.cstLane = cst, l
		return catalogcore.Retired{Served: cst != nil, Admitted: admitted}
	case catalogcore.AwaitReleased:
		return catalogcore.Awaited{Err: x.cstLane.awaitReleased(ctx, x.cst, r.Seq)}
	case catalogcore.CheckDrained:
		return catalogcore.DrainChecked{Drained: x.cstLane.drained(x.cst)}
	case catalogcore.ReadMarker:
		d := r.Record.Data.(recordData)
		it, err := s.cfg.Meta.Get(ctx, chain.DeletedKey(d.rec.id()))
		return catalogcore.MarkerRead{Version: catalogcore.Version(it.Version), Err: err}
	case catalogcore.Reclaim:
		d := r.Record.Data.(recordData)
		return catalogcore.Reclaimed{Err: s.reclaim(ctx, d.rec.id(), ^uint64(0))}
	case catalogcore.DeleteMarker:
		d := r.Record.Data.(recordData)
		key := chain.DeletedKey(d.rec.id())
		err := s.cfg.Meta.Delete(ctx, key, metastore.Version(r.Version))
		res := catalogcore.MarkerDeleted{NotFound: errors.Is(err, metastore.ErrNotFound), Conflict: errors.Is(err, metastore.ErrConflict)}
		if err != nil {
			res.Err = fmt.Errorf("delete marker %s: %w", key, err)
		}
		if err == nil || res.NotFound || res.Conflict {
			s.log.Info("deleted stream reclaimed", "stream", d.rec.Name, "incarnation", d.rec.Incarnation)
		}
		return res
	case catalogcore.PutTrim:
		d := r.Record.Data.(recordData)
		rec := d.rec
		rec.TrimSeq = r.Seq
		val, _ := json.Marshal(rec)
		// With the star's catalogue generation (liveness.go); its Put is
		// unconditional, so only the record's version can conflict.
		_, err := s.cfg.Meta.Commit(ctx, []metastore.Op{
			{Kind: metastore.OpPut, Key: d.item.Key, Value: val, Expect: d.item.Version},
			catalogGenOp(s.recordStar(rec), rec.id()),
		})
		s.catalogChanged(rec.id())
		return catalogcore.TrimPut{Err: err, Conflict: errors.Is(err, metastore.ErrConflict)}
	case catalogcore.Warn:
		s.log.Warn(r.Msg, "stream", x.name, "err", r.Err)
		return catalogcore.Done{}
	}
	return nil
}

// recordStar is the star whose catalogue generation a commit to rec's
// record puts: its own, or this star's for a record that names none.
func (s *Star) recordStar(rec streamRecord) string {
	if rec.Star != "" {
		return rec.Star
	}
	return s.cfg.Star
}
