package objstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Mem is an in-memory Store: one bucket held in a map. It is the fake the
// rest of flightlog tests against, and it carries test controls (request
// counters, corruption, crash snapshots) that a real bucket cannot offer.
// Wrap it with WithFaults for latency and failures.
//
// Mem is safe for concurrent use. Stored bodies are copied in and out, so no
// caller ever shares memory with the store.
type Mem struct {
	mu       sync.RWMutex
	objects  map[string][]byte
	counters Counters
}

var _ Store = (*Mem)(nil)

// Counters counts the requests a Store served and the bytes it moved, by
// operation. It is a plain value: copy it, subtract two of them, feed it to
// a cost report. Only requests that reached the bucket are counted: a call
// rejected for an invalid key or range, or for a context that had already
// ended, sends nothing and costs nothing.
type Counters struct {
	Puts        int64 // PutIfAbsent requests, whatever their outcome
	PutBytes    int64 // body bytes of PutIfAbsent requests that created an object
	PutExists   int64 // PutIfAbsent requests answered ErrExists
	Gets        int64 // Get requests, whatever their outcome
	GetBytes    int64 // bytes returned by Get
	GetNotFound int64 // Get requests answered ErrNotFound
	Deletes     int64 // Delete requests, present key or not
	Lists       int64 // List requests
}

// Sub returns c minus d, field by field: the requests served between two
// snapshots.
func (c Counters) Sub(d Counters) Counters {
	return Counters{
		Puts:        c.Puts - d.Puts,
		PutBytes:    c.PutBytes - d.PutBytes,
		PutExists:   c.PutExists - d.PutExists,
		Gets:        c.Gets - d.Gets,
		GetBytes:    c.GetBytes - d.GetBytes,
		GetNotFound: c.GetNotFound - d.GetNotFound,
		Deletes:     c.Deletes - d.Deletes,
		Lists:       c.Lists - d.Lists,
	}
}

// NewMem returns an empty in-memory bucket.
func NewMem() *Mem {
	return &Mem{objects: make(map[string][]byte)}
}

// PutIfAbsent implements Store. The body is copied before it is stored.
func (m *Mem) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	if err := checkCall(ctx, "put", key); err != nil {
		return err
	}
	stored := slices.Clone(body)
	if stored == nil {
		stored = []byte{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counters.Puts++
	if _, ok := m.objects[key]; ok {
		m.counters.PutExists++
		return fmt.Errorf("objstore: put %q: %w", key, ErrExists)
	}
	m.objects[key] = stored
	m.counters.PutBytes += int64(len(stored))
	return nil
}

// Get implements Store. The returned slice is a fresh copy.
func (m *Mem) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := checkCall(ctx, "get", key); err != nil {
		return nil, err
	}
	if off < 0 {
		return nil, fmt.Errorf("objstore: get %q at offset %d: %w", key, off, ErrInvalidRange)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counters.Gets++
	body, ok := m.objects[key]
	if !ok {
		m.counters.GetNotFound++
		return nil, fmt.Errorf("objstore: get %q: %w", key, ErrNotFound)
	}
	out := slices.Clone(rangeOf(body, off, n))
	if out == nil {
		out = []byte{}
	}
	m.counters.GetBytes += int64(len(out))
	return out, nil
}

// Delete implements Store.
func (m *Mem) Delete(ctx context.Context, key string) error {
	if err := checkCall(ctx, "delete", key); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counters.Deletes++
	delete(m.objects, key)
	return nil
}

// List implements Store. Keys come back in ascending byte order.
func (m *Mem) List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("objstore: list %q: %w", prefix, err)
	}
	m.mu.Lock()
	m.counters.Lists++
	var keys []string
	for k := range m.objects {
		if strings.HasPrefix(k, prefix) && k > startAfter {
			keys = append(keys, k)
		}
	}
	m.mu.Unlock()
	slices.Sort(keys)
	if limit > 0 && len(keys) > limit {
		keys = keys[:limit:limit]
	}
	if keys == nil {
		keys = []string{}
	}
	return keys, nil
}

// Counters returns the requests served since NewMem, Clone or the last
// ResetCounters.
func (m *Mem) Counters() Counters {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.counters
}

// ResetCounters sets every counter to zero.
func (m *Mem) ResetCounters() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counters = Counters{}
}

// Keys returns every stored key in ascending byte order. It is a test
// control: it is not a request and is not counted.
func (m *Mem) Keys() []string {
	m.mu.RLock()
	keys := make([]string, 0, len(m.objects))
	for k := range m.objects {
		keys = append(keys, k)
	}
	m.mu.RUnlock()
	slices.Sort(keys)
	return keys
}

// Corrupt flips every bit of the byte at offset off of the object at key,
// as a bad disk or a buggy proxy would. It returns ErrNotFound if key holds
// no object and ErrInvalidRange if off is not inside the object. Slices
// returned by earlier Gets are not affected.
func (m *Mem) Corrupt(key string, off int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	body, ok := m.objects[key]
	if !ok {
		return fmt.Errorf("objstore: corrupt %q: %w", key, ErrNotFound)
	}
	if off < 0 || off >= int64(len(body)) {
		return fmt.Errorf("objstore: corrupt %q at offset %d of %d bytes: %w", key, off, len(body), ErrInvalidRange)
	}
	changed := slices.Clone(body)
	changed[off] ^= 0xFF
	m.objects[key] = changed
	return nil
}

// Clone returns an independent copy of the bucket's objects, as they stand
// at the moment of the call: what a crashed process's successor would find.
// The clone's counters start at zero; later writes to either store do not
// show in the other.
func (m *Mem) Clone() *Mem {
	m.mu.RLock()
	defer m.mu.RUnlock()
	c := &Mem{objects: make(map[string][]byte, len(m.objects))}
	for k, v := range m.objects {
		// Stored bodies are never modified in place (Corrupt replaces
		// them), so the clone may share them.
		c.objects[k] = v
	}
	return c
}

// checkCall is the common preamble of every keyed method: a context that
// has already ended, or an invalid key, fails before anything is sent.
func checkCall(ctx context.Context, op, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("objstore: %s %q: %w", op, key, err)
	}
	if err := ValidateKey(key); err != nil {
		return fmt.Errorf("objstore: %s %q: %w", op, key, err)
	}
	return nil
}

// rangeOf returns the part of body that Get(off, n) selects, per the
// Store.Get contract. off must not be negative. The result aliases body.
func rangeOf(body []byte, off, n int64) []byte {
	size := int64(len(body))
	if off >= size || n == 0 {
		return body[:0]
	}
	end := size
	if n > 0 && n < size-off {
		end = off + n
	}
	return body[off:end]
}
