package loglet

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flightlog/flightlog/loglet/internal/chaincore"
	"github.com/flightlog/flightlog/loglet/internal/starcore"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// Star is one star led by this process: a lane (chain) per configured
// class, the streams placed on the star, and their flight indexes. It
// implements Loglet. All methods are safe for concurrent use.
type Star struct {
	cfg Config
	log *slog.Logger
	// lanes holds each class's lane (nil when the class is disabled): the
	// one its streams bind to. A retake of a chain lost while serving
	// swaps in the new lane once it opened (swapLane, under mu).
	lanes [2]atomic.Pointer[lane]
	// found is what the opening's live-owner check read of each chain
	// (its epoch record and checkpoint), for that chain's first takeover.
	found [2]*chaincore.EpochRead
	hist  *history

	mu      sync.RWMutex
	streams map[string]*streamState
	drops   [dropBuckets]uint64 // cache entries dropped, by name hash: cacheTokenLocked (catalogue.go)
	closed  bool

	closing   chan struct{} // closed by Close: wakes read sessions
	trims     trims         // trim points, retention and its loop (trim.go)
	live      liveCache     // settlement's liveness answers (liveness.go)
	closeOnce sync.Once
	closeErr  error
	// release closes Config.Closers (what the host opened for this star),
	// after the chains have closed, in reverse order.
	release []func() error

	// lead decides which chains this star holds (leadership.go); Open
	// and Close are its shell.
	lead *starcore.Core
	// retaking is a retake's lane until it opens (then swapped in), and
	// serving says the opening reported success: both the leadership's
	// shell's only (Open's goroutine, then watchChains, then Close).
	retaking [2]*lane
	serving  bool
	// leadKick (capacity 1) wakes watchChains: a lane stopped serving.
	// leadStop ends it; leadDone is closed when it has returned.
	leadKick chan struct{}
	leadStop context.CancelFunc
	leadDone chan struct{}
}

var _ Loglet = (*Star)(nil)

// Open starts leading cfg.Star. For each configured class it mints the
// chain's first epoch, or takes the chain over from its previous owner: after
// a clean Close straight from the recorded seal; after a crash (or from a
// live leader, which is then deposed) by sealing the checkpoint, fencing the
// old epoch, minting the next, poisoning the old epoch's window past the cut
// and walking every committed slot below it. Every stream continues from its
// tail. If another process wins the mint, Open fails with ErrTakeoverLost.
func Open(ctx context.Context, cfg Config) (*Star, error) {
	if ctx == nil {
		return nil, ErrNilContext
	}
	cfg.applyDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	began := time.Now()
	if err := preflight(ctx, &cfg); err != nil { // see preflight.go
		return nil, fmt.Errorf("loglet: open star %s: %w", cfg.Star, err)
	}
	preflightTook := time.Since(began)
	s := &Star{
		cfg: cfg, log: cfg.Logger,
		streams:  map[string]*streamState{},
		closing:  make(chan struct{}),
		leadKick: make(chan struct{}, 1),
		hist:     &history{meta: cfg.Meta, sets: [2][]objstore.Store{cfg.Standard.Stores, cfg.Express.Stores}, frames: newFrameCache(cacheBytes(cfg.ReadCacheMiB))},
	}
	lead, err := s.newLeadership()
	if err != nil {
		return nil, fmt.Errorf("loglet: open star %s: %w", cfg.Star, err)
	}
	s.lead = lead
	// The live-owner check (Config.RefuseLiveOwner), the chains' openings
	// and their retakes; a failure stops every chain started.
	opened, checks, err := s.openChains(ctx)
	if err != nil {
		return nil, fmt.Errorf("loglet: open star %s: %w", cfg.Star, err)
	}
	for _, c := range cfg.Closers {
		s.release = append(s.release, c.Close)
	}
	s.startRetention()
	s.startLeadership()
	s.log.Info("star open", "star", cfg.Star, "owner", cfg.Owner, "standard_epoch", opened[Standard].Epoch, "express_epoch", opened[Express].Epoch,
		"preflight", preflightTook.Round(100*time.Microsecond), "checks", checks.Round(100*time.Microsecond), "took", time.Since(began).Round(100*time.Microsecond))
	return s, nil
}

// lane returns class c's lane (nil when the class is disabled).
func (s *Star) lane(c Class) *lane { return s.lanes[c].Load() }

// Metastore is the star's metastore (Config.Meta), for packages that keep
// their own records beside the star's (loglet/groups).
func (s *Star) Metastore() metastore.Store { return s.cfg.Meta }

// Owner is the name this process writes in epoch records (Config.Owner,
// or the default Open derived).
func (s *Star) Owner() string { return s.cfg.Owner }

func (s *Star) classConfig(c Class) *ClassConfig {
	if c == Express {
		return &s.cfg.Express
	}
	return &s.cfg.Standard
}

// Close is a cooperative handoff: it stops admission (later appends fail
// with ErrClosed), flushes every admitted batch, waits for their acks,
// absorbs everything released, and records a clean seal in each chain's
// epoch record, so the next owner continues without fencing or walking.
// Both chains close at once.
//
// It ends within ctx in every state (a bucket set or the metastore down, a
// halt recovery that cannot finish): when ctx ends first, batches without
// an outcome end with one (never cut: not committed; past a cut the
// recovery fenced: not committed; otherwise outcome unknown), and what
// could not be done is returned. A ctx without a deadline is bounded by
// Config.CloseTimeout. It returns errors.Join of what failed (nil after a
// clean close, and after the close of a chain a successor took over).
// Later calls return the first call's result.
//
// Close(nil) is Close(context.Background()): it closes the star, bounded by
// Config.CloseTimeout, so `defer star.Close(nil)` releases it as a
// deferred Close with a context does. (Every other method returns
// ErrNilContext for a nil ctx; refusing one here would leave the star open,
// its chains unsealed and its goroutines running.)
func (s *Star) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		if ctx == nil {
			ctx = context.Background()
		}
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, s.cfg.CloseTimeout)
			defer cancel()
		}
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.closing)
		s.stopRetention()
		s.stopLeadership() // a retake under way ends first
		// Both chains close at once, then Config.Closers are closed.
		s.closeErr = s.closeChains(ctx, false)
		if s.closeErr != nil {
			s.log.Warn("star closed with errors", "star", s.cfg.Star, "err", s.closeErr)
		} else {
			s.log.Info("star closed", "star", s.cfg.Star)
		}
	})
	return s.closeErr
}

// crash stops the star the way a dying process does, for tests: no flush,
// no absorb, no seal. Batches without an outcome end outcome-unknown (or
// not committed, if never cut); what is durable stays for a successor.
func (s *Star) crash() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.closing)
		s.stopRetention()
		s.stopLeadership()
		// Every chain abandoned, then Config.Closers closed, as a dying
		// process's file locks go with it.
		_ = s.closeChains(context.Background(), true)
	})
}

// releaseAll runs s.release in reverse order and returns their errors.
func (s *Star) releaseAll() []error {
	var errs []error
	for i := len(s.release) - 1; i >= 0; i-- {
		if err := s.release[i](); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// isClosed reports whether Close (or a crash) has begun.
func (s *Star) isClosed() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.closed
}
