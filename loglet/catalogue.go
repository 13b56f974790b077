package loglet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/internal/invariants"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
	"github.com/flightlog/flightlog/metastore"
)

// The catalogue: which incarnation of each name this star serves, and the
// end of an incarnation's life.
//
// A Star caches the records of the streams it leads (s.streams, under
// s.mu), so appends to known streams never touch the metastore. Every
// insert into that cache goes through cache, and every deletion through
// retire, under one rule: an incarnation retired by a deletion is never
// served again. retire marks it in its chain's core (chaincore.Core.Retire:
// admission refuses it from then on, under the lane's lock, whoever holds
// its state) and drops it from the cache, both under s.mu; cache refuses a
// retired incarnation under the same lock. So once DeleteStream returns, no
// cache entry serves the deleted incarnation, a lookup that read its record
// before the delete committed does not cache it, and no append is admitted
// to it.
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
// the name has none or another incarnation. A retired incarnation is not
// cached: ErrStreamNotFound.
func (s *Star) cache(rec streamRecord, c Class) (*streamState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.streams[rec.Name]; ok && st.id == rec.id() {
		return st, nil
	}
	st, retired := s.newStreamState(rec, c)
	if retired {
		return nil, fmt.Errorf("%w: %q (this incarnation was deleted)", ErrStreamNotFound, rec.Name)
	}
	s.streams[rec.Name] = st
	return st, nil
}

// retire ends rec's incarnation on this star: its chain's core refuses
// admission to it from now on, and the cache drops it (its read sessions
// end), together under s.mu. It returns the incarnation's state in the
// core and the tail admission had reached (what was admitted before the
// retire), or nil if no lane of this process serves it.
func (s *Star) retire(rec streamRecord, c Class) (*chaincore.Stream, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.streams[rec.Name]; st != nil && st.id == rec.id() {
		st.dropped()
		delete(s.streams, rec.Name)
	}
	s.trims.forget(rec.id())
	l := s.lanes[c]
	if rec.Star != s.cfg.Star || l == nil {
		return nil, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	cst := l.core.Retire(rec.id())
	return cst, cst.Assigned().Seq
}

// forgetName drops whatever incarnation of name the cache holds (its read
// sessions end): the next lookup reads the record again.
func (s *Star) forgetName(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.streams[name]; st != nil {
		st.dropped()
	}
	delete(s.streams, name)
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
	key := chain.StreamRecordKey(name)
	it, err := s.cfg.Meta.Get(ctx, key)
	if errors.Is(err, metastore.ErrNotFound) {
		// Perhaps the retry of a delete that applied and reported failure:
		// finish what its marker says (retire, reclaim).
		s.forgetName(name)
		s.finishDeletes(ctx, chain.DeletedNamePrefix(name), false)
		return fmt.Errorf("%w: %q", ErrStreamNotFound, name)
	}
	if err != nil {
		return fmt.Errorf("loglet: delete stream %q: %w", name, err)
	}
	rec, c, derr := decodeStreamRecord(it)
	ops := []metastore.Op{
		{Kind: metastore.OpDelete, Key: key, Expect: it.Version},
		{Kind: metastore.OpDelete, Key: chain.StreamNameKey(name), Expect: metastore.AnyVersion},
	}
	if derr == nil {
		ops = append(ops, metastore.Op{Kind: metastore.OpPut, Key: chain.DeletedKey(rec.id()), Value: it.Value, Expect: metastore.NoVersion})
	}
	vs, err := s.cfg.Meta.Commit(ctx, ops)
	if err != nil && (derr != nil || !s.deleteApplied(ctx, key, rec.id())) {
		// Not known to have applied: the next lookup reads the record
		// again (the stream's sequencing lives in the chain's core, keyed
		// by incarnation, so nothing is lost if it did not).
		s.forgetName(name)
		return fmt.Errorf("loglet: delete stream %q: %w", name, err)
	}
	if derr != nil {
		s.forgetName(name) // a corrupt record: nothing names its data
		return nil
	}
	if cst, admitted := s.retire(rec, c); cst != nil {
		if err := s.lanes[c].awaitReleased(ctx, cst, admitted); err != nil {
			s.log.Warn("stream deleted; appends admitted before the delete still had no outcome when the context ended", "stream", name, "err", err)
		}
	}
	marker := metastore.Item{Key: chain.DeletedKey(rec.id()), Value: it.Value}
	if len(vs) == len(ops) {
		marker.Version = vs[len(ops)-1]
	} else if marker, err = s.cfg.Meta.Get(ctx, marker.Key); err != nil {
		s.log.Warn("stream deleted; reading its marker failed: the retention pass reclaims its data", "stream", name, "err", err)
		return nil
	}
	if err := s.finishDelete(ctx, marker); err != nil {
		s.log.Warn("reclaiming a deleted stream's data failed; the retention pass retries", "stream", name, "err", err)
	}
	return nil
}

// deleteApplied reports whether the delete of the record at key, of
// incarnation id, is known to have applied: the record is gone or is
// another incarnation's. False when it cannot be read.
func (s *Star) deleteApplied(ctx context.Context, key, id string) bool {
	it, err := s.cfg.Meta.Get(ctx, key)
	if errors.Is(err, metastore.ErrNotFound) {
		return true
	}
	if err != nil {
		return false
	}
	rec, _, err := decodeStreamRecord(it)
	return err == nil && rec.id() != id
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
// nothing more can come: this process leads its chain and the core's
// stream is drained (checked before the reclaim's scan, so every ref the
// absorb will ever write for it is in the metastore by then). Otherwise
// the marker stays for the next pass (or for the leader of its star).
func (s *Star) finishDelete(ctx context.Context, marker metastore.Item) error {
	rec, c, err := decodeStreamRecord(marker)
	if err != nil {
		return err
	}
	drained := false
	if cst, _ := s.retire(rec, c); cst != nil {
		drained = s.lanes[c].drained(cst)
	}
	if err := s.reclaim(ctx, rec.id(), ^uint64(0)); err != nil {
		return err
	}
	if !drained {
		return nil
	}
	err = s.cfg.Meta.Delete(ctx, marker.Key, marker.Version)
	if err != nil && !errors.Is(err, metastore.ErrNotFound) && !errors.Is(err, metastore.ErrConflict) {
		return fmt.Errorf("delete marker %s: %w", marker.Key, err)
	}
	s.log.Info("deleted stream reclaimed", "stream", rec.Name, "incarnation", rec.Incarnation)
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
