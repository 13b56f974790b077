// Package bbolt is the embedded default metastore: a metastore.Store in one
// local bbolt file, for a single process with no servers.
//
// It owns the file's layout: bucket "kv" maps each key to an 8-byte
// big-endian version followed by the value; bucket "meta" holds the format
// tag and "rev", the store-wide revision counter. The invariant it keeps:
// every write is one bbolt read-write transaction that checks every
// expectation, advances "rev" and writes the new versions together, and is
// fsync'd before the call returns; so a version is never handed out twice
// for a key, across deletes and across reopening the file, and a Commit is
// all or nothing even across a crash.
//
// bbolt allows one process at a time per file: Open waits at most
// Options.LockTimeout for the file lock and then fails with ErrInUse ("is in
// use by another process") rather than hanging. Tools that open the file
// (the CLI) work while the service is stopped.
//
// Contexts are checked before each call and again, for writes, once the
// write lock is held and before anything changes; a bbolt transaction in
// flight cannot be interrupted, so a context that ends during the
// transaction's commit and fsync does not stop it, and the call then
// reports the write's success.
package bbolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/flightlog/flightlog/metastore"
)

const (
	// DefaultLockTimeout is how long Open waits for another handle on the
	// file to let go before failing with ErrInUse.
	DefaultLockTimeout = 500 * time.Millisecond
	// DefaultMaxValueLen is the default value limit (1 MiB). flightlog's
	// values are a few KiB; a value this size is already a design error.
	DefaultMaxValueLen = 1 << 20
	// MaxValueLenLimit is the largest MaxValueLen Options accepts: bbolt's
	// own value limit less the version header.
	MaxValueLenLimit = bolt.MaxValueSize - headerLen
)

const (
	headerLen      = 8
	formatTag      = "flightlog-metastore-bbolt-1"
	kvBucketName   = "kv"
	metaBucketName = "meta"
)

var (
	kvBucket   = []byte(kvBucketName)
	metaBucket = []byte(metaBucketName)
	formatKey  = []byte("format")
	revKey     = []byte("rev")
)

// Errors particular to this backend, besides the metastore sentinels.
var (
	// ErrInUse: Open could not lock the file within Options.LockTimeout,
	// because another process (or another Store in this one) has it open.
	// Errors wrapping it also wrap metastore.ErrUnavailable.
	ErrInUse = errors.New("metastore/bbolt: file in use by another process")
	// ErrCorrupt: the file holds something this package did not write (a
	// foreign bbolt file, an unknown format, an entry shorter than its
	// header). Distinct from ErrNotFound and from transient failures.
	ErrCorrupt = errors.New("metastore/bbolt: corrupt or foreign file")
)

// Options configures Open. The zero value (or nil) means every default.
type Options struct {
	// LockTimeout bounds how long Open waits for the file lock.
	// 0: DefaultLockTimeout.
	LockTimeout time.Duration
	// MaxValueLen is the largest value Put and Commit accept; a larger one
	// fails with metastore.ErrTooLarge and nothing is written.
	// 0: DefaultMaxValueLen; at most MaxValueLenLimit.
	MaxValueLen int
}

// Validate rejects nonsense: negative durations or sizes, or a value limit
// above MaxValueLenLimit.
func (o *Options) Validate() error {
	if o == nil {
		return nil
	}
	if o.LockTimeout < 0 {
		return fmt.Errorf("metastore/bbolt: Options.LockTimeout %v is negative", o.LockTimeout)
	}
	if o.MaxValueLen < 0 || o.MaxValueLen > MaxValueLenLimit {
		return fmt.Errorf("metastore/bbolt: Options.MaxValueLen %d is outside [0, %d]", o.MaxValueLen, MaxValueLenLimit)
	}
	return nil
}

func (o *Options) withDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.LockTimeout == 0 {
		r.LockTimeout = DefaultLockTimeout
	}
	if r.MaxValueLen == 0 {
		r.MaxValueLen = DefaultMaxValueLen
	}
	return r
}

// Store is a metastore.Store in one bbolt file. It is safe for concurrent
// use and linearizable: writes are serialised by bbolt's single writer, and
// a read sees every write that returned before it began.
type Store struct {
	db          *bolt.DB
	path        string
	maxValueLen int

	closeOnce sync.Once
	closeErr  error
}

var _ metastore.Store = (*Store)(nil)

// Open opens the store in the file at path, creating it if absent. opts may
// be nil. A file another handle holds fails after Options.LockTimeout with
// an error wrapping ErrInUse; a file that is not a flightlog metastore
// fails with ErrCorrupt.
func Open(path string, opts *Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	o := opts.withDefaults()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: o.LockTimeout})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, &inUseError{path: path, waited: o.LockTimeout}
	}
	if err != nil {
		return nil, fmt.Errorf("metastore/bbolt: open %s: %w", path, err)
	}
	if err := db.Update(initLayout); err != nil {
		db.Close()
		return nil, fmt.Errorf("metastore/bbolt: open %s: %w", path, err)
	}
	return &Store{db: db, path: path, maxValueLen: o.MaxValueLen}, nil
}

// initLayout creates the buckets of a new file, or checks an existing
// file's format tag.
func initLayout(tx *bolt.Tx) error {
	meta := tx.Bucket(metaBucket)
	if meta == nil {
		empty := true
		tx.ForEach(func([]byte, *bolt.Bucket) error { empty = false; return nil })
		if !empty {
			return fmt.Errorf("file holds bbolt buckets but no %q bucket: %w", metaBucketName, ErrCorrupt)
		}
		var err error
		if meta, err = tx.CreateBucket(metaBucket); err != nil {
			return err
		}
		if err := meta.Put(formatKey, []byte(formatTag)); err != nil {
			return err
		}
		_, err = tx.CreateBucket(kvBucket)
		return err
	}
	if tag := meta.Get(formatKey); string(tag) != formatTag {
		return fmt.Errorf("format tag %q, want %q: %w", tag, formatTag, ErrCorrupt)
	}
	if tx.Bucket(kvBucket) == nil {
		return fmt.Errorf("no %q bucket: %w", kvBucketName, ErrCorrupt)
	}
	return nil
}

type inUseError struct {
	path   string
	waited time.Duration
}

func (e *inUseError) Error() string {
	return fmt.Sprintf("metastore/bbolt: %s is in use by another process (its file lock was not free within %v)", e.path, e.waited)
}

func (e *inUseError) Unwrap() []error { return []error{ErrInUse, metastore.ErrUnavailable} }

// Path returns the file the store was opened on.
func (s *Store) Path() string { return s.path }

// MaxValueLen returns the value limit in force.
func (s *Store) MaxValueLen() int { return s.maxValueLen }

// Close releases the file and its lock. Calls after Close fail with
// metastore.ErrUnavailable. Close is idempotent; it waits for calls in
// flight.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if err := s.db.Close(); err != nil {
			s.closeErr = fmt.Errorf("metastore/bbolt: close %s: %w", s.path, err)
		}
	})
	return s.closeErr
}

// Get implements metastore.Store.
func (s *Store) Get(ctx context.Context, key string) (metastore.Item, error) {
	if err := precheck(ctx, key); err != nil {
		return metastore.Item{}, fmt.Errorf("metastore/bbolt: get %q: %w", key, err)
	}
	var it metastore.Item
	err := s.db.View(func(tx *bolt.Tx) error {
		raw := tx.Bucket(kvBucket).Get([]byte(key))
		if raw == nil {
			return metastore.ErrNotFound
		}
		rev, val, err := decode(raw)
		if err != nil {
			return err
		}
		it = metastore.Item{Key: key, Value: bytes.Clone(val), Version: version(rev)}
		return nil
	})
	if err != nil {
		return metastore.Item{}, fmt.Errorf("metastore/bbolt: get %q: %w", key, mapErr(err))
	}
	return it, nil
}

// Put implements metastore.Store.
func (s *Store) Put(ctx context.Context, key string, value []byte, expect metastore.Version) (metastore.Version, error) {
	if err := precheck(ctx, key); err != nil {
		return metastore.NoVersion, fmt.Errorf("metastore/bbolt: put %q: %w", key, err)
	}
	if err := s.checkValue(value); err != nil {
		return metastore.NoVersion, fmt.Errorf("metastore/bbolt: put %q: %w", key, err)
	}
	var rev uint64
	err := s.db.Update(func(tx *bolt.Tx) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		kv := tx.Bucket(kvBucket)
		if err := expectation(kv, key, expect); err != nil {
			return err
		}
		var err error
		if rev, err = nextRev(tx); err != nil {
			return err
		}
		return kv.Put([]byte(key), encode(rev, value))
	})
	if err != nil {
		return metastore.NoVersion, fmt.Errorf("metastore/bbolt: put %q: %w", key, mapErr(err))
	}
	return version(rev), nil
}

// Delete implements metastore.Store.
func (s *Store) Delete(ctx context.Context, key string, expect metastore.Version) error {
	if err := precheck(ctx, key); err != nil {
		return fmt.Errorf("metastore/bbolt: delete %q: %w", key, err)
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		kv := tx.Bucket(kvBucket)
		if err := expectation(kv, key, expect); err != nil {
			return err
		}
		return kv.Delete([]byte(key))
	})
	if err != nil {
		return fmt.Errorf("metastore/bbolt: delete %q: %w", key, mapErr(err))
	}
	return nil
}

// Scan implements metastore.Store with a cursor seek to the later of prefix
// and startAfter, inside one read transaction (a consistent snapshot).
func (s *Store) Scan(ctx context.Context, prefix, startAfter string, limit int) ([]metastore.Item, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("metastore/bbolt: scan %q: %w", prefix, err)
	}
	var items []metastore.Item
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(kvBucket).Cursor()
		var k, raw []byte
		if from := max(prefix, startAfter); from == "" {
			k, raw = c.First()
		} else {
			k, raw = c.Seek([]byte(from))
		}
		for ; k != nil && (limit <= 0 || len(items) < limit); k, raw = c.Next() {
			if !bytes.HasPrefix(k, []byte(prefix)) {
				break
			}
			if string(k) <= startAfter {
				continue
			}
			rev, val, err := decode(raw)
			if err != nil {
				return fmt.Errorf("key %q: %w", k, err)
			}
			items = append(items, metastore.Item{Key: string(k), Value: bytes.Clone(val), Version: version(rev)})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("metastore/bbolt: scan %q: %w", prefix, mapErr(err))
	}
	return items, nil
}

// Commit implements metastore.Store as one bbolt read-write transaction:
// every expectation is checked before anything is written. All the puts of
// one Commit get the same version. Commit takes any number of ops (the
// store declares no CommitLimiter); a transaction's size is bounded only by
// memory and the file.
func (s *Store) Commit(ctx context.Context, ops []metastore.Op) ([]metastore.Version, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("metastore/bbolt: commit: %w", err)
	}
	if err := s.checkOps(ops); err != nil {
		return nil, fmt.Errorf("metastore/bbolt: commit: %w", err)
	}
	if len(ops) == 0 {
		return nil, nil
	}
	out := make([]metastore.Version, len(ops))
	err := s.db.Update(func(tx *bolt.Tx) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		kv := tx.Bucket(kvBucket)
		for i, op := range ops {
			if err := expectation(kv, op.Key, op.Expect); err != nil {
				return fmt.Errorf("op %d: %w", i, err)
			}
			if op.Kind == metastore.OpCheck {
				if raw := kv.Get([]byte(op.Key)); raw != nil {
					rev, _, _ := decode(raw) // expectation decoded it already
					out[i] = version(rev)
				}
			}
		}
		rev, err := nextRev(tx)
		if err != nil {
			return err
		}
		for i, op := range ops {
			switch op.Kind {
			case metastore.OpPut:
				if err := kv.Put([]byte(op.Key), encode(rev, op.Value)); err != nil {
					return err
				}
				out[i] = version(rev)
			case metastore.OpDelete:
				if err := kv.Delete([]byte(op.Key)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("metastore/bbolt: commit: %w", mapErr(err))
	}
	return out, nil
}

func (s *Store) checkValue(value []byte) error {
	if len(value) > s.maxValueLen {
		return fmt.Errorf("value of %d bytes over the limit of %d: %w", len(value), s.maxValueLen, metastore.ErrTooLarge)
	}
	return nil
}

// checkOps validates a Commit without reading the file: kinds, keys, value
// sizes, no key twice.
func (s *Store) checkOps(ops []metastore.Op) error {
	seen := make(map[string]struct{}, len(ops))
	for i, op := range ops {
		switch op.Kind {
		case metastore.OpPut:
			if err := s.checkValue(op.Value); err != nil {
				return fmt.Errorf("op %d on %q: %w", i, op.Key, err)
			}
		case metastore.OpDelete, metastore.OpCheck:
		default:
			return fmt.Errorf("op %d on %q has unknown kind %d", i, op.Key, op.Kind)
		}
		if err := metastore.ValidateKey(op.Key); err != nil {
			return fmt.Errorf("op %d on %q: %w", i, op.Key, err)
		}
		if _, dup := seen[op.Key]; dup {
			return fmt.Errorf("key %q appears more than once: %w", op.Key, metastore.ErrInvalidKey)
		}
		seen[op.Key] = struct{}{}
	}
	return nil
}

func precheck(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return metastore.ValidateKey(key)
}

// expectation returns ErrConflict unless key's current state in kv matches
// expect.
func expectation(kv *bolt.Bucket, key string, expect metastore.Version) error {
	raw := kv.Get([]byte(key))
	if expect == metastore.AnyVersion {
		return nil
	}
	if raw == nil {
		if expect == metastore.NoVersion {
			return nil
		}
		return fmt.Errorf("%q absent, expected version %q: %w", key, expect, metastore.ErrConflict)
	}
	rev, _, err := decode(raw)
	if err != nil {
		return fmt.Errorf("key %q: %w", key, err)
	}
	if version(rev) != expect {
		return fmt.Errorf("%q at version %d, expected %q: %w", key, rev, expect, metastore.ErrConflict)
	}
	return nil
}

// nextRev advances the store-wide revision counter in tx and returns it.
func nextRev(tx *bolt.Tx) (uint64, error) {
	meta := tx.Bucket(metaBucket)
	var rev uint64
	if raw := meta.Get(revKey); raw != nil {
		if len(raw) != 8 {
			return 0, fmt.Errorf("revision counter of %d bytes: %w", len(raw), ErrCorrupt)
		}
		rev = binary.BigEndian.Uint64(raw)
	}
	rev++
	return rev, meta.Put(revKey, binary.BigEndian.AppendUint64(nil, rev))
}

func encode(rev uint64, value []byte) []byte {
	b := make([]byte, headerLen, headerLen+len(value))
	binary.BigEndian.PutUint64(b, rev)
	return append(b, value...)
}

func decode(raw []byte) (rev uint64, value []byte, err error) {
	if len(raw) < headerLen {
		return 0, nil, fmt.Errorf("entry of %d bytes, shorter than its version header: %w", len(raw), ErrCorrupt)
	}
	return binary.BigEndian.Uint64(raw), raw[headerLen:], nil
}

func version(rev uint64) metastore.Version {
	return metastore.Version(strconv.FormatUint(rev, 10))
}

// mapErr turns bbolt's closed-database error into metastore.ErrUnavailable.
func mapErr(err error) error {
	if errors.Is(err, bolterrors.ErrDatabaseNotOpen) {
		return fmt.Errorf("store closed: %w", metastore.ErrUnavailable)
	}
	return err
}
