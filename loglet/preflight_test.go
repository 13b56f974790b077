package loglet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// refusal is what a bucket that refuses for good answers (as the S3
// backend maps NoSuchBucket, InvalidBucketName, AccessDenied).
func refusal(what string) error { return fmt.Errorf("%w: %s", objstore.ErrPermanent, what) }

// preflightConfig is a star over an in-memory metastore with one Standard
// bucket and three Express buckets, each wrapped for fault injection.
func preflightConfig(t *testing.T) (Config, *metastore.FaultStore, []*objstore.FaultStore, *bytes.Buffer) {
	t.Helper()
	meta := metastore.WithFaults(metastore.NewMem(), 1)
	var fs []*objstore.FaultStore
	var stores []objstore.Store
	for i := 0; i < 4; i++ {
		f := objstore.WithFaults(objstore.NewMem(), uint64(i))
		fs = append(fs, f)
		stores = append(stores, f)
	}
	logs := &lockedBuffer{}
	cfg := Config{Star: "s1", Meta: meta, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Standard: ClassConfig{Stores: stores[:1], BucketNames: []string{"std"}},
		Express:  ClassConfig{Stores: stores[1:], BucketNames: []string{"ea", "eb", "ec"}},
	}
	return cfg, meta, fs, &logs.buf
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// openBounded opens cfg with a context that only keeps a regression from
// hanging the test: every case must end long before it.
func openBounded(t *testing.T, cfg Config) (*Star, error, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	s, err := Open(ctx, cfg)
	took := time.Since(start)
	if s != nil {
		t.Cleanup(func() { s.Close(context.Background()) })
	}
	if ctx.Err() != nil {
		t.Fatalf("Open ran until the test's bound (%v): %v", took, err)
	}
	return s, err, took
}

// TestPreflightNamesTheBucketThatRefuses: a bucket that refuses a step of
// the probe for good fails Open with a *PreflightError naming its class,
// index, name and the step, wrapping the refusal; and Open has led
// nothing (no epoch record was minted).
func TestPreflightNamesTheBucketThatRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		bucket int // in fs: 0 Standard, 1-3 Express
		op     fault.Op
		step   string
	}{
		{"missing bucket (PUT refused)", 2, fault.Put, "write"},
		{"no ListBucket (GET of a missing key refused)", 0, fault.Get, "read a missing key"},
		{"standard bucket refuses", 0, fault.Put, "write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, meta, fs, _ := preflightConfig(t)
			fs[tc.bucket].SetHook(func(call fault.Call) fault.Fault {
				op := call.Op
				if op == tc.op {
					return fault.Fault{Err: refusal("NoSuchBucket")}
				}
				return fault.Fault{}
			})
			_, err, _ := openBounded(t, cfg)
			var pe *PreflightError
			if !errors.As(err, &pe) || !errors.Is(err, objstore.ErrPermanent) {
				t.Fatalf("Open = %v; want a *PreflightError wrapping objstore.ErrPermanent", err)
			}
			wantClass, wantIdx, wantName := Standard, 0, "std"
			if tc.bucket > 0 {
				wantClass, wantIdx, wantName = Express, tc.bucket-1, cfg.Express.BucketNames[tc.bucket-1]
			}
			if pe.Class != wantClass || pe.Bucket != wantIdx || pe.Name != wantName || pe.Step != tc.step {
				t.Fatalf("PreflightError = %+v; want %s bucket %d (%s), step %q", pe, wantClass, wantIdx, wantName, tc.step)
			}
			if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("%q", wantName)) || !strings.Contains(msg, "NoSuchBucket") {
				t.Fatalf("Open's error %q does not name the bucket %q and the cause", msg, wantName)
			}
			for _, c := range chain.Classes() {
				if _, err := meta.Inner().Get(context.Background(), chain.EpochKey(cfg.Star, c)); !errors.Is(err, metastore.ErrNotFound) {
					t.Fatalf("after a failed pre-flight the %s epoch record reads %v; want absent (Open must lead nothing)", c, err)
				}
			}
		})
	}
}

// TestPreflightNamesAMetastoreThatDoesNotAnswer: a metastore that is down
// fails Open at once, naming the metastore.
func TestPreflightNamesAMetastoreThatDoesNotAnswer(t *testing.T) {
	cfg, meta, _, _ := preflightConfig(t)
	meta.SetDown(true)
	_, err, _ := openBounded(t, cfg)
	var pe *PreflightError
	if !errors.As(err, &pe) || pe.Bucket != -1 || !strings.Contains(err.Error(), "metastore") || !errors.Is(err, metastore.ErrUnavailable) {
		t.Fatalf("Open with the metastore down = %v; want a *PreflightError naming the metastore", err)
	}
}

// TestPreflightRidesOutABucketThatDoesNotAnswer: a bucket that does not
// answer within the bound (an outage, not a misconfiguration) is logged at
// WARN, and Open goes on: the Express set serves at W=2 without it.
func TestPreflightRidesOutABucketThatDoesNotAnswer(t *testing.T) {
	cfg, _, fs, logs := preflightConfig(t)
	cfg.PreflightTimeout = 100 * time.Millisecond
	fs[3].SetHook(func(call fault.Call) fault.Fault {
		key := call.Key
		if strings.HasPrefix(key, preflightPrefix) {
			return fault.Fault{Delay: time.Hour} // honours the caller's context
		}
		return fault.Fault{}
	})
	s, err, _ := openBounded(t, cfg)
	if err != nil {
		t.Fatalf("Open with one Express bucket silent = %v; want it open (W=2 of 3 answer)", err)
	}
	if !strings.Contains(logs.String(), "does not answer") || !strings.Contains(logs.String(), "name=ec") {
		t.Fatalf("no WARN naming the silent bucket; logs:\n%s", logs)
	}
	ctx := context.Background()
	if _, err := s.CreateStream(ctx, "x", StreamOptions{Class: Express}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "x", Batch{Records: []Record{{Body: []byte("r")}}}); err != nil {
		t.Fatalf("append after opening with a silent bucket: %v", err)
	}
}

// TestPreflightLeavesNothingBehind: a passing check deletes its probe
// objects; nothing is left under preflight/.
func TestPreflightLeavesNothingBehind(t *testing.T) {
	cfg, _, fs, _ := preflightConfig(t)
	var mu sync.Mutex
	probes := map[fault.Op]int{}
	for _, f := range fs {
		f.SetHook(func(call fault.Call) fault.Fault {
			op, key := call.Op, call.Key
			if strings.HasPrefix(key, preflightPrefix) {
				mu.Lock()
				probes[op]++
				mu.Unlock()
			}
			return fault.Fault{}
		})
	}
	if _, err, _ := openBounded(t, cfg); err != nil {
		t.Fatal(err)
	}
	for i, f := range fs {
		keys, err := f.Inner().List(context.Background(), preflightPrefix, "", 0)
		if err != nil || len(keys) != 0 {
			t.Fatalf("bucket %d holds %v under %s after Open (%v); want nothing", i, keys, preflightPrefix, err)
		}
	}
	mu.Lock()
	for op, want := range map[fault.Op]int{fault.Get: 2 * len(fs), fault.Put: len(fs), fault.Delete: len(fs)} {
		if got := probes[op]; got != want {
			t.Fatalf("%d %v calls under %s; want %d (the check's requests, per bucket)", got, op, preflightPrefix, want)
		}
	}
	mu.Unlock()

	// A negative PreflightTimeout skips the check: not one probe request.
	cfg2, _, fs2, _ := preflightConfig(t)
	cfg2.PreflightTimeout = -1
	for _, f := range fs2 {
		f.SetHook(func(call fault.Call) fault.Fault {
			op, key := call.Op, call.Key
			if strings.HasPrefix(key, preflightPrefix) {
				t.Errorf("probe %v %s with the check off", op, key)
			}
			return fault.Fault{}
		})
	}
	if _, err, _ := openBounded(t, cfg2); err != nil {
		t.Fatal(err)
	}
}

// TestReaderNeedsNoWriteAccess: the check belongs to Open, which leads; a
// Reader over buckets that refuse every write reads what a leader wrote.
func TestReaderNeedsNoWriteAccess(t *testing.T) {
	cfg, meta, fs, _ := preflightConfig(t)
	s, err, _ := openBounded(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.CreateStream(ctx, "x", StreamOptions{Class: Standard}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "x", Batch{Records: []Record{{Body: []byte("one")}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		f.SetHook(func(call fault.Call) fault.Fault {
			op := call.Op
			if op == fault.Put || op == fault.Delete {
				return fault.Fault{Err: refusal("AccessDenied")}
			}
			return fault.Fault{}
		})
	}
	r, err := NewReader(ReaderConfig{Meta: meta, Standard: cfg.Standard.Stores, Express: cfg.Express.Stores})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Read(ctx, "x", ReadQuery{})
	if err != nil || len(res.Records) != 1 || string(res.Records[0].Body) != "one" {
		t.Fatalf("Reader over read-only buckets: %+v, %v; want the record", res, err)
	}
}

// TestPermanentRefusalReachesProducers: a bucket that starts refusing for
// good after Open (its credentials revoked) fails the append at once with
// outcome unknown and the refusal, naming the bucket: no wait for the
// commit deadline, no recovery fencing for ever. Later appends fail too.
func TestPermanentRefusalReachesProducers(t *testing.T) {
	cfg, _, fs, _ := preflightConfig(t)
	cfg.Standard.CommitDeadline = time.Minute // the old behaviour would wait for it
	cfg.Standard.StragglerTimeout = time.Minute
	s, err, _ := openBounded(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateStream(context.Background(), "x", StreamOptions{Class: Standard}); err != nil {
		t.Fatal(err)
	}
	fs[0].SetHook(func(call fault.Call) fault.Fault {
		op := call.Op
		if op == fault.Put {
			return fault.Fault{Err: refusal("AccessDenied")}
		}
		return fault.Fault{}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = s.Append(ctx, "x", Batch{Records: []Record{{Body: []byte("r")}}})
	if ctx.Err() != nil {
		t.Fatalf("Append to a refusing bucket ran until the test's bound: %v", err)
	}
	if !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, ErrChainHalted) || !strings.Contains(err.Error(), "bucket std refuses for good") || !strings.Contains(err.Error(), "AccessDenied") {
		t.Fatalf("Append to a refusing bucket = %v; want outcome unknown, the chain halted, naming bucket std and the refusal", err)
	}
	if !errors.Is(err, objstore.ErrPermanent) {
		t.Fatalf("Append to a refusing bucket = %v; want it to match objstore.ErrPermanent", err)
	}
	_, err = s.Append(ctx, "x", Batch{Records: []Record{{Body: []byte("r")}}})
	if err == nil || !strings.Contains(err.Error(), "refuses for good") {
		t.Fatalf("a later Append = %v; want the chain's halt cause", err)
	}
}

// TestPreflightRefusesAClassItCannotReach: buckets that cannot be reached
// at all (objstore.ErrUnavailable: the S3 backend's connection refused)
// fail Open when they leave a class fewer than W buckets, naming each of
// them; one that still leaves W is a WARN, and Open goes on.
func TestPreflightRefusesAClassItCannotReach(t *testing.T) {
	t.Run("two of three Express buckets", func(t *testing.T) {
		cfg, meta, fs, _ := preflightConfig(t)
		fs[1].SetDown(true)
		fs[3].SetDown(true)
		_, err, _ := openBounded(t, cfg)
		if !errors.Is(err, objstore.ErrUnavailable) {
			t.Fatalf("Open with 2 of 3 Express buckets unreachable = %v; want a *PreflightError wrapping objstore.ErrUnavailable", err)
		}
		for _, want := range []string{`express bucket 0 ("ea")`, `express bucket 2 ("ec")`, "fewer than W=2"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Open's error does not say %q: %v", want, err)
			}
		}
		if strings.Contains(err.Error(), `"eb"`) || strings.Contains(err.Error(), `"std"`) {
			t.Errorf("Open's error names a bucket that answered: %v", err)
		}
		for _, c := range chain.Classes() {
			if _, err := meta.Inner().Get(context.Background(), chain.EpochKey(cfg.Star, c)); !errors.Is(err, metastore.ErrNotFound) {
				t.Fatalf("after a failed pre-flight the %s epoch record reads %v; want absent (Open must lead nothing)", c, err)
			}
		}
	})
	t.Run("one of three Express buckets", func(t *testing.T) {
		cfg, _, fs, logs := preflightConfig(t)
		fs[2].SetDown(true)
		if _, err, _ := openBounded(t, cfg); err != nil {
			t.Fatalf("Open with 1 of 3 Express buckets unreachable = %v; want it open (W=2 of 3 answer)", err)
		}
		if !strings.Contains(logs.String(), "opening anyway") || !strings.Contains(logs.String(), "name=eb") {
			t.Fatalf("no WARN naming the unreachable bucket; logs:\n%s", logs)
		}
	})
}

// TestPreflightAloneChecksWithoutLeading: Preflight refuses a bucket that
// refuses for good as Open does, passes healthy buckets, and leads nothing
// either way (no epoch record), so a host can check once for many stars.
func TestPreflightAloneChecksWithoutLeading(t *testing.T) {
	cfg, meta, fs, _ := preflightConfig(t)
	ctx := context.Background()
	if err := Preflight(ctx, cfg); err != nil {
		t.Fatalf("Preflight on healthy buckets = %v; want nil", err)
	}
	fs[2].SetHook(func(call fault.Call) fault.Fault {
		if call.Op == fault.Put {
			return fault.Fault{Err: refusal("NoSuchBucket")}
		}
		return fault.Fault{}
	})
	err := Preflight(ctx, cfg)
	var pe *PreflightError
	if !errors.As(err, &pe) || pe.Class != Express || pe.Bucket != 1 || pe.Step != "write" {
		t.Fatalf("Preflight = %v; want a *PreflightError for express bucket 1, step write", err)
	}
	for _, c := range chain.Classes() {
		if _, err := meta.Inner().Get(ctx, chain.EpochKey(cfg.Star, c)); !errors.Is(err, metastore.ErrNotFound) {
			t.Fatalf("after Preflight the %s epoch record reads %v; want absent (it leads nothing)", c, err)
		}
	}
	if err := Preflight(nil, cfg); !errors.Is(err, ErrNilContext) { //nolint:staticcheck // the nil context is the case under test
		t.Fatalf("Preflight(nil) = %v; want ErrNilContext", err)
	}
	if err := Preflight(ctx, Config{}); err == nil {
		t.Fatal("Preflight of an empty config = nil; want a configuration error")
	}
}
