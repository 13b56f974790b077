package groups

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flightlog/flightlog/metastore"
)

// LagTarget names a stream whose consumer groups' lag to read, and which
// groups: none names every group with an offset on the stream's current
// incarnation (Lags), else exactly these (LagOf; a group that has
// committed nothing counts from the trim point).
type LagTarget struct {
	Stream string
	Groups []string
}

// LagBounds bounds one ReadLags call. Zero fields take the defaults.
type LagBounds struct {
	// MaxSeries bounds the (stream, group) lags returned (0: 1,000). The
	// lags past it are counted in LagReading.Dropped; once it is reached,
	// the remaining targets are not read (ErrLagBudget).
	MaxSeries int
	// MaxReads bounds the metastore reads (Gets and Scans) of the offsets
	// and stream records (0: 1,000). A target the budget runs out in is
	// not read, with ErrLagBudget.
	MaxReads int
	// Timeout bounds the whole reading (0: 5s).
	Timeout time.Duration
}

// ErrLagBudget: a ReadLags call ran out of LagBounds.MaxReads or
// MaxSeries before it read a target.
var ErrLagBudget = errors.New("consumer lag: the per-collection bound on reads or series was reached")

const (
	defaultLagSeries  = 1000
	defaultLagReads   = 1000
	defaultLagTimeout = 5 * time.Second
)

// LagReading is what one ReadLags call read.
type LagReading struct {
	Lags    []Lag   // in target order, each target's by group; a (stream, group) named twice once
	Up      []bool  // per target: its lags were read
	Errs    []error // per target: why it was not read (nil if it was)
	Dropped int     // lags read (or named) but not returned
}

// ReadLags reads the lags the targets name from log, in order, within b.
// A target that cannot be read is not Up and has its error in Errs
// (loglet.ErrStreamNotFound, ErrLagBudget, a metastore error, ...).
func ReadLags(ctx context.Context, log TailLog, targets []LagTarget, b LagBounds, opts LagOptions) LagReading {
	maxSeries, maxReads, timeout := b.MaxSeries, b.MaxReads, b.Timeout
	if maxSeries <= 0 {
		maxSeries = defaultLagSeries
	}
	if maxReads <= 0 {
		maxReads = defaultLagReads
	}
	if timeout <= 0 {
		timeout = defaultLagTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := LagReading{Up: make([]bool, len(targets)), Errs: make([]error, len(targets))}
	if log == nil {
		for i := range targets {
			out.Errs[i] = errors.New("consumer lag: no log to read")
		}
		return out
	}
	budget := &budgetStore{Store: log.Metastore(), left: maxReads}
	blog := budgetLog{TailLog: log, meta: budget}
	seen := map[[2]string]bool{}
	for i, t := range targets {
		if len(out.Lags) >= maxSeries {
			out.Dropped += len(t.Groups)
			out.Errs[i] = ErrLagBudget
			continue
		}
		var lags []Lag
		var err error
		if len(t.Groups) == 0 {
			lags, err = Lags(ctx, blog, t.Stream, opts)
		} else {
			for _, g := range t.Groups {
				var l Lag
				if l, err = LagOf(ctx, blog, g, t.Stream, opts); err != nil {
					break
				}
				lags = append(lags, l)
			}
		}
		if err != nil {
			out.Dropped += len(t.Groups)
			out.Errs[i] = fmt.Errorf("consumer lag of stream %q: %w", t.Stream, err)
			continue
		}
		for _, l := range lags {
			k := [2]string{l.Offset.Stream, l.Offset.Group}
			switch {
			case seen[k]: // named twice: returned once
			case len(out.Lags) >= maxSeries:
				out.Dropped++
			default:
				seen[k] = true
				out.Lags = append(out.Lags, l)
			}
		}
		out.Up[i] = true
	}
	return out
}

// budgetLog is a TailLog whose metastore counts the reads against a
// budget.
type budgetLog struct {
	TailLog
	meta *budgetStore
}

func (l budgetLog) Metastore() metastore.Store { return l.meta }

// budgetStore refuses reads past its budget with ErrLagBudget. Lag
// readings write nothing; writes pass through uncounted.
type budgetStore struct {
	metastore.Store
	left int // not shared: one ReadLags call reads with one budgetStore, in one goroutine
}

func (b *budgetStore) spend() error {
	if b.left <= 0 {
		return ErrLagBudget
	}
	b.left--
	return nil
}

func (b *budgetStore) Get(ctx context.Context, key string) (metastore.Item, error) {
	if err := b.spend(); err != nil {
		return metastore.Item{}, err
	}
	return b.Store.Get(ctx, key)
}

func (b *budgetStore) Scan(ctx context.Context, prefix, startAfter string, limit int) ([]metastore.Item, error) {
	if err := b.spend(); err != nil {
		return nil, err
	}
	return b.Store.Scan(ctx, prefix, startAfter, limit)
}
