package file

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/flightlog/flightlog/objstore"
)

const (
	tmpDirName = ".tmp" // reserved: no tagged name starts with '.'

	tagObject   = '='
	tagDir      = '+'
	tagContinue = '~'

	// chunkLen is the length of a continuation directory's chunk. Pieces
	// that end a segment are shorter, which is what keeps listing order
	// decidable from names alone (see listDir).
	chunkLen = 200

	// staleTempAge is how old a temporary file must be before Open removes
	// it. A younger one may be another process's create in progress.
	staleTempAge = 15 * time.Minute

	// linkAttempts bounds the retries of a create whose directory vanished
	// between making it and linking into it (only an operator removes
	// directories).
	linkAttempts = 8
)

// Store is a bucket kept in a local directory. It is safe for concurrent
// use, and several Stores (in one process or several) may share a
// directory. It holds no open files, so it needs no Close.
type Store struct {
	root string
	tmp  string
	// durable holds the directories this Store has seen exist and has
	// made durable (their parent synced since). See makeDirs.
	durable sync.Map
	// noSync skips every fsync. Only tests of listing and mapping set it,
	// to run fast; durability tests never do.
	noSync bool
}

var _ objstore.Store = (*Store)(nil)

// Open returns the bucket kept in dir, creating dir if needed. It removes
// temporary files that crashed creates left behind, and fails if dir is on
// a case-insensitive filesystem.
func Open(dir string) (*Store, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("file: open %s: %w", dir, err)
	}
	s := &Store{root: root, tmp: filepath.Join(root, tmpDirName)}
	if err := os.MkdirAll(s.tmp, 0o755); err != nil {
		return nil, fmt.Errorf("file: open %s: %w", dir, err)
	}
	if err := syncDir(root); err != nil {
		return nil, fmt.Errorf("file: open %s: %w", dir, err)
	}
	if err := s.checkCaseSensitive(); err != nil {
		return nil, fmt.Errorf("file: open %s: %w", dir, err)
	}
	if err := s.removeStaleTemps(time.Now().Add(-staleTempAge)); err != nil {
		return nil, fmt.Errorf("file: open %s: %w", dir, err)
	}
	return s, nil
}

// checkCaseSensitive creates a probe file and looks it up by another case.
func (s *Store) checkCaseSensitive() error {
	f, err := os.CreateTemp(s.tmp, "case-probe-")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	defer os.Remove(name)
	base := filepath.Base(name)
	if _, err := os.Lstat(filepath.Join(s.tmp, strings.ToUpper(base))); err == nil {
		return errors.New("directory is on a case-insensitive filesystem, where distinct keys would collide")
	}
	return nil
}

// removeStaleTemps removes temporary files last modified before cutoff.
func (s *Store) removeStaleTemps(cutoff time.Time) error {
	entries, err := os.ReadDir(s.tmp)
	if err != nil {
		return err
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		if info.ModTime().Before(cutoff) {
			if err := os.Remove(filepath.Join(s.tmp, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// objectPath maps a valid key to the directories leading to its object
// (relative names, outermost first) and the object's file name.
func objectPath(key string) (dirs []string, name string) {
	segs := strings.Split(key, "/")
	for i, seg := range segs {
		for len(seg) >= chunkLen {
			dirs = append(dirs, string(tagContinue)+seg[:chunkLen])
			seg = seg[chunkLen:]
		}
		if i == len(segs)-1 {
			name = string(tagObject) + seg
		} else {
			dirs = append(dirs, string(tagDir)+seg)
		}
	}
	return dirs, name
}

// resolve validates key and returns the absolute paths of its object's
// directory and file. Besides objstore.ValidateKey, it checks the mapped
// path itself stays under the root: every name carries a tag, so none can
// be "." or "..", but the check costs nothing and guards the mapping.
func (s *Store) resolve(op, key string) (dir, path string, err error) {
	if err := objstore.ValidateKey(key); err != nil {
		return "", "", fmt.Errorf("file: %s %q: %w", op, key, err)
	}
	dirs, name := objectPath(key)
	dir = filepath.Join(append([]string{s.root}, dirs...)...)
	path = filepath.Join(dir, name)
	if !strings.HasPrefix(path, s.root+string(filepath.Separator)) || strings.ContainsRune(name, filepath.Separator) {
		return "", "", fmt.Errorf("file: %s %q: maps outside the root: %w", op, key, objstore.ErrInvalidKey)
	}
	return dir, path, nil
}

func ctxErr(ctx context.Context, op, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("file: %s %q: %w", op, key, err)
	}
	return nil
}

// PutIfAbsent implements objstore.Store with the create protocol of the
// package comment. A context that ends before the object is linked fails
// the call with nothing created.
func (s *Store) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	if err := ctxErr(ctx, "put", key); err != nil {
		return err
	}
	dir, path, err := s.resolve("put", key)
	if err != nil {
		return err
	}
	tmp, err := s.writeTemp(body)
	if err != nil {
		return fmt.Errorf("file: put %q: %w", key, err)
	}
	defer os.Remove(tmp)
	if err := ctxErr(ctx, "put", key); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		err := s.makeDirs(dir)
		if err == nil {
			err = os.Link(tmp, path)
		}
		if err == nil {
			break
		}
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("file: put %q: %w", key, objstore.ErrExists)
		}
		if errors.Is(err, fs.ErrNotExist) && attempt < linkAttempts {
			s.durable.Clear() // a directory was removed under us (by hand?): redo them all
			continue
		}
		return fmt.Errorf("file: put %q: %w", key, err)
	}
	// The object is visible; until its directory entry is on disk a crash
	// could lose it, so a failure here is ambiguous, as the contract allows.
	if err := s.syncDir(dir); err != nil {
		return fmt.Errorf("file: put %q: %w", key, err)
	}
	return nil
}

// writeTemp writes body to a new file in the reserved directory and syncs
// it. It returns the file's path.
func (s *Store) writeTemp(body []byte) (string, error) {
	f, err := os.CreateTemp(s.tmp, "put-")
	if err != nil {
		return "", err
	}
	name := f.Name()
	_, err = f.Write(body)
	if err == nil && !s.noSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(name)
		return "", err
	}
	return name, nil
}

// makeDirs creates dir and its missing parents below the root, and makes
// each one's entry durable by syncing its parent. That holds for
// directories another goroutine or process created, too: seeing a
// directory does not mean its creator has synced it yet, so the first
// time this Store meets a directory it syncs the parent itself. Directories
// are never removed (see Delete), so once durable, always durable, and later
// creates in a known directory cost no directory syncs but the object's.
func (s *Store) makeDirs(dir string) error {
	if dir == s.root {
		return nil
	}
	if _, ok := s.durable.Load(dir); ok {
		return nil
	}
	rel, err := filepath.Rel(s.root, dir)
	if err != nil {
		return err
	}
	cur := s.root
	for _, name := range strings.Split(rel, string(filepath.Separator)) {
		parent := cur
		cur = filepath.Join(cur, name)
		if _, ok := s.durable.Load(cur); ok {
			continue
		}
		if err := os.Mkdir(cur, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err := s.syncDir(parent); err != nil {
			return err
		}
		s.durable.Store(cur, struct{}{})
	}
	return nil
}

// Get implements objstore.Store.
func (s *Store) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := ctxErr(ctx, "get", key); err != nil {
		return nil, err
	}
	_, path, err := s.resolve("get", key)
	if err != nil {
		return nil, err
	}
	if off < 0 {
		return nil, fmt.Errorf("file: get %q at offset %d: %w", key, off, objstore.ErrInvalidRange)
	}
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || isNotDir(err) {
			return nil, fmt.Errorf("file: get %q: %w", key, objstore.ErrNotFound)
		}
		return nil, fmt.Errorf("file: get %q: %w", key, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("file: get %q: %w", key, err)
	}
	size := info.Size()
	if off >= size || n == 0 {
		return []byte{}, nil
	}
	end := size
	if n > 0 && n < size-off {
		end = off + n
	}
	buf := make([]byte, end-off)
	if _, err := f.ReadAt(buf, off); err != nil && !(errors.Is(err, io.EOF)) {
		return nil, fmt.Errorf("file: get %q: %w", key, err)
	}
	return buf, nil
}

// Delete implements objstore.Store. It leaves the object's directories in
// place, even when they become empty: removing them would race with
// creates in them (in this process or another), and an empty directory
// costs an inode and nothing else.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := ctxErr(ctx, "delete", key); err != nil {
		return err
	}
	dir, path, err := s.resolve("delete", key)
	if err != nil {
		return err
	}
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) || isNotDir(err) {
			return nil
		}
		return fmt.Errorf("file: delete %q: %w", key, err)
	}
	if err := s.syncDir(dir); err != nil {
		return fmt.Errorf("file: delete %q: %w", key, err)
	}
	return nil
}

// List implements objstore.Store. Keys come back in ascending byte order.
func (s *Store) List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("file: list %q: %w", prefix, err)
	}
	l := lister{ctx: ctx, prefix: prefix, startAfter: startAfter, limit: limit, keys: []string{}}
	if err := l.walk(s.root, ""); err != nil && !errors.Is(err, errListFull) {
		return nil, fmt.Errorf("file: list %q: %w", prefix, err)
	}
	return l.keys, nil
}

var errListFull = errors.New("list is full")

type lister struct {
	ctx                context.Context
	prefix, startAfter string
	limit              int
	keys               []string
}

// entry is one name of a directory, seen as a key or a key prefix.
type entry struct {
	name string // on disk
	// sortKey orders entries in key order: an object's key piece, a
	// directory's piece followed by "/", a continuation's chunk.
	sortKey string
	kind    byte
}

// walk lists dir, whose names extend the key prefix acc, in key order.
//
// Order argument: an object piece and a directory piece are shorter than
// chunkLen and a continuation chunk is exactly chunkLen long, none contains
// "/", and a directory's sort key ends in "/". So no sort key is a proper
// prefix of another, except an object's key of the keys below an entry that
// extends it, and that object's key sorts first, as it should. Comparing
// sort keys therefore compares every key below one entry with every key
// below another the same way.
func (l *lister) walk(dir, acc string) error {
	if err := l.ctx.Err(); err != nil {
		return err
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && acc != "" {
			return nil // removed while we listed
		}
		return err
	}
	entries := make([]entry, 0, len(des))
	for _, de := range des {
		name := de.Name()
		if name == "" {
			continue
		}
		piece := name[1:]
		e := entry{name: name, kind: name[0]}
		switch name[0] {
		case tagObject:
			if len(piece) >= chunkLen || de.IsDir() {
				continue // not a name this package makes
			}
			e.sortKey = piece
		case tagDir:
			if len(piece) >= chunkLen || !de.IsDir() {
				continue
			}
			e.sortKey = piece + "/"
		case tagContinue:
			if len(piece) != chunkLen || !de.IsDir() {
				continue
			}
			e.sortKey = piece
		default:
			continue // the reserved temporary directory, or foreign files
		}
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.sortKey, b.sortKey) })
	for _, e := range entries {
		p := acc + e.sortKey
		if e.kind == tagObject {
			if p != "" && strings.HasPrefix(p, l.prefix) && p > l.startAfter {
				l.keys = append(l.keys, p)
				if l.limit > 0 && len(l.keys) >= l.limit {
					return errListFull
				}
			}
			continue
		}
		// Every key below e starts with p: skip subtrees that cannot hold
		// a key with the prefix, or hold only keys at or before startAfter.
		if !strings.HasPrefix(p, l.prefix) && !strings.HasPrefix(l.prefix, p) {
			continue
		}
		if p < l.startAfter && !strings.HasPrefix(l.startAfter, p) {
			continue
		}
		if err := l.walk(filepath.Join(dir, e.name), p); err != nil {
			return err
		}
	}
	return nil
}

// isNotDir reports whether err says a path component is not a directory:
// only a foreign file in the tree can cause it, and it means "no object".
func isNotDir(err error) bool { return errors.Is(err, syscall.ENOTDIR) }

func (s *Store) syncDir(dir string) error {
	if s.noSync {
		return nil
	}
	return syncDir(dir)
}

// syncDir fsyncs a directory, making its entries durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
