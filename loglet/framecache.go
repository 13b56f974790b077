package loglet

import (
	"container/list"
	"sync"

	"github.com/flightlog/flightlog/absorb"
)

// frameCache keeps recently decoded frames of history reads, bounded by
// their raw bytes, least recently used first out. A catch-up read with a
// small MaxRecords otherwise fetches and decodes the same multi-MiB frame
// once per call: quadratic in the frame's size. Cached records are shared
// between calls; a read hands out copies of the records it returns.
type frameCache struct {
	mu    sync.Mutex
	max   int64
	bytes int64
	lru   *list.List // of *frameEntry, most recent first
	byKey map[frameKey]*list.Element

	hits, misses uint64
}

// frameKey identifies a frame: its object, offset and checksum (a repointed
// ref names another object; a rewritten copy, another checksum).
type frameKey struct {
	key string
	off uint64
	crc uint32
}

type frameEntry struct {
	k    frameKey
	recs []Record
	size int64
}

func newFrameCache(max int64) *frameCache {
	return &frameCache{max: max, lru: list.New(), byKey: map[frameKey]*list.Element{}}
}

func keyOf(ext absorb.Extent) frameKey { return frameKey{ext.Key, ext.Offset, ext.CRC} }

// get returns the cached records of ext, if any.
func (c *frameCache) get(ext absorb.Extent) ([]Record, bool) {
	if c == nil || c.max <= 0 {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[keyOf(ext)]; ok {
		c.lru.MoveToFront(el)
		c.hits++
		return el.Value.(*frameEntry).recs, true
	}
	c.misses++
	return nil, false
}

// put caches ext's decoded records, evicting the least recently used past
// the bound. A frame larger than half the bound is not cached.
func (c *frameCache) put(ext absorb.Extent, recs []Record) {
	if c == nil || c.max <= 0 || int64(ext.RawLength) > c.max/2 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := keyOf(ext)
	if _, ok := c.byKey[k]; ok {
		return
	}
	e := &frameEntry{k: k, recs: recs, size: int64(ext.RawLength) + int64(len(recs))*48}
	c.byKey[k] = c.lru.PushFront(e)
	c.bytes += e.size
	for c.bytes > c.max {
		last := c.lru.Back()
		old := last.Value.(*frameEntry)
		c.lru.Remove(last)
		delete(c.byKey, old.k)
		c.bytes -= old.size
	}
}

// stats returns the cache's gauge and counters.
// bound is the cache's bound in bytes (0: no cache).
func (c *frameCache) bound() int64 {
	if c == nil || c.max <= 0 {
		return 0
	}
	return c.max
}

func (c *frameCache) stats() (bytes int64, hits, misses uint64) {
	if c == nil {
		return 0, 0, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes, c.hits, c.misses
}

// cloneRecord copies r's body and headers, so a caller may keep or change
// them without touching the cache.
func cloneRecord(r Record) Record {
	r.Body = append([]byte(nil), r.Body...)
	if len(r.Headers) > 0 {
		hs := make([]Header, len(r.Headers))
		for i, h := range r.Headers {
			hs[i] = Header{Name: append([]byte(nil), h.Name...), Value: append([]byte(nil), h.Value...)}
		}
		r.Headers = hs
	}
	return r
}
