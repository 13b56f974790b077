package work

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
	"github.com/flightlog/flightlog/loglet/internal/settlecore"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/settle"
)

// settle runs one settle pass from the trim cursor as stored: the pass's
// core (loglet/internal/settlecore) decides, SettleExec executes.
func (e *Env) settle(ctx context.Context, r chaincore.Settle) chaincore.SettlePassed {
	if e.SettleTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.SettleTimeout)
		defer cancel()
	}
	cfg := e.SettleConfig(r.Epoch)
	hold := e.PassMemory.hold()
	pass := newSettlePass(cfg, settle.Pass{Upto: r.Upto, Checkpoint: r.Checkpoint, Cuts: r.Cuts,
		Known: r.Known, KnownFrom: r.KnownFrom, KnownOK: r.KnownOK, Prev: r.Prev, DoomedKnown: r.DoomedKnown, DoomedDue: r.DoomedDue, Idle: r.Idle}, false, hold != nil)
	defer hold.Release()
	res, err := DriveSettle(ctx, SettleExec{Cfg: cfg, Hold: hold}, pass)
	return chaincore.SettlePassed{Result: res, Err: err}
}

// SettleConfig is the settle configuration of a pass by this chain's leader
// of epoch.
func (e *Env) SettleConfig(epoch uint64) settle.Config {
	cfg := settle.Config{Meta: e.Meta, Star: e.Star, Class: e.Class, Owner: e.Owner, Epoch: epoch, Transit: e.Set(),
		Settled: e.Settled, Codec: e.SettleCodec, Liveness: e.Liveness, DoomedGrace: e.SettleGrace}
	if e.Now != nil {
		cfg.Now = e.Now
	}
	return cfg.WithDefaults()
}

// NewSettlePass is the core of one pass of cfg's chain, asked p (from p's
// trim cursor if trimKnown, else from the stored one), at cfg.Now().
func NewSettlePass(cfg settle.Config, p settle.Pass, trimKnown bool) *settlecore.Pass {
	return newSettlePass(cfg, p, trimKnown, false)
}

// newSettlePass is NewSettlePass; memory: its buffers are accounted in a
// budget (SettleExec.Hold), so it asks for them (settlecore.HoldMemory).
func newSettlePass(cfg settle.Config, p settle.Pass, trimKnown, memory bool) *settlecore.Pass {
	cfg = cfg.WithDefaults()
	grace := cfg.DoomedGrace
	if grace < 0 {
		grace = 0
	}
	return settlecore.New(settlecore.Config{Star: cfg.Star, Class: cfg.Class, Owner: cfg.Owner, Epoch: cfg.Epoch,
		TransitK: cfg.Transit.K(), SettledBuckets: len(cfg.Settled), DoomedGrace: grace, MaxCommitOps: metastore.MaxCommitOps(cfg.Meta),
		MaxCommitBytes: metastore.MaxCommitBytes(cfg.Meta), OpBytes: func(op metastore.Op) int { return metastore.OpBytes(cfg.Meta, op) },
		Codec: cfg.Codec, FrameBytes: cfg.FrameBytes, TargetBytes: cfg.TargetBytes, Liveness: cfg.Liveness != nil, ReadAhead: cfg.Transit.ReadAhead, Memory: memory},
		settlecore.Input{TrimKnown: trimKnown, Trim: p.Trim, TrimVersion: p.TrimVersion, Upto: p.Upto, Checkpoint: p.Checkpoint, Cuts: p.Cuts, MaxSlots: p.MaxSlots,
			Known: p.Known, KnownFrom: p.KnownFrom, KnownOK: p.KnownOK, Prev: p.Prev, DoomedKnown: p.DoomedKnown, DoomedDue: p.DoomedDue, Idle: p.Idle},
		cfg.Now())
}

// RunSettle runs one settle pass of cfg's chain from p.Trim (the cursor as
// the caller read it) to its end. It returns what the pass did even with
// an error; the next pass resumes from the cursor the result carries.
func RunSettle(ctx context.Context, cfg settle.Config, p settle.Pass) (settle.Result, error) {
	cfg = cfg.WithDefaults()
	return DriveSettle(ctx, SettleExec{Cfg: cfg}, NewSettlePass(cfg, p, true))
}

// DriveSettle executes pass's requests one after the other until it is
// done, logging what it asks to, and measures the time of each phase's
// requests and of the core's steps (settle.Result.Time).
func DriveSettle(ctx context.Context, x SettleExec, pass *settlecore.Pass) (settle.Result, error) {
	spent := map[string]time.Duration{}
	for {
		for _, l := range pass.Logs() {
			x.Cfg.Logger.Warn(l.Msg, l.Attrs...)
		}
		req := pass.Next()
		if req == nil {
			_, res, err := pass.Done()
			res.Time = spent
			return res, err
		}
		phase, t0 := pass.Phase(), x.Cfg.Now()
		ev := x.Do(ctx, req)
		t1 := x.Cfg.Now()
		pass.Step(t1, ev)
		spent[phase] += t1.Sub(t0)
		spent["core"] += x.Cfg.Now().Sub(t1)
	}
}

var errPassFull = errors.New("work: the settle pass holds MaxPassBytes, or what the memory budget has")

// SettleExec executes a settle pass's requests against Cfg's stores: each
// request is one I/O call (DeleteSlots: chain.Trim over one epoch's range; ReadSlots: chain.Walk;
// Parallel: its calls at once; Wait: a timer) and returns its event. It
// holds no decision. Cfg must have its defaults (settle.Config.WithDefaults).
type SettleExec struct {
	Cfg settle.Config
	// Hold, if set, accounts the slot objects the pass reads in the
	// chain's memory budget (PassMemory); the caller releases it once the
	// pass is done.
	Hold *PassHold
}

// Do executes req.
func (x SettleExec) Do(ctx context.Context, req settlecore.Request) settlecore.Event {
	c := x.Cfg
	switch r := req.(type) {
	case settlecore.ReadTrim:
		t, ver, err := chain.ReadTrimCursor(ctx, c.Meta, c.Star, c.Class)
		return settlecore.TrimRead{Cursor: t, Version: ver, Err: err}
	case settlecore.ReadCheckpoint:
		cp, ver, err := absorb.ReadCheckpoint(ctx, c.Meta, c.Star, c.Class)
		return settlecore.CheckpointRead{Owner: cp.Owner, Epoch: cp.OwnerEpoch, Version: ver, Err: err}
	case settlecore.Commit:
		vs, err := c.Meta.Commit(ctx, r.Ops)
		return settlecore.Committed{Versions: vs, Err: err}
	case settlecore.DeleteSlots:
		n, err := chain.Trim(ctx, c.Transit, c.Star, c.Class, r.Epoch, r.From, r.To)
		return settlecore.SlotsDeleted{Deleted: n, Err: err}
	case settlecore.ScanMarkers:
		items, err := c.Meta.Scan(ctx, settle.MarkerPrefix(c.Star, c.Class), r.After, r.Limit)
		return settlecore.MarkersScanned{Items: items, Err: err}
	case settlecore.GetRef:
		it, err := c.Meta.Get(ctx, r.Key)
		if errors.Is(err, metastore.ErrNotFound) {
			return settlecore.RefGot{}
		}
		return settlecore.RefGot{Item: it, Found: err == nil, Err: err}
	case settlecore.DeleteObject:
		err := c.Settled[r.Bucket].Delete(ctx, r.Key)
		if errors.Is(err, objstore.ErrNotFound) {
			err = nil
		}
		return settlecore.ObjectDeleted{Err: err}
	case settlecore.FenceEpoch:
		fctx, cancel := context.WithTimeout(ctx, settle.DeriveCutPatience)
		defer cancel()
		res, err := chain.Fence(fctx, c.Transit, c.Star, c.Class, r.Epoch, r.From, envelope.NewNonce(), chain.FenceOptions{Parallel: 1})
		return settlecore.EpochFenced{Cut: res.Cut, Err: err}
	case settlecore.ReadSlots:
		var out settlecore.SlotsRead
		var bytes int64
		err := chain.Walk(ctx, c.Transit, c.Star, c.Class, r.Epoch, r.From, r.To, func(slot uint64, obj []byte, frames []envelope.FrameInfo) error {
			if bytes >= r.MaxBytes {
				out.Full = true
				return errPassFull
			}
			if err := x.Hold.take(ctx, int64(len(obj))); err != nil {
				out.Full = errors.Is(err, errPassFull) // the budget is used: settle what is held
				return err
			}
			out.Slots = append(out.Slots, settle.Slot{Pos: chain.Position{Epoch: r.Epoch, Next: slot}, Object: obj, Frames: frames})
			bytes += int64(len(obj))
			return nil
		})
		if !errors.Is(err, errPassFull) {
			out.Err = err
		}
		return out
	case settlecore.ScanRefs:
		items, err := c.Meta.Scan(ctx, r.Prefix, r.After, r.Limit)
		return settlecore.RefsScanned{Items: items, Err: err}
	case settlecore.CheckLive:
		if c.Liveness == nil {
			return settlecore.Live{Live: true}
		}
		live, trimSeq, err := c.Liveness(ctx, r.Stream)
		return settlecore.Live{Live: live, TrimSeq: trimSeq, Err: err}
	case settlecore.GetRange:
		set := c.Transit.Stores
		if r.Settled {
			set = c.Settled
		}
		data, err := set[r.Bucket].Get(ctx, r.Key, r.Offset, r.Length)
		return settlecore.RangeGot{Data: data, Err: err}
	case settlecore.PutObject:
		return settlecore.ObjectPut{Err: c.Settled[r.Bucket].PutIfAbsent(ctx, r.Key, r.Body)}
	case settlecore.GetObject:
		body, err := c.Settled[r.Bucket].Get(ctx, r.Key, 0, -1)
		return settlecore.ObjectGot{Body: body, Err: err}
	case settlecore.Parallel:
		out := settlecore.ParallelDone{Puts: make([]settlecore.ObjectPut, len(r.Puts)), Deletes: make([]settlecore.ObjectDeleted, len(r.Deletes)),
			Gets: make([]settlecore.RangeGot, len(r.Gets))}
		// At most r.Limit calls at once (0: all), a sliding window: a slow
		// call holds one place, not a whole batch.
		limit := r.Limit
		if limit <= 0 {
			limit = len(r.Gets) + len(r.Puts) + len(r.Deletes)
		}
		sem := make(chan struct{}, max(1, limit))
		var wg sync.WaitGroup
		run := func(f func()) {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				f()
			}()
		}
		for i, q := range r.Gets {
			run(func() { out.Gets[i] = x.Do(ctx, q).(settlecore.RangeGot) })
		}
		for i, q := range r.Puts {
			run(func() { out.Puts[i] = x.Do(ctx, q).(settlecore.ObjectPut) })
		}
		for i, q := range r.Deletes {
			run(func() { out.Deletes[i] = x.Do(ctx, q).(settlecore.ObjectDeleted) })
		}
		wg.Wait()
		return out
	case settlecore.HoldMemory:
		return settlecore.MemoryHeld{Err: x.Hold.setBuffers(ctx, r.Bytes)}
	case settlecore.Wait:
		t := time.NewTimer(r.For)
		defer t.Stop()
		select {
		case <-t.C:
			return settlecore.Waited{}
		case <-ctx.Done():
			return settlecore.Waited{Err: ctx.Err()}
		}
	}
	panic("work: unknown settle request") // a request type added without its execution: a bug here
}
