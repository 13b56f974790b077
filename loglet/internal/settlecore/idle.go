package settlecore

import (
	"errors"
	"fmt"
	"slices"

	absorb "github.com/flightlog/flightlog/absorb/absorbval"
	chain "github.com/flightlog/flightlog/chain/chainval"
	settle "github.com/flightlog/flightlog/settle/settleval"
)

// Merging idle streams' tails. A new settled object absorbs the stream's
// small settled objects just before it (mergeable), so a stream that keeps
// writing keeps few; one that stops keeps the small objects its last
// passes wrote for ever. The leader names the streams it found idle
// (Input.Idle: the last settled ref of each, from its table of recently
// settled streams, no scan); the pass walks each one's tail back from that
// ref (a GetRef an object) while the objects are small, and merges two or
// more into one by today's merge: render (from ranged GETs of the objects
// merged), name it in a pending chunk marker, PUT, repoint by
// compare-and-swap (the new ref at the last one's key; the others
// deleted; no marker at the new object's key), doom the objects absorbed
// in one chunk marker.

// maxIdleTail bounds the objects one idle merge absorbs.
const maxIdleTail = 2 * maxMerges

// idleMerge merges the tails of the idle streams the leader named (at
// most settle.MaxIdlePerPass), then goes on. A stream whose merge fails
// is left out of Result.IdleLooked (the leader asks again); a deposed
// pass ends.
func (p *Pass) idleMerge(then func()) {
	idle := p.in.Idle
	if len(idle) == 0 {
		then()
		return
	}
	if len(idle) > settle.MaxIdlePerPass {
		idle = idle[:settle.MaxIdlePerPass]
	}
	r := &slotsRun{p: p, objects: map[string][]byte{}, fetched: map[string][]byte{}, failed: map[string]bool{}}
	// most: a merged object costs an op (its ref's delete or put), plus
	// the new object's marker check, the Commit's doomed chunk marker and
	// the guard.
	most := min(maxIdleTail, p.cfg.MaxCommitOps-3)
	var errs []error
	end := func() {
		r.renderPlanned(func(err error) {
			errs = append(append(errs, r.errs...), err)
			r.flushPrepared(func(err error) {
				errs = append(errs, err)
				r.flush(func(err error) {
					errs = append(errs, err)
					p.res.IdleMerges += r.res.Objects
					p.res.Objects += r.res.Objects
					p.res.Merged += r.res.Merged
					p.res.RawBytes += r.res.RawBytes
					p.res.StoredBytes += r.res.StoredBytes
					for _, k := range p.res.Settled {
						// The slots this pass settles next may hold the
						// stream's records: its settled refs end with this one.
						kept := slices.DeleteFunc(p.prev[k.Ref.Stream], func(f ref) bool { return f.r.Start >= k.Ref.Start && f.r.End <= k.Ref.End })
						p.prev[k.Ref.Stream] = append(kept, ref{key: k.Key, ver: k.Version, r: k.Ref})
					}
					for _, k := range idle {
						if id := k.Ref.Stream; !r.failed[id] && !slices.Contains(p.res.IdleLooked, id) {
							p.res.IdleLooked = append(p.res.IdleLooked, id)
						}
					}
					if r.res.Merged > 0 {
						// The objects absorbed are doomed: a pass deletes them
						// once their grace has passed.
						p.res.DoomedWaiting += r.res.Merged
						if due := p.now.Add(p.cfg.DoomedGrace); p.res.DoomedDue.IsZero() || due.Before(p.res.DoomedDue) {
							p.res.DoomedDue = due
						}
					}
					err = errors.Join(errs...)
					if errors.Is(err, settle.ErrDeposed) {
						p.finish(err)
						return
					}
					if err != nil {
						p.logs = append(p.logs, Log{Msg: "settle: an idle stream's small objects not merged; the leader asks again", Attrs: []any{"star", p.cfg.Star, "class", p.cfg.Class.String(), "err", err}})
					}
					then()
				})
			})
		})
	}
	if most < 2 {
		end() // the backend's Commits are too small to merge in
		return
	}
	var next func(i int)
	next = func(i int) {
		if i == len(idle) {
			end()
			return
		}
		k := idle[i]
		id := k.Ref.Stream
		p.phase = "idle-tail"
		last := ref{key: k.Key, ver: k.Version, r: k.Ref}
		raw := rawBytes(k.Ref)
		if !k.Ref.Settled() || !oneObject(k.Ref) || !settle.SmallObject(raw, p.cfg.TargetBytes) {
			next(i + 1) // nothing small at its tail
			return
		}
		r.liveness(id, func(live bool, trimSeq uint64, err error) {
			switch {
			case err != nil:
				r.failed[id] = true
				errs = append(errs, fmt.Errorf("stream %q: %w", id, err))
				next(i + 1)
				return
			case !live || k.Ref.End <= trimSeq:
				next(i + 1) // deleted or trimmed whole: its refs go otherwise
				return
			}
			r.idleTail(id, k.Ref.Start, raw, trimSeq, most-1, []ref{last}, func(tail []ref, err error) {
				if err != nil {
					r.failed[id] = true
					errs = append(errs, fmt.Errorf("stream %q: %w", id, err))
					next(i + 1)
					return
				}
				if len(tail) >= 2 {
					r.planned = append(r.planned, prepared{id: id, key: chain.SettledKey(id, tail[0].r.Start, last.r.End), all: tail, merged: len(tail),
						start: tail[0].r.Start, end: last.r.End})
				}
				next(i + 1)
			})
		})
	}
	next(0)
}

// idleTail gives then the stream's small settled objects' refs that end
// where out begins, oldest first, prepended to out (more: how many more it
// may take), while they are small, their sum within TargetBytes, and above
// the stream's trim point.
func (r *slotsRun) idleTail(id string, start uint64, raw int, trimSeq uint64, more int, out []ref, then func([]ref, error)) {
	if more <= 0 || start == 0 || start <= trimSeq {
		then(out, nil)
		return
	}
	r.p.call(GetRef{Key: chain.RefKey(id, start)}, func(ev Event) {
		rg := ev.(RefGot)
		switch {
		case rg.Err != nil:
			then(nil, rg.Err)
			return
		case !rg.Found:
			then(out, nil)
			return
		}
		sr, err := absorb.DecodeRef(rg.Item.Value)
		if err != nil {
			then(nil, fmt.Errorf("ref %s: %w", rg.Item.Key, err))
			return
		}
		pr := rawBytes(sr)
		if !sr.Settled() || sr.End != start || !oneObject(sr) || !settle.SmallObject(pr, r.p.cfg.TargetBytes) || raw+pr > r.p.cfg.TargetBytes || sr.Start < trimSeq {
			then(out, nil)
			return
		}
		out = append([]ref{{key: rg.Item.Key, ver: rg.Item.Version, r: sr}}, out...)
		r.idleTail(id, sr.Start, raw+pr, trimSeq, more-1, out, then)
	})
}
