package absorb

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/flightlog/flightlog/absorb/absorbval"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/internal/invariants"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// Committer writes rounds for one chain and holds the checkpoint as last
// written. It is not safe for concurrent use: one absorb loop owns it.
//
// What it holds is a value (Held): a caller that keeps the checkpoint
// itself (a chain's core) builds a committer for one call from the value
// it owns (Resume) and takes the new value back after it (Held), so that
// no committer outlives the call and nothing mutable is shared.
type Committer struct {
	meta  metastore.Store
	star  string
	class chain.Class
	owner string
	epoch uint64 // the owner's epoch, in the seal

	cp  Checkpoint
	ver metastore.Version

	progress progress // CommitDooming's, across its calls

	// Requests counts metastore requests this committer made.
	Requests uint64
	// RefVersions are the versions of the refs the last CommitAtomic (or
	// CommitDooming), or the last CommitRefs (one chunk of a split round),
	// wrote, in its refs' order, when it wrote them all in one Commit at
	// its first attempt (nil otherwise: a split round's CommitDooming, a
	// replay, a retry): what settlement needs to repoint them without
	// reading them back.
	RefVersions []metastore.Version
}

// Resume returns a committer over h, a checkpoint that carries owner's seal
// (h.Checkpoint.OwnerEpoch is the sealed epoch), for one call: Held then
// returns what it holds after that call.
func Resume(ms metastore.Store, star string, c chain.Class, owner string, h Held) *Committer {
	return &Committer{meta: ms, star: star, class: c, owner: owner, epoch: h.Checkpoint.OwnerEpoch, cp: h.Checkpoint, ver: h.Version}
}

// Held returns what the committer holds now.
func (c *Committer) Held() Held { return Held{Checkpoint: c.cp, Version: c.ver} }

// InitCheckpoint creates the checkpoint of a chain that has none, sealed by
// owner at epoch, positioned at (epoch, 0). An ambiguous failure is
// resolved by re-reading.
func InitCheckpoint(ctx context.Context, ms metastore.Store, star string, c chain.Class, owner string, epoch uint64) (*Committer, error) {
	cm := &Committer{meta: ms, star: star, class: c, owner: owner, epoch: epoch}
	cp := Checkpoint{Epoch: epoch, Owner: owner, OwnerEpoch: epoch, Counter: 1}
	val, _ := json.Marshal(cp)
	key := chain.CheckpointKey(star, c)
	v, err := ms.Put(ctx, key, val, metastore.NoVersion)
	cm.Requests++
	if err == nil {
		cm.cp, cm.ver = cp, v
		return cm, nil
	}
	got, gv, rerr := ReadCheckpoint(ctx, ms, star, c)
	cm.Requests++
	if rerr != nil {
		return nil, fmt.Errorf("absorb: create checkpoint of %s/%s: %w", star, c, err)
	}
	if got.Owner == owner && got.OwnerEpoch == epoch && got.Counter == 1 && got.Next == 0 {
		cm.cp, cm.ver = got, gv
		return cm, nil
	}
	return nil, fmt.Errorf("absorb: create checkpoint of %s/%s: %w, sealed by %q at epoch %d: %w", star, c, ErrCheckpointExists, got.Owner, got.OwnerEpoch, err)
}

// ResumeCommitter returns a committer over an existing checkpoint that
// already carries this owner's seal (cp and ver as read after sealing).
func ResumeCommitter(ms metastore.Store, star string, c chain.Class, owner string, epoch uint64, cp Checkpoint, ver metastore.Version) *Committer {
	return &Committer{meta: ms, star: star, class: c, owner: owner, epoch: epoch, cp: cp, ver: ver}
}

// ReadCheckpoint returns a chain's checkpoint and its version.
func ReadCheckpoint(ctx context.Context, ms metastore.Store, star string, c chain.Class) (Checkpoint, metastore.Version, error) {
	it, err := ms.Get(ctx, chain.CheckpointKey(star, c))
	if err != nil {
		return Checkpoint{}, "", fmt.Errorf("absorb: read checkpoint of %s/%s: %w", star, c, err)
	}
	cp, err := DecodeCheckpoint(it.Value)
	return cp, it.Version, err
}

// Checkpoint returns the checkpoint as last written by this committer.
func (c *Committer) Checkpoint() Checkpoint { return c.cp }

// Commit writes one round: refs (each created only if absent) and the
// checkpoint advanced to (round.Epoch, round.To) pointing at tailsKey. It is
// one atomic metastore Commit when the backend takes that many ops
// (metastore.MaxCommitOps) and bytes (metastore.MaxCommitBytes, counted by
// metastore.OpBytes); otherwise it records the round as pending, writes
// the refs in chunks that fit both limits, each with a check of the seal,
// and then advances. It returns ErrDeposed (wrapped) if the seal changed,
// and a *RefTooLargeError (wrapping metastore.ErrTooLarge), before writing
// anything, if one ref cannot fit any chunk: the round must then be planned
// over fewer slots. Any other error leaves the round to be retried with the
// same arguments: a retry is idempotent.
//
// The checkpoint keeps its list of doomed snapshots (Checkpoint.Doomed)
// and records no base for tailsKey (Checkpoint.TailsBase); CommitDooming
// sets both.
func (c *Committer) Commit(ctx context.Context, round Round, refs []SpanRef, tailsKey string) error {
	return c.CommitDooming(ctx, round, refs, tailsKey, "", c.cp.Doomed)
}

// CommitDooming is Commit, the checkpoint it advances recording tailsBase
// as the full snapshot tailsKey is a delta over ("" for a full snapshot:
// Checkpoint.TailsBase), and doomed as its list of tails snapshots no
// longer needed and not yet deleted from every bucket (Checkpoint.Doomed):
// so the list is durable as soon as the round that supersedes them is, and
// a successor deletes what its predecessor could not, the base of a delta
// it cannot read included. More than MaxDoomedSnapshots is refused before
// anything is written.
//
// It sequences the one-Commit steps (CommitAtomic, then, for a round that
// does not fit, MarkPending, CommitRefs per chunk, Advance) for callers
// that keep their committer across calls; a chain's core sequences the
// steps itself. A retry of a split round on the same committer resumes
// after the chunks it wrote.
func (c *Committer) CommitDooming(ctx context.Context, round Round, refs []SpanRef, tailsKey, tailsBase string, doomed []string) error {
	chunks, err := c.CommitAtomic(ctx, round, refs, tailsKey, tailsBase, doomed)
	if err != nil || chunks == nil {
		return err
	}
	// Someone else's pending round: any of its refs may be there.
	replay := c.cp.Pending != nil && *c.cp.Pending == round
	if err := c.MarkPending(ctx, round); err != nil {
		return err
	}
	p := &c.progress
	if p.Round != round || p.N != len(refs) || p.Last != refs[len(refs)-1].Key() {
		*p = progress{Round: round, N: len(refs), Last: refs[len(refs)-1].Key()}
		if replay {
			p.Tried = len(refs)
		}
	}
	lo := 0
	for _, hi := range chunks {
		if hi <= p.Written {
			lo = hi
			continue
		}
		mayExist := lo < p.Tried
		p.Tried = max(p.Tried, hi)
		if err := c.CommitRefs(ctx, round, refs[lo:hi], mayExist); err != nil {
			return err
		}
		p.Written = hi
		lo = hi
	}
	return c.Advance(ctx, round, tailsKey, tailsBase, doomed)
}

// progress is how far CommitDooming got with a split round: the refs
// before Written are there, and no chunk at or past Tried was sent. A
// retry of the same round resumes at Written and checks only the refs it
// may have sent, rather than every ref of the round: a round of thousands
// of refs under a flaky metastore would otherwise fail its checks at every
// retry and never finish.
type progress struct {
	Round          Round
	N              int    // refs in the round
	Last           string // the key of its last ref (the same refs)
	Written, Tried int
}

// CommitAtomic writes round in one metastore Commit, its refs and the
// checkpoint advanced as CommitDooming describes, if the backend takes it
// in one (absorbval.RoundFits). If it does not, it writes nothing and
// returns the ends of the chunks the refs split into
// (absorbval.PlanChunks): the round is then committed in steps,
// MarkPending, CommitRefs per chunk, Advance. It refuses, before writing
// anything, more than MaxDoomedSnapshots, a ref that fits no chunk
// (*RefTooLargeError), a backend of fewer than two ops a Commit, and a
// split round while another round is pending.
func (c *Committer) CommitAtomic(ctx context.Context, round Round, refs []SpanRef, tailsKey, tailsBase string, doomed []string) (chunks []int, err error) {
	if len(doomed) > MaxDoomedSnapshots {
		return nil, fmt.Errorf("absorb: commit round [%d, %d): %d doomed snapshots, over the checkpoint's bound of %d", round.From, round.To, len(doomed), MaxDoomedSnapshots)
	}
	next := absorbval.AdvancedCheckpoint(c.cp, round, tailsKey, tailsBase, doomed)
	c.RefVersions = nil
	maxOps, maxBytes := metastore.MaxCommitOps(c.meta), metastore.MaxCommitBytes(c.meta)
	ops, err := c.refOps(refs)
	if err != nil {
		return nil, err
	}
	sizes := c.opSizes(ops)
	if absorbval.RoundFits(maxOps, maxBytes, sizes, metastore.OpBytes(c.meta, c.checkpointOp(next))) {
		return nil, c.commitAtomic(ctx, round, refs, ops, next, metastore.Op{}, nil)
	}
	if c.cp.Pending != nil && *c.cp.Pending != round {
		return nil, fmt.Errorf("absorb: round [%d, %d) while round [%d, %d) is pending: replay the pending round first", round.From, round.To, c.cp.Pending.From, c.cp.Pending.To)
	}
	if maxOps != 0 && maxOps < 2 {
		return nil, fmt.Errorf("absorb: backend allows %d ops per commit; a round needs at least 2", maxOps)
	}
	// Plan the chunks before anything is written: a ref that fits no chunk
	// must not leave a pending round that no replay can finish.
	check := metastore.OpBytes(c.meta, c.sealCheckOp())
	chunks, big := absorbval.PlanChunks(maxOps, maxBytes, sizes, check)
	if big >= 0 {
		return nil, &RefTooLargeError{Round: round, Stream: refs[big].Stream, Key: ops[big].Key, Extents: len(refs[big].Extents), Bytes: sizes[big] + check, Limit: maxBytes}
	}
	return chunks, nil
}

// CommitAtomicSealing is CommitAtomic with a clean seal of rec's epoch
// (read at version) at cut in the same Commit (SealEpoch's write): a clean
// close's last round, after which nothing is left to absorb, so the close
// makes one metastore write where it made two. sealed reports whether the
// seal is recorded, and at which version of the epoch record. It writes
// the round alone, as CommitAtomic does (or returns its chunks), when the
// round and the seal do not fit one Commit, and reports the seal not
// recorded whenever the Commit's outcome was resolved by re-reading the
// checkpoint (the round applied, the seal with it, at a version it did not
// learn): the caller then calls SealEpoch, which finds its record there.
// A failure (the round not written) is CommitAtomic's.
func (c *Committer) CommitAtomicSealing(ctx context.Context, round Round, refs []SpanRef, tailsKey, tailsBase string, doomed []string, rec chain.EpochRecord, version metastore.Version, cut uint64) (chunks []int, sealed metastore.Version, err error) {
	sealedRec, done, err := chain.PrepareSeal(rec, cut)
	if err != nil || done || len(doomed) > MaxDoomedSnapshots {
		chunks, err := c.CommitAtomic(ctx, round, refs, tailsKey, tailsBase, doomed)
		return chunks, "", err
	}
	val, err := json.Marshal(sealedRec)
	if err != nil {
		return nil, "", err
	}
	seal := metastore.Op{Kind: metastore.OpPut, Key: chain.EpochKey(c.star, c.class), Value: val, Expect: version}
	next := absorbval.AdvancedCheckpoint(c.cp, round, tailsKey, tailsBase, doomed)
	c.RefVersions = nil
	ops, err := c.refOps(refs)
	if err != nil {
		return nil, "", err
	}
	sizes := append(c.opSizes(ops), metastore.OpBytes(c.meta, seal))
	if !absorbval.RoundFits(metastore.MaxCommitOps(c.meta), metastore.MaxCommitBytes(c.meta), sizes, metastore.OpBytes(c.meta, c.checkpointOp(next))) {
		chunks, err := c.CommitAtomic(ctx, round, refs, tailsKey, tailsBase, doomed)
		return chunks, "", err
	}
	var vs []metastore.Version
	err = c.commitAtomic(ctx, round, refs, ops, next, seal, &vs)
	if err != nil || len(vs) == 0 {
		return nil, "", err
	}
	return nil, vs[len(vs)-1], nil
}

// commitAtomic is CommitAtomic's Commit, once the round fits; with a seal
// (its op, not Kind zero), the epoch record's put goes last in the same
// Commit, and *sealed gets the Commit's versions when one applied.
func (c *Committer) commitAtomic(ctx context.Context, round Round, refs []SpanRef, ops []metastore.Op, next Checkpoint, seal metastore.Op, sealed *[]metastore.Version) error {
	for attempt := 0; ; attempt++ {
		all := append(ops[:len(ops):len(ops)], c.checkpointOp(next))
		if sealed != nil {
			all = append(all, seal)
		}
		vs, err := c.meta.Commit(ctx, all)
		c.Requests++
		if err == nil {
			c.cp, c.ver = next, vs[len(ops)]
			if attempt == 0 && len(ops) == len(refs) {
				c.RefVersions = vs[:len(refs):len(refs)]
			}
			if sealed != nil {
				*sealed = vs
			}
			return nil
		}
		applied, rerr := c.resolve(ctx, next)
		if rerr != nil || applied {
			return rerr
		}
		if !errors.Is(err, metastore.ErrConflict) || attempt > 0 {
			return fmt.Errorf("absorb: commit round [%d, %d): %w", round.From, round.To, err)
		}
		// Unchanged checkpoint, so a ref exists (a replay): drop the
		// refs already there and try once more.
		if refs, ops, err = c.missingRefs(ctx, refs, ops); err != nil {
			return err
		}
	}
}

// MarkPending records round as pending in the checkpoint (one
// compare-and-swap), a split round's first step, so that a successor
// replays exactly it. A checkpoint that already records it is left as it
// is; one that records another round is refused.
func (c *Committer) MarkPending(ctx context.Context, round Round) error {
	if c.cp.Pending != nil {
		if *c.cp.Pending == round {
			return nil
		}
		return fmt.Errorf("absorb: round [%d, %d) while round [%d, %d) is pending: replay the pending round first", round.From, round.To, c.cp.Pending.From, c.cp.Pending.To)
	}
	return c.casCheckpoint(ctx, absorbval.PendingCheckpoint(c.cp, round))
}

// CommitRefs writes one chunk of a split round's refs (as CommitAtomic
// planned them) in one Commit with a check of the seal, so a deposed
// leader writes no refs. mayExist says an earlier attempt may have sent
// some of them (or they are a predecessor's pending round's): those that
// exist are left out first. On a conflict with an unchanged seal it drops
// the refs that exist and retries once.
func (c *Committer) CommitRefs(ctx context.Context, round Round, refs []SpanRef, mayExist bool) error {
	ops, err := c.refOps(refs)
	if err != nil {
		return err
	}
	if err := c.commitChunk(ctx, refs, ops, mayExist); err != nil {
		return fmt.Errorf("absorb: write refs of round [%d, %d): %w", round.From, round.To, err)
	}
	return nil
}

// Advance moves the checkpoint past a split round whose refs are all
// written (one compare-and-swap), as CommitDooming describes: the round
// is no longer pending.
func (c *Committer) Advance(ctx context.Context, round Round, tailsKey, tailsBase string, doomed []string) error {
	if len(doomed) > MaxDoomedSnapshots {
		return fmt.Errorf("absorb: advance past round [%d, %d): %d doomed snapshots, over the checkpoint's bound of %d", round.From, round.To, len(doomed), MaxDoomedSnapshots)
	}
	return c.casCheckpoint(ctx, absorbval.AdvancedCheckpoint(c.cp, round, tailsKey, tailsBase, doomed))
}

// opSizes returns each op's size as the metastore counts it.
func (c *Committer) opSizes(ops []metastore.Op) []int {
	out := make([]int, len(ops))
	for i, op := range ops {
		out[i] = metastore.OpBytes(c.meta, op)
	}
	return out
}

// RefTooLargeError is the error Commit returns, before writing anything,
// when one ref's op with the seal check that every chunk carries exceeds
// the metastore's MaxCommitBytes: no split of the round can write it. The
// round must be planned over fewer slots (fewer extents per ref). It wraps
// metastore.ErrTooLarge.
type RefTooLargeError struct {
	Round   Round
	Stream  string
	Key     string // the ref's metastore key
	Extents int
	Bytes   int // metastore.OpBytes of the ref's op plus the seal check's
	Limit   int // the metastore's MaxCommitBytes
}

func (e *RefTooLargeError) Error() string {
	return fmt.Sprintf("absorb: round [%d, %d): the ref of stream %q at %s (%d extents) takes %d bytes with the seal check, over the metastore's limit of %d per commit: plan the round over fewer slots: %v",
		e.Round.From, e.Round.To, e.Stream, e.Key, e.Extents, e.Bytes, e.Limit, metastore.ErrTooLarge)
}

// Unwrap makes it match metastore.ErrTooLarge.
func (e *RefTooLargeError) Unwrap() error { return metastore.ErrTooLarge }

// sealCheckOp is the check of the seal every chunk of a split round
// carries: the checkpoint is still at the version this committer wrote.
func (c *Committer) sealCheckOp() metastore.Op {
	return metastore.Op{Kind: metastore.OpCheck, Key: chain.CheckpointKey(c.star, c.class), Expect: c.ver}
}

// commitChunk writes refs (all absent, unless this is a replay; ops are
// their ops) with a check of the seal, so a deposed leader writes no refs.
// On a conflict with an unchanged seal it drops the refs that exist and
// retries once.
func (c *Committer) commitChunk(ctx context.Context, refs []SpanRef, ops []metastore.Op, replay bool) error {
	c.RefVersions = nil
	if replay {
		var err error
		if refs, ops, err = c.missingRefs(ctx, refs, ops); err != nil || len(refs) == 0 {
			return err
		}
	}
	for attempt := 0; ; attempt++ {
		vs, err := c.meta.Commit(ctx, append(ops[:len(ops):len(ops)], c.sealCheckOp()))
		c.Requests++
		if err == nil {
			if !replay && attempt == 0 && len(vs) == len(refs)+1 {
				c.RefVersions = vs[:len(refs):len(refs)]
			}
			return nil
		}
		if _, rerr := c.resolve(ctx, c.cp); rerr != nil {
			return rerr
		}
		if attempt > 0 {
			return err
		}
		// Seal unchanged: either refs exist (an ambiguous earlier attempt
		// applied) or the failure was transient. Keep what is missing.
		if refs, ops, err = c.missingRefs(ctx, refs, ops); err != nil || len(refs) == 0 {
			return err
		}
	}
}

func (c *Committer) casCheckpoint(ctx context.Context, next Checkpoint) error {
	val, _ := json.Marshal(next)
	v, err := c.meta.Put(ctx, chain.CheckpointKey(c.star, c.class), val, c.ver)
	c.Requests++
	if err == nil {
		c.cp, c.ver = next, v
		return nil
	}
	applied, rerr := c.resolve(ctx, next)
	if rerr != nil || applied {
		return rerr
	}
	return fmt.Errorf("absorb: advance checkpoint: %w", err)
}

// resolve re-reads the checkpoint after a failed write: it reports whether
// want (identified by its counter) was applied, and ErrDeposed if the seal
// is no longer ours.
func (c *Committer) resolve(ctx context.Context, want Checkpoint) (bool, error) {
	got, v, err := ReadCheckpoint(ctx, c.meta, c.star, c.class)
	c.Requests++
	if err != nil {
		return false, fmt.Errorf("absorb: re-read checkpoint: %w", err)
	}
	if got.Owner != c.owner || got.OwnerEpoch != c.epoch {
		return false, &SealedError{Owner: got.Owner, OwnerEpoch: got.OwnerEpoch}
	}
	if got.Counter == want.Counter && got.Next == want.Next && got.Epoch == want.Epoch {
		c.cp, c.ver = got, v
		return true, nil
	}
	c.cp, c.ver = got, v
	return false, nil
}

func (c *Committer) refOps(refs []SpanRef) ([]metastore.Op, error) {
	ops := make([]metastore.Op, 0, len(refs)+1)
	for i := range refs {
		val, err := json.Marshal(&refs[i])
		if err != nil {
			return nil, err
		}
		expect := metastore.NoVersion
		if invariants.AbsorbOverwritesRefs.On() {
			expect = metastore.AnyVersion // a planted bug, for the simulation's checker
		}
		ops = append(ops, metastore.Op{Kind: metastore.OpPut, Key: refs[i].Key(), Value: val, Expect: expect})
	}
	return ops, nil
}

// missingRefs returns the refs whose keys do not exist yet, with their ops
// (ops[i] is refs[i]'s).
func (c *Committer) missingRefs(ctx context.Context, refs []SpanRef, ops []metastore.Op) ([]SpanRef, []metastore.Op, error) {
	if invariants.AbsorbOverwritesRefs.On() {
		return refs, ops, nil // a planted bug: every ref is rewritten
	}
	var out []SpanRef
	var outOps []metastore.Op
	for i, r := range refs {
		_, err := c.meta.Get(ctx, r.Key())
		c.Requests++
		switch {
		case errors.Is(err, metastore.ErrNotFound):
			out = append(out, r)
			outOps = append(outOps, ops[i])
		case err != nil:
			return nil, nil, fmt.Errorf("absorb: check ref %s: %w", r.Key(), err)
		}
	}
	return out, outOps, nil
}

// PutSnapshot writes a tails snapshot to every bucket of a set and returns
// once w copies are there. An existing object counts only if it holds
// body (a key names a snapshot's position, its writer and the writer's
// plan, so that is an earlier attempt of this very write), or a sound full
// snapshot of the same position (what a repair writes in place of a
// damaged one: it needs no base, and the tails as of a position are the
// same whoever computes them). Anything else there (a round planned again
// under the same key: a bug) fails that copy, never passes for written:
// the checkpoint that names the key must name what the round wrote.
func PutSnapshot(ctx context.Context, stores []objstore.Store, w int, key string, body []byte) error {
	return PutSnapshotTracked(ctx, stores, w, key, body, nil)
}

// PutSnapshotTracked is PutSnapshot whose copies still being written when
// it returns (those past the W-th) are counted in bg (nil: not counted),
// so that a caller stopping can wait until every copy's PUT has returned:
// a copy written after its process stopped surprises whoever cleans the
// store up after it (a test's temporary directory).
func PutSnapshotTracked(ctx context.Context, stores []objstore.Store, w int, key string, body []byte, bg *sync.WaitGroup) error {
	errs := make(chan error, len(stores))
	if bg != nil {
		bg.Add(len(stores))
	}
	for _, s := range stores {
		go func() {
			if bg != nil {
				defer bg.Done()
			}
			err := s.PutIfAbsent(ctx, key, body)
			if errors.Is(err, objstore.ErrExists) {
				err = sameSnapshot(ctx, s, key, body)
			}
			errs <- err
		}()
	}
	ok := 0
	var last error
	for range stores {
		if err := <-errs; err != nil {
			last = err
		} else if ok++; ok == w {
			return nil
		}
	}
	return fmt.Errorf("absorb: tails snapshot %s: %d of %d copies: %w", key, ok, w, last)
}

// sameSnapshot checks the object found at key stands for body (see
// PutSnapshot).
func sameSnapshot(ctx context.Context, s objstore.Store, key string, body []byte) error {
	got, err := s.Get(ctx, key, 0, -1)
	if err != nil {
		return fmt.Errorf("absorb: tails snapshot %s exists; reading it back: %w", key, err)
	}
	if bytes.Equal(got, body) {
		return nil
	}
	want, werr := DecodeTails(body)
	have, herr := DecodeTails(got)
	if werr == nil && herr == nil && have.Base == "" && have.Epoch == want.Epoch && have.Next == want.Next {
		return nil
	}
	return fmt.Errorf("%w: tails snapshot %s exists with other content (%d bytes, not the %d written): %w", ErrSnapshotTaken, key, len(got), len(body), objstore.ErrExists)
}

// ReadSnapshot reads a tails snapshot from the first bucket holding a good
// copy.
func ReadSnapshot(ctx context.Context, stores []objstore.Store, key string) (Tails, error) {
	var errs []error
	corrupt := false
	for i, s := range stores {
		b, err := s.Get(ctx, key, 0, -1)
		if err == nil {
			var t Tails
			if t, err = DecodeTails(b); err == nil {
				return t, nil
			}
			corrupt = true
		}
		errs = append(errs, fmt.Errorf("copy %d: %w", i, err))
	}
	if corrupt {
		// Damage, not absence, is the cause: say so even if another copy
		// is missing (IsSnapshotGone is false).
		return Tails{}, fmt.Errorf("absorb: read tails snapshot %s: %w: %w", key, ErrCorrupt, CopyErrors(errs))
	}
	return Tails{}, fmt.Errorf("absorb: read tails snapshot %s: %w", key, CopyErrors(errs))
}

// ReadSnapshotFunc reads a tails snapshot from the first bucket holding a
// good copy without building a map of its streams
// (absorbval.DecodeTailsFunc): start is called with the header of each
// copy tried and each with its streams; a copy found damaged part way is
// followed by the next copy's start, so a caller resets what it built in
// start. The header returned is the good copy's; the errors are
// ReadSnapshot's.
func ReadSnapshotFunc(ctx context.Context, stores []objstore.Store, key string, start func(TailsHeader), each func(id string, t StreamTail)) (TailsHeader, error) {
	var errs []error
	corrupt := false
	for i, s := range stores {
		b, err := s.Get(ctx, key, 0, -1)
		if err == nil {
			var h TailsHeader
			if h, err = absorbval.DecodeTailsFunc(b, start, each); err == nil {
				return h, nil
			}
			corrupt = true
		}
		errs = append(errs, fmt.Errorf("copy %d: %w", i, err))
	}
	if corrupt {
		return TailsHeader{}, fmt.Errorf("absorb: read tails snapshot %s: %w: %w", key, ErrCorrupt, CopyErrors(errs))
	}
	return TailsHeader{}, fmt.Errorf("absorb: read tails snapshot %s: %w", key, CopyErrors(errs))
}

func (c *Committer) checkpointOp(next Checkpoint) metastore.Op {
	val, _ := json.Marshal(next)
	return metastore.Op{Kind: metastore.OpPut, Key: chain.CheckpointKey(c.star, c.class), Value: val, Expect: c.ver}
}
