package loglet

import (
	"context"
	"errors"
	"fmt"

	"github.com/flightlog/flightlog/chain"
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
