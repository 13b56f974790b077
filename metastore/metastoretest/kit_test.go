package metastoretest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/metastore/metastoretest"
)

// breakageEnv chooses the breakage TestBrokenBackendKit runs the kit
// against; TestKitCatchesBrokenBackends sets it in a child process.
const breakageEnv = "METASTORETEST_BREAKAGE"

// TestKitCatchesBrokenBackends proves the kit can fail: it runs the kit in a
// child test process against a backend broken in one way, and expects the
// child to fail, naming the subtest that checks the broken property. The
// unbroken backend is the control: it must pass.
func TestKitCatchesBrokenBackends(t *testing.T) {
	if os.Getenv(breakageEnv) != "" {
		t.Skip("inside a child process")
	}
	for _, c := range []struct {
		breakage string
		failing  []string // subtests that must be reported failed
	}{
		{"none", nil},
		{"put-ignores-version", []string{"Put/NoVersion_creates_once", "Put/stale_version_conflicts", "Race/one_winner_among_16_creates"}},
		{"partial-commit", []string{"Commit/all_or_nothing"}},
		{"unsorted-scan", []string{"Scan/ascending_order", "Scan/paging_through_500_keys"}},
		{"versions-repeat-after-delete", []string{"Put/no_ABA_after_delete_and_recreate", "Put/versions_of_a_key_never_repeat"}},
		// The Watch cases run against naive with a Watch of its own.
		{"watch-none", nil},
		{"watch-misses-deletes", []string{"Watch/delete_and_commit_signal"}},
		{"watch-never-ends", []string{"Watch/ended_context_ends_the_watch"}},
		{"watch-queues-every-write", []string{"Watch/signals_coalesce"}},
	} {
		t.Run(c.breakage, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestBrokenBackendKit$", "-test.count=1", "-test.timeout=2m")
			cmd.Env = append(os.Environ(), breakageEnv+"="+c.breakage)
			out, err := cmd.CombinedOutput()
			if c.failing == nil {
				if err != nil {
					t.Fatalf("the kit failed an unbroken backend: %v\n%s", err, out)
				}
				return
			}
			if _, ok := err.(*exec.ExitError); !ok {
				t.Fatalf("backend with breakage %q: kit exited with %v, want a non-zero exit\n%s", c.breakage, err, out)
			}
			for _, sub := range c.failing {
				if !strings.Contains(string(out), "--- FAIL: TestBrokenBackendKit/"+sub+" ") {
					t.Errorf("breakage %q: output does not report %s as failed", c.breakage, sub)
				}
			}
			if t.Failed() {
				t.Logf("child output:\n%s", out)
			} else {
				t.Logf("breakage %q failed: %s", c.breakage, failedSubtests(string(out)))
			}
		})
	}
}

func failedSubtests(out string) string {
	var names []string
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		if name, ok := strings.CutPrefix(line, "--- FAIL: TestBrokenBackendKit/"); ok && strings.Count(name, "/") == 1 {
			names = append(names, strings.Fields(name)[0])
		}
	}
	return strings.Join(names, ", ")
}

// TestBrokenBackendKit runs the kit against naive with the breakage the
// environment names; it is meant to fail, and skips unless run by
// TestKitCatchesBrokenBackends.
func TestBrokenBackendKit(t *testing.T) {
	b := os.Getenv(breakageEnv)
	if b == "" {
		t.Skip(breakageEnv + " unset: run by TestKitCatchesBrokenBackends")
	}
	metastoretest.Run(t, metastoretest.Harness{
		New: func(testing.TB) metastore.Store {
			n := newNaive(b)
			if strings.HasPrefix(b, "watch-") {
				return watchingNaive{n}
			}
			return n
		},
	})
}

// naive is a small, obviously correct map-backed Store with one optional
// breakage. It is deliberately independent of metastore.Mem so the kit is
// tested against a second implementation.
type naive struct {
	breakage string

	mu   sync.Mutex
	rev  uint64
	data map[string]naiveEntry
	gen  map[string]uint64 // versions-repeat-after-delete: per-key counter, reset on delete
	// watches: watchingNaive's live watches, signalled under mu.
	watches map[*naiveWatch]bool
}

type naiveWatch struct {
	prefix string
	ch     chan struct{}
}

// watchingNaive is naive with a Watch, for the Watch cases (naive itself
// is not a metastore.Watcher, so the other breakages skip them).
type watchingNaive struct{ *naive }

func (w watchingNaive) Watch(ctx context.Context, prefix string) (<-chan struct{}, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	size := 1
	if w.breakage == "watch-queues-every-write" {
		size = 1024
	}
	nw := &naiveWatch{prefix: prefix, ch: make(chan struct{}, size)}
	w.mu.Lock()
	w.watches[nw] = true
	w.mu.Unlock()
	if w.breakage != "watch-never-ends" {
		context.AfterFunc(ctx, func() {
			w.mu.Lock()
			delete(w.watches, nw)
			close(nw.ch)
			w.mu.Unlock()
		})
	}
	return nw.ch, nil
}

// wrote signals the watches of key's prefixes (n.mu held).
func (n *naive) wrote(key string) {
	for w := range n.watches {
		if strings.HasPrefix(key, w.prefix) {
			select {
			case w.ch <- struct{}{}:
			default:
			}
		}
	}
}

type naiveEntry struct {
	value []byte
	ver   metastore.Version
}

func newNaive(breakage string) *naive {
	return &naive{breakage: breakage, data: map[string]naiveEntry{}, gen: map[string]uint64{}, watches: map[*naiveWatch]bool{}}
}

func (n *naive) nextVersion(key string) metastore.Version {
	if n.breakage == "versions-repeat-after-delete" {
		n.gen[key]++
		return metastore.Version(strconv.FormatUint(n.gen[key], 10))
	}
	n.rev++
	return metastore.Version(strconv.FormatUint(n.rev, 10))
}

func (n *naive) holds(key string, expect metastore.Version) bool {
	e, ok := n.data[key]
	return expect == metastore.AnyVersion || (expect == metastore.NoVersion && !ok) || (ok && e.ver == expect)
}

func (n *naive) del(key string) {
	delete(n.data, key)
	delete(n.gen, key)
	if n.breakage != "watch-misses-deletes" {
		n.wrote(key)
	}
}

func check(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return metastore.ValidateKey(key)
}

func (n *naive) Get(ctx context.Context, key string) (metastore.Item, error) {
	if err := check(ctx, key); err != nil {
		return metastore.Item{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	e, ok := n.data[key]
	if !ok {
		return metastore.Item{}, metastore.ErrNotFound
	}
	return metastore.Item{Key: key, Value: slices.Clone(e.value), Version: e.ver}, nil
}

func (n *naive) Put(ctx context.Context, key string, value []byte, expect metastore.Version) (metastore.Version, error) {
	if err := check(ctx, key); err != nil {
		return "", err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.breakage == "put-ignores-version" {
		expect = metastore.AnyVersion
	}
	if !n.holds(key, expect) {
		return "", metastore.ErrConflict
	}
	v := n.nextVersion(key)
	n.data[key] = naiveEntry{slices.Clone(value), v}
	n.wrote(key)
	return v, nil
}

func (n *naive) Delete(ctx context.Context, key string, expect metastore.Version) error {
	if err := check(ctx, key); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.holds(key, expect) {
		return metastore.ErrConflict
	}
	n.del(key)
	return nil
}

func (n *naive) Scan(ctx context.Context, prefix, startAfter string, limit int) ([]metastore.Item, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var keys []string
	for k := range n.data {
		if strings.HasPrefix(k, prefix) && k > startAfter {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	if limit > 0 && len(keys) > limit {
		keys = keys[:limit]
	}
	if n.breakage == "unsorted-scan" {
		slices.Reverse(keys)
	}
	items := make([]metastore.Item, len(keys))
	for i, k := range keys {
		items[i] = metastore.Item{Key: k, Value: slices.Clone(n.data[k].value), Version: n.data[k].ver}
	}
	return items, nil
}

func (n *naive) Commit(ctx context.Context, ops []metastore.Op) ([]metastore.Version, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, op := range ops {
		if err := metastore.ValidateKey(op.Key); err != nil {
			return nil, err
		}
		if seen[op.Key] {
			return nil, fmt.Errorf("naive: key %q twice: %w", op.Key, metastore.ErrInvalidKey)
		}
		seen[op.Key] = true
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	partial := n.breakage == "partial-commit"
	if !partial {
		for _, op := range ops {
			if !n.holds(op.Key, op.Expect) {
				return nil, metastore.ErrConflict
			}
		}
	}
	out := make([]metastore.Version, len(ops))
	for i, op := range ops {
		if partial && !n.holds(op.Key, op.Expect) {
			return nil, metastore.ErrConflict // ops before i already applied
		}
		switch op.Kind {
		case metastore.OpPut:
			out[i] = n.nextVersion(op.Key)
			n.data[op.Key] = naiveEntry{slices.Clone(op.Value), out[i]}
			n.wrote(op.Key)
		case metastore.OpDelete:
			n.del(op.Key)
		case metastore.OpCheck:
			out[i] = n.data[op.Key].ver
		}
	}
	return out, nil
}
