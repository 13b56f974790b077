package loglet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/metastore"
)

// Settlement's liveness answers (Star.streamLiveness), cached.
//
// Every pass asks, for each stream it settles, whether the incarnation is
// live and where it is trimmed. Answering each from the stream record would
// cost one metastore Get per stream per pass. Instead every trim and delete
// of a stream puts the star's catalogue generation (chain.CatalogGenKey) in
// the Commit that writes the stream record, unconditionally and with a fresh
// value, so its (version, value) changes with every such commit. The cache
// reads the generation at most once per catalogGenRefresh, and a cached
// answer is reused while the generation it was read under (read before the
// record) is the current one: no trim or delete of the star's streams
// applied since, so the record read then is still the record now. A
// changed generation sends each stream back to its record once, unless its
// answer is younger than trimRefresh (so a stream of trims costs no more
// than the rule before the generation: a read a trimRefresh). An
// incarnation found dead stays dead (incarnations are never reused). A
// process of an older version trims and deletes without putting the
// generation: a live answer older than liveMaxAge is read again, at most
// liveAgedReadsPerSec a second (spread across passes), so such a change is
// seen within max(liveMaxAge, streams / liveAgedReadsPerSec).

const (
	// catalogGenRefresh is how often the generation is read: a trim or
	// delete by another process is seen by the passes that start this long
	// after it applied.
	catalogGenRefresh = time.Second
	// liveMaxAge is the age past which a live answer is read again whatever
	// the generation says (a writer that does not put it).
	liveMaxAge = time.Minute
	// liveAgedReadsPerSec bounds those re-reads, so their cost is flat in
	// the number of streams.
	liveAgedReadsPerSec = 10
	// liveForget drops an answer no pass asked for this long.
	liveForget = 10 * time.Minute
)

// catalogGen is one read of a star's catalogue generation.
type catalogGen struct {
	found   bool
	version metastore.Version
	value   string
}

// liveEntry is one cached answer.
type liveEntry struct {
	live    bool
	trimSeq uint64
	gen     catalogGen // read before the record
	read    time.Time  // when the record was read
	used    time.Time
}

// liveCache is a Star's cache of liveness answers by stream ID.
type liveCache struct {
	mu       sync.Mutex
	gen      catalogGen
	genOK    bool      // gen is a successful read
	genAt    time.Time // when gen was read; zero: read it at the next ask
	byID     map[string]*liveEntry
	tokens   float64 // aged re-reads allowed now
	tokensAt time.Time
	sweptAt  time.Time
}

// liveDecision says how an ask is answered.
type liveDecision int

const (
	liveReuse  liveDecision = iota // the cached answer
	liveReread                     // read the stream record
)

// decideLive decides an ask for an entry e (nil: none cached) as of now,
// given the generation (ok: it was read; else it is unknown) and whether
// an aged re-read is allowed (agedOK). It reports whether an aged re-read
// was spent.
func decideLive(e *liveEntry, gen catalogGen, genOK bool, now time.Time, agedOK bool) (d liveDecision, aged bool) {
	switch {
	case e == nil:
		return liveReread, false
	case !e.live:
		return liveReuse, false // a dead incarnation never lives again
	case now.Sub(e.read) < trimRefresh:
		// As fresh as the rule before the generation: under a stream of
		// trims (a retention pass) a stream costs at most one read a
		// trimRefresh.
		return liveReuse, false
	case !genOK || e.gen != gen:
		return liveReread, false // a trim or delete applied since, or unknown
	case now.Sub(e.read) >= liveMaxAge && agedOK:
		return liveReread, true // a writer that does not put the generation
	}
	return liveReuse, false
}

// generation returns the generation as of at most catalogGenRefresh ago,
// reading it if older. The value returned was read before the call.
func (s *Star) generation(ctx context.Context, now time.Time) (catalogGen, bool) {
	c := &s.live
	c.mu.Lock()
	if !c.genAt.IsZero() && now.Sub(c.genAt) < catalogGenRefresh {
		g, ok := c.gen, c.genOK
		c.mu.Unlock()
		return g, ok
	}
	c.mu.Unlock()
	it, err := s.cfg.Meta.Get(ctx, chain.CatalogGenKey(s.cfg.Star))
	g := catalogGen{found: err == nil, version: it.Version, value: string(it.Value)}
	ok := err == nil || errors.Is(err, metastore.ErrNotFound)
	if !ok {
		g = catalogGen{}
	}
	c.mu.Lock()
	c.gen, c.genOK, c.genAt = g, ok, now
	c.mu.Unlock()
	return g, ok
}

// catalogChanged forgets id's answer and makes the next ask read the
// generation again: this process committed (or may have committed) a trim
// or delete of id, which its next ask sees at once.
func (s *Star) catalogChanged(id string) {
	s.live.mu.Lock()
	s.live.genAt = time.Time{}
	delete(s.live.byID, id)
	s.live.mu.Unlock()
}

// cachedLive returns the answer for id if the cache may give it, as of now.
func (s *Star) cachedLive(id string, gen catalogGen, genOK bool, now time.Time) (e liveEntry, ok bool) {
	c := &s.live
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(c.sweptAt) >= liveForget {
		for k, x := range c.byID {
			if now.Sub(x.used) >= liveForget {
				delete(c.byID, k)
			}
		}
		c.sweptAt = now
	}
	if c.tokensAt.IsZero() {
		c.tokens, c.tokensAt = liveAgedReadsPerSec, now
	}
	c.tokens = min(liveAgedReadsPerSec, c.tokens+now.Sub(c.tokensAt).Seconds()*liveAgedReadsPerSec)
	c.tokensAt = now
	x := c.byID[id]
	d, aged := decideLive(x, gen, genOK, now, c.tokens >= 1)
	if aged {
		c.tokens--
	}
	if d != liveReuse {
		return liveEntry{}, false
	}
	x.used = now
	return *x, true
}

// rememberLive caches an answer read under gen.
func (s *Star) rememberLive(id string, e liveEntry) {
	c := &s.live
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID == nil {
		c.byID = map[string]*liveEntry{}
	}
	if old := c.byID[id]; old != nil && old.live {
		e.trimSeq = max(e.trimSeq, old.trimSeq) // the trim point only grows
	}
	c.byID[id] = &e
}

// liveSnapshot is the generation as of at most catalogGenRefresh ago
// (read before the call), taken before the catalogue reads or writes a
// stream record, so that the record's answer can be cached under it
// (seedLive). ok is false with settlement off (nothing asks) or the
// generation unknown.
func (s *Star) liveSnapshot(ctx context.Context) (gen catalogGen, ok bool) {
	if s.settleInterval() <= 0 {
		return catalogGen{}, false
	}
	return s.generation(ctx, time.Now())
}

// seedLive caches the answer for a live incarnation whose record the
// catalogue read (or wrote) after taking gen (liveSnapshot): a stream this
// star serves then costs its passes no Get of its record, not even the
// first (at 10,000 streams those first reads were most of a pass's
// requests and of its duration).
func (s *Star) seedLive(id string, trimSeq uint64, gen catalogGen, ok bool) {
	if !ok {
		return
	}
	now := time.Now()
	s.rememberLive(id, liveEntry{live: true, trimSeq: trimSeq, gen: gen, read: now, used: now})
}

// catalogGenOp is the Put of star's catalogue generation that every trim
// and delete of a stream of star commits with the stream record: a fresh
// value (so a version that is a hash of the value changes too) naming the
// stream.
func catalogGenOp(star, id string) metastore.Op {
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce)
	val, _ := json.Marshal(struct {
		Stream string `json:"stream"`
		Nonce  string `json:"nonce"`
	}{id, hex.EncodeToString(nonce)})
	return metastore.Op{Kind: metastore.OpPut, Key: chain.CatalogGenKey(star), Value: val, Expect: metastore.AnyVersion}
}

// streamLiveness reports whether the stream incarnation id (a
// chain.StreamID) is live: a stream record exists for its name with the
// same incarnation. live is false when the name has no record (deleted) or
// its record has another incarnation (deleted and created again). trimSeq
// is the live record's TrimSeq (records below it are unreadable and may be
// reclaimed). Answers are cached (see liveCache): one metastore Get of the
// star's catalogue generation a catalogGenRefresh, one Get of a stream's
// record when the generation changed since the stream's answer was read,
// and at most liveAgedReadsPerSec re-reads of aged answers. A trim or
// delete by any process of this version is seen by the asks that start
// trimRefresh (5 s) after it applied, catalogGenRefresh after it if the
// stream's answer is older than trimRefresh. err is a metastore failure or a
// corrupt record, never absence.
func (s *Star) streamLiveness(ctx context.Context, id string) (live bool, trimSeq uint64, err error) {
	if ctx == nil {
		return false, 0, ErrNilContext
	}
	name, _ := chain.SplitStreamID(id)
	now := time.Now()
	gen, genOK := s.generation(ctx, now)
	if e, ok := s.cachedLive(id, gen, genOK, now); ok {
		return e.live, s.servedTrim(name, id, e.trimSeq), nil
	}
	it, err := s.cfg.Meta.Get(ctx, chain.StreamRecordKey(name))
	if errors.Is(err, metastore.ErrNotFound) {
		s.rememberLive(id, liveEntry{gen: gen, read: now, used: now})
		return false, 0, nil
	}
	if err != nil {
		return false, 0, fmt.Errorf("loglet: look up stream %q: %w", name, err)
	}
	rec, _, err := decodeStreamRecord(it)
	if err != nil {
		return false, 0, err
	}
	if rec.id() != id {
		s.rememberLive(id, liveEntry{gen: gen, read: now, used: now})
		return false, 0, nil
	}
	if genOK {
		s.rememberLive(id, liveEntry{live: true, trimSeq: rec.TrimSeq, gen: gen, read: now, used: now})
	}
	s.mu.RLock()
	st := s.streams[name]
	s.mu.RUnlock()
	if st != nil && st.id == id {
		s.trims.observe(rec, now)
	}
	return true, s.servedTrim(name, id, rec.TrimSeq), nil
}

// servedTrim is the higher of seq and the trim point this process cached
// for id, if it serves it (its own trims raise that first).
func (s *Star) servedTrim(name, id string, seq uint64) uint64 {
	s.mu.RLock()
	st := s.streams[name]
	s.mu.RUnlock()
	if st == nil || st.id != id {
		return seq
	}
	if c, _ := s.trims.cached(id, time.Now()); c > seq {
		return c
	}
	return seq
}
