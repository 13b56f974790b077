package metastore

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// MemMaxValueLen is the largest value Mem accepts (1 MiB, below etcd's
// default request limit). A bigger one fails with ErrTooLarge, so code
// tested against Mem does not write values a real backend would refuse.
const MemMaxValueLen = 1 << 20

// Mem is an in-memory Store for tests and simulations. It is safe for
// concurrent use and linearizable: every call runs under one lock.
//
// Versions come from one store-wide revision counter that every successful
// write advances, so a version is never reused for a key, even after the
// key is deleted and created again: a compare-and-swap holding a version
// read before a delete and re-create fails, as it does on etcd.
//
// Mem implements Watcher: a write signals every watch of a prefix of a key
// it puts or deletes, under the same lock, so a watch in place before a
// write applies never misses it.
//
// Mem counts the requests it serves (Counters); fault injection is a
// wrapper (WithFaults) that works over any Store.
type Mem struct {
	mu   sync.RWMutex
	rev  uint64              // last revision handed out; 0: none yet
	data map[string]memEntry // key → current value
	keys []string            // every key in data, ascending
	// watches are the live watches; a watch's channel is sent to and
	// closed only under mu, so no send follows its close.
	watches map[*memWatch]struct{}

	gets, puts, deletes, scans    atomic.Uint64
	commits, commitOps, conflicts atomic.Uint64
}

type memEntry struct {
	value   []byte // owned by Mem, never handed out
	version Version
}

// memWatch is one Watch on a Mem.
type memWatch struct {
	prefix string
	ch     chan struct{} // capacity 1: the pending signal
}

var (
	_ Store   = (*Mem)(nil)
	_ Watcher = (*Mem)(nil)
)

// NewMem returns an empty Mem.
func NewMem() *Mem {
	return &Mem{data: make(map[string]memEntry), watches: make(map[*memWatch]struct{})}
}

// Watch implements Watcher. It is not a request: Counters do not count it.
// The watch ends when ctx does.
func (m *Mem) Watch(ctx context.Context, prefix string) (<-chan struct{}, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("metastore: watch %q: %w", prefix, err)
	}
	w := &memWatch{prefix: prefix, ch: make(chan struct{}, 1)}
	m.mu.Lock()
	m.watches[w] = struct{}{}
	m.mu.Unlock()
	context.AfterFunc(ctx, func() {
		m.mu.Lock()
		delete(m.watches, w)
		close(w.ch)
		m.mu.Unlock()
	})
	return w.ch, nil
}

// notifyLocked signals every watch whose prefix key has, without blocking:
// a watch with a signal pending already has what it needs.
func (m *Mem) notifyLocked(key string) {
	for w := range m.watches {
		if strings.HasPrefix(key, w.prefix) {
			select {
			case w.ch <- struct{}{}:
			default:
			}
		}
	}
}

// MemCounters counts the requests a Mem has served since it was created or
// last reset. Every call counts, whether it succeeded or not.
type MemCounters struct {
	Gets      uint64 // Get calls
	Puts      uint64 // Put calls
	Deletes   uint64 // Delete calls
	Scans     uint64 // Scan calls
	Commits   uint64 // Commit calls
	CommitOps uint64 // ops over all Commit calls
	Conflicts uint64 // calls that returned ErrConflict
}

// Requests returns the number of requests counted: every Get, Put, Delete,
// Scan and Commit call (a Commit is one request whatever its size).
func (c MemCounters) Requests() uint64 {
	return c.Gets + c.Puts + c.Deletes + c.Scans + c.Commits
}

// Counters returns the request counters.
func (m *Mem) Counters() MemCounters {
	return MemCounters{
		Gets:      m.gets.Load(),
		Puts:      m.puts.Load(),
		Deletes:   m.deletes.Load(),
		Scans:     m.scans.Load(),
		Commits:   m.commits.Load(),
		CommitOps: m.commitOps.Load(),
		Conflicts: m.conflicts.Load(),
	}
}

// ResetCounters sets every request counter to zero. The stored data and the
// revision counter are untouched.
func (m *Mem) ResetCounters() {
	for _, c := range []*atomic.Uint64{&m.gets, &m.puts, &m.deletes, &m.scans, &m.commits, &m.commitOps, &m.conflicts} {
		c.Store(0)
	}
}

// Get implements Store.
func (m *Mem) Get(ctx context.Context, key string) (Item, error) {
	m.gets.Add(1)
	if err := ctx.Err(); err != nil {
		return Item{}, fmt.Errorf("metastore: get %q: %w", key, err)
	}
	if err := ValidateKey(key); err != nil {
		return Item{}, fmt.Errorf("metastore: get %q: %w", key, err)
	}
	m.mu.RLock()
	e, ok := m.data[key]
	m.mu.RUnlock()
	if !ok {
		return Item{}, fmt.Errorf("metastore: get %q: %w", key, ErrNotFound)
	}
	return Item{Key: key, Value: clone(e.value), Version: e.version}, nil
}

// Put implements Store.
func (m *Mem) Put(ctx context.Context, key string, value []byte, expect Version) (Version, error) {
	m.puts.Add(1)
	if err := checkWrite(ctx, key, value); err != nil {
		return NoVersion, fmt.Errorf("metastore: put %q: %w", key, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.expectLocked(key, expect); err != nil {
		return NoVersion, fmt.Errorf("metastore: put %q: %w", key, err)
	}
	m.rev++
	v := revVersion(m.rev)
	m.putLocked(key, clone(value), v)
	return v, nil
}

// Delete implements Store.
func (m *Mem) Delete(ctx context.Context, key string, expect Version) error {
	m.deletes.Add(1)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("metastore: delete %q: %w", key, err)
	}
	if err := ValidateKey(key); err != nil {
		return fmt.Errorf("metastore: delete %q: %w", key, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.expectLocked(key, expect); err != nil {
		return fmt.Errorf("metastore: delete %q: %w", key, err)
	}
	if _, ok := m.data[key]; ok {
		m.rev++
		m.deleteLocked(key)
	}
	return nil
}

// Scan implements Store.
func (m *Mem) Scan(ctx context.Context, prefix, startAfter string, limit int) ([]Item, error) {
	m.scans.Add(1)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("metastore: scan %q: %w", prefix, err)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	i := sort.SearchStrings(m.keys, max(prefix, startAfter))
	var items []Item
	for ; i < len(m.keys) && (limit <= 0 || len(items) < limit); i++ {
		k := m.keys[i]
		if !strings.HasPrefix(k, prefix) {
			break
		}
		if k <= startAfter {
			continue
		}
		e := m.data[k]
		items = append(items, Item{Key: k, Value: clone(e.value), Version: e.version})
	}
	return items, nil
}

// Commit implements Store. The versions of every OpPut of one Commit are
// equal: the Commit takes one revision.
func (m *Mem) Commit(ctx context.Context, ops []Op) ([]Version, error) {
	m.commits.Add(1)
	m.commitOps.Add(uint64(len(ops)))
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("metastore: commit: %w", err)
	}
	if err := checkOps(ops, MemMaxValueLen); err != nil {
		return nil, err
	}
	if len(ops) == 0 {
		return nil, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// Every expectation first; nothing is touched until all hold.
	for _, op := range ops {
		if err := m.expectLocked(op.Key, op.Expect); err != nil {
			return nil, fmt.Errorf("metastore: commit: op on %q: %w", op.Key, err)
		}
	}
	m.rev++
	v := revVersion(m.rev)
	out := make([]Version, len(ops))
	for i, op := range ops {
		switch op.Kind {
		case OpPut:
			m.putLocked(op.Key, clone(op.Value), v)
			out[i] = v
		case OpDelete:
			m.deleteLocked(op.Key)
		case OpCheck:
			if e, ok := m.data[op.Key]; ok {
				out[i] = e.version
			}
		}
	}
	return out, nil
}

// expectLocked returns ErrConflict (counted) unless key's state matches
// expect.
func (m *Mem) expectLocked(key string, expect Version) error {
	e, ok := m.data[key]
	switch {
	case expect == AnyVersion:
		return nil
	case expect == NoVersion && !ok:
		return nil
	case ok && e.version == expect:
		return nil
	}
	m.conflicts.Add(1)
	if ok {
		return fmt.Errorf("at version %s, expected %q: %w", e.version, expect, ErrConflict)
	}
	return fmt.Errorf("absent, expected version %q: %w", expect, ErrConflict)
}

func (m *Mem) putLocked(key string, value []byte, v Version) {
	if _, ok := m.data[key]; !ok {
		i := sort.SearchStrings(m.keys, key)
		m.keys = append(m.keys, "")
		copy(m.keys[i+1:], m.keys[i:])
		m.keys[i] = key
	}
	m.data[key] = memEntry{value: value, version: v}
	m.notifyLocked(key)
}

func (m *Mem) deleteLocked(key string) {
	if _, ok := m.data[key]; !ok {
		return
	}
	delete(m.data, key)
	i := sort.SearchStrings(m.keys, key)
	m.keys = append(m.keys[:i], m.keys[i+1:]...)
	m.notifyLocked(key)
}

func revVersion(rev uint64) Version {
	return Version(strconv.FormatUint(rev, 10))
}

// checkWrite validates one Put's context, key and value size.
func checkWrite(ctx context.Context, key string, value []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidateKey(key); err != nil {
		return err
	}
	if len(value) > MemMaxValueLen {
		return fmt.Errorf("value of %d bytes over the limit of %d: %w", len(value), MemMaxValueLen, ErrTooLarge)
	}
	return nil
}

// checkOps validates a Commit's ops without looking at stored data: kinds,
// keys, value sizes, and that no key appears twice.
func checkOps(ops []Op, maxValueLen int) error {
	var seen map[string]struct{}
	if len(ops) > 1 {
		seen = make(map[string]struct{}, len(ops))
	}
	for i, op := range ops {
		if op.Kind != OpPut && op.Kind != OpDelete && op.Kind != OpCheck {
			return fmt.Errorf("metastore: commit: op %d on %q has unknown kind %d", i, op.Key, op.Kind)
		}
		if err := ValidateKey(op.Key); err != nil {
			return fmt.Errorf("metastore: commit: op %d on %q: %w", i, op.Key, err)
		}
		if op.Kind == OpPut && len(op.Value) > maxValueLen {
			return fmt.Errorf("metastore: commit: op %d on %q: value of %d bytes over the limit of %d: %w", i, op.Key, len(op.Value), maxValueLen, ErrTooLarge)
		}
		if seen != nil {
			if _, dup := seen[op.Key]; dup {
				return fmt.Errorf("metastore: commit: key %q appears more than once: %w", op.Key, ErrInvalidKey)
			}
			seen[op.Key] = struct{}{}
		}
	}
	return nil
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}
