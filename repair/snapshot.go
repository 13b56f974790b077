package repair

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// SnapshotReport is what CheckSnapshots found in every bucket of a tails
// snapshot.
type SnapshotReport struct {
	Key string
	// Base is set for the full snapshot the checkpoint's delta builds on.
	Base   bool
	Copies []Copy // Good, Missing, Corrupt or Unreachable, in set order
	Good   int
	// Tails is the snapshot as decoded from a good copy (nil without one).
	Tails *absorb.Tails

	source []byte
	from   int
}

// Healthy reports whether every bucket holds a good copy.
func (r *SnapshotReport) Healthy() bool { return r.Good == len(r.Copies) && len(r.Copies) > 0 }

// Damaged lists the copies a repair would re-copy (missing or corrupt).
func (r *SnapshotReport) Damaged() []int {
	var out []int
	for i, c := range r.Copies {
		if c.State == Missing || c.State == Corrupt {
			out = append(out, i)
		}
	}
	return out
}

// Source names the bucket of the good copy a repair copies from ("" if
// none: a repair rebuilds the snapshot from the refs).
func (r *SnapshotReport) Source() string {
	if r.source == nil {
		return ""
	}
	return r.Copies[r.from].Bucket
}

// checkSnapshot reads every copy of the snapshot at key.
func (c Chain) checkSnapshot(ctx context.Context, key string, base bool) (SnapshotReport, error) {
	r := SnapshotReport{Key: key, Base: base}
	for i, b := range c.Set.Stores {
		obj, err := b.Get(ctx, key, 0, -1)
		if ctx.Err() != nil {
			return r, fmt.Errorf("repair: check %s: %w", key, ctx.Err())
		}
		cp := Copy{Bucket: bucketName(c.Set, i), Size: len(obj)}
		switch {
		case errors.Is(err, objstore.ErrNotFound):
			cp.State = Missing
		case err != nil:
			cp.State, cp.Err = Unreachable, err
		default:
			t, derr := absorb.DecodeTails(obj)
			if derr != nil {
				cp.State, cp.Err = Corrupt, derr
				break
			}
			cp.State = Good
			r.Good++
			if r.source == nil {
				r.source, r.from, r.Tails = obj, i, &t
			}
		}
		r.Copies = append(r.Copies, cp)
	}
	return r, nil
}

// CheckSnapshots reads every copy of the tails snapshot cp names and, when
// that is a delta, of the full snapshot it builds on (known only from a
// good copy of the delta). It returns nothing when cp names no snapshot.
// The error is only for an ended ctx.
func (c Chain) CheckSnapshots(ctx context.Context, cp absorb.Checkpoint) ([]SnapshotReport, error) {
	if cp.Tails == "" {
		return nil, nil
	}
	r, err := c.checkSnapshot(ctx, cp.Tails, false)
	if err != nil {
		return nil, err
	}
	out := []SnapshotReport{r}
	if r.Tails != nil && r.Tails.Base != "" {
		b, err := c.checkSnapshot(ctx, r.Tails.Base, true)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// SnapshotResult is what RepairSnapshots found and did for one snapshot.
type SnapshotResult struct {
	Report SnapshotReport
	// Rebuilt: no copy was sound, so the snapshot was rebuilt from the
	// refs (a full snapshot as of its position) and written at its key.
	Rebuilt bool
	Refused string
	Actions []Action
}

// Complete reports whether every damaged copy was put back.
func (r SnapshotResult) Complete() bool {
	if r.Refused != "" {
		return false
	}
	n := 0
	for _, a := range r.Actions {
		if a.Done {
			n++
		}
	}
	return n == len(r.Report.Damaged())
}

// RepairSnapshots repairs the tails snapshot the chain's checkpoint names,
// and the full snapshot it builds on: a copy that is missing or corrupt is
// re-copied from a good copy (the same bytes: delete, then PutIfAbsent);
// when no copy is sound the snapshot is rebuilt from the refs
// (RebuildTails) as a full snapshot of the same position, written at the
// same key (a delta that cannot be read is replaced by a full one, which
// needs no base). It refuses a rebuild while a bucket cannot be read (it
// may hold a good copy), and leaves a snapshot the checkpoint no longer
// names by the time it would write (see the package doc). Healthy
// snapshots give no result.
func (c Chain) RepairSnapshots(ctx context.Context) ([]SnapshotResult, error) {
	if err := c.Set.Validate(); err != nil {
		return nil, err
	}
	cp, _, err := absorb.ReadCheckpoint(ctx, c.Meta, c.Star, c.Class)
	if errors.Is(err, metastore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("repair: %w", err)
	}
	reports, err := c.CheckSnapshots(ctx, cp)
	if err != nil {
		return nil, err
	}
	var out []SnapshotResult
	for _, rep := range reports {
		if rep.Healthy() || len(rep.Damaged()) == 0 {
			continue
		}
		res := SnapshotResult{Report: rep}
		source := rep.source
		if source == nil {
			for _, cc := range rep.Copies {
				if cc.State == Unreachable {
					res.Refused = fmt.Sprintf("no sound copy was read, and %s could not be read (%v): it may hold one; run again when every bucket answers", cc.Bucket, cc.Err)
				}
			}
			if res.Refused != "" {
				out = append(out, res)
				continue
			}
			epoch, next, ok := parseTailsKey(rep.Key)
			if !ok {
				// A key of the layout rounds write now
				// (absorb.TailsRoundKey) names the checkpoint its round
				// advanced from, not the snapshot's own position. The
				// checkpoint's snapshot is as of the checkpoint; a base
				// rebuilt as of the checkpoint too reads the same under
				// the delta the checkpoint names, and under any later
				// delta over it: a delta holds every stream changed
				// since its base was written, and every other stream
				// has the same tail at both positions.
				epoch, next = cp.Epoch, cp.Next
			}
			t, err := c.RebuildTails(ctx, epoch, next)
			if err != nil {
				if ctx.Err() != nil {
					return out, ctx.Err()
				}
				res.Refused = fmt.Sprintf("cannot be rebuilt from the refs: %v", err)
				out = append(out, res)
				continue
			}
			source, res.Rebuilt = absorb.EncodeTails(t), true
		}
		// The checkpoint must still name the snapshot (or the delta over
		// this base): a superseded one is the absorb's to delete.
		now, _, err := absorb.ReadCheckpoint(ctx, c.Meta, c.Star, c.Class)
		if err != nil {
			return out, fmt.Errorf("repair: %w", err)
		}
		if now.Tails != cp.Tails {
			res.Refused = fmt.Sprintf("the checkpoint moved on meanwhile (it names %s now): left; run again to check the new one", now.Tails)
			out = append(out, res)
			continue
		}
		for _, i := range rep.Damaged() {
			a := Action{Bucket: rep.Copies[i].Bucket, Was: rep.Copies[i].State}
			c.recopySnapshot(ctx, c.Set.Stores[i], rep, source, res.Rebuilt, &a)
			res.Actions = append(res.Actions, a)
		}
		out = append(out, res)
	}
	return out, ctx.Err()
}

// recopySnapshot puts source into bucket b at rep.Key, deleting a corrupt
// copy first (read again before).
func (c Chain) recopySnapshot(ctx context.Context, b objstore.Store, rep SnapshotReport, source []byte, rebuilt bool, a *Action) {
	if a.Was == Corrupt {
		obj, err := b.Get(ctx, rep.Key, 0, -1)
		if err != nil && !errors.Is(err, objstore.ErrNotFound) {
			a.Note = fmt.Sprintf("re-read before the delete failed: %v", err)
			return
		}
		if err == nil {
			if _, derr := absorb.DecodeTails(obj); derr == nil {
				a.Done, a.Note = true, "left: the copy reads sound now"
				return
			}
			if err := b.Delete(ctx, rep.Key); err != nil {
				a.Note = fmt.Sprintf("delete of the corrupt copy failed: %v", err)
				return
			}
		}
	}
	what := "re-copied from " + rep.Source()
	if rebuilt {
		what = "rebuilt from the refs"
	}
	err := b.PutIfAbsent(ctx, rep.Key, source)
	if err == nil {
		a.Done, a.Copied = true, true
		a.Note = fmt.Sprintf("%s (%d bytes)", what, len(source))
		return
	}
	obj, gerr := b.Get(ctx, rep.Key, 0, -1)
	switch {
	case gerr != nil:
		a.Note = fmt.Sprintf("put failed (%v), and the read back too: %v", err, gerr)
	case bytes.Equal(obj, source):
		a.Done, a.Copied = true, !errors.Is(err, objstore.ErrExists)
		a.Note = fmt.Sprintf("%s (%d bytes)", what, len(source))
	default:
		if _, derr := absorb.DecodeTails(obj); derr == nil {
			a.Done, a.Note = true, "a sound copy landed first: left"
		} else {
			a.Note = fmt.Sprintf("an unreadable object landed first (%v): left", derr)
		}
	}
}

// parseTailsKey returns the position absorb.TailsKey put in key (the
// layout of older versions: ok is false for absorb.TailsRoundKey's).
func parseTailsKey(key string) (epoch, next uint64, ok bool) {
	p := strings.Split(key, "/")
	if len(p) != 5 || p[0] != "snapshots" {
		return 0, 0, false
	}
	n, _, _ := strings.Cut(p[4], ".")
	e, err1 := strconv.ParseUint(p[3], 10, 64)
	s, err2 := strconv.ParseUint(n, 10, 64)
	return e, s, err1 == nil && err2 == nil
}

// RebuildTails computes the chain's tails as of (epoch, next) from the
// span refs in the metastore (absorb.RebuildTails, the takeover's own way
// back from a damaged snapshot): for every stream, deleted incarnations
// included, the end and last timestamp of its extents in the chain's slots
// before (epoch, next). Refs of later rounds, a pending one included, are
// left out.
func (c Chain) RebuildTails(ctx context.Context, epoch, next uint64) (absorb.Tails, error) {
	return absorb.RebuildTails(ctx, c.Meta, c.Star, c.Class, absorb.Checkpoint{Epoch: epoch, Next: next})
}
