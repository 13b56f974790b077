package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// slotState is what point lookups of a slot's envelopes in every bucket of
// its set decide.
type slotState struct {
	flights, poisons, missing, other int
}

func (s slotState) committed(w int) bool { return s.flights >= w }
func (s slotState) dead(k, w int) bool   { return s.poisons >= k-w+1 }
func (s slotState) empty(k int) bool     { return s.missing == k }
func (s slotState) String() string {
	return fmt.Sprintf("%d flight, %d poison, %d missing, %d other", s.flights, s.poisons, s.missing, s.other)
}

// probeSlot reads the 60-byte envelope of a slot in each bucket: one ranged
// GET per bucket, never a listing.
func probeSlot(ctx context.Context, set []objstore.Store, star string, c chain.Class, epoch, slot uint64) (slotState, error) {
	var st slotState
	key := chain.SlotKey(star, c, epoch, slot)
	for _, b := range set {
		env, err := chain.ProbeEnvelope(ctx, b, key)
		switch {
		case errors.Is(err, objstore.ErrNotFound):
			st.missing++
		case envelope.IsCorruption(err):
			st.other++
		case err != nil:
			return st, fmt.Errorf("probe %s: %w", key, err)
		case env.Epoch != epoch || env.Slot != slot:
			st.other++
		case env.Kind == envelope.KindFlight:
			st.flights++
		case env.Kind == envelope.KindPoison:
			st.poisons++
		default:
			st.other++
		}
	}
	return st, nil
}

// walkCmd: flightlog walk.
func walkCmd(fs *flag.FlagSet, _ *globalOpts) func(context.Context, *cmdEnv, []string) int {
	slots := fs.Bool("slots", false, "print every slot probed")
	return func(ctx context.Context, env *cmdEnv, _ []string) int {
		b, err := env.g.open(ctx, true)
		if err != nil {
			return env.fail(err)
		}
		defer b.Close()
		prog := newProgress(env.stderr)
		defer prog.done()
		problems, any := 0, false
		for _, c := range chain.Classes() {
			n, found, err := walkChain(ctx, env.stdout, prog, b, env.g.Star, c, *slots)
			if err != nil {
				prog.done()
				return env.fail(err)
			}
			problems += n
			any = any || found
		}
		if !any {
			fmt.Fprintf(env.stdout, "star %q has no chains in %s\n", env.g.Star, b.describe)
		}
		if problems > 0 {
			fmt.Fprintf(env.stdout, "%d problem(s)\n", problems)
			return exitProblems
		}
		return exitOK
	}
}

// walkChain prints one chain and returns how many problems it found.
func walkChain(ctx context.Context, w io.Writer, prog *progress, b *backends, star string, c chain.Class, verbose bool) (int, bool, error) {
	rec, _, err := chain.ReadEpoch(ctx, b.meta, star, c)
	if errors.Is(err, metastore.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	problems := 0
	problem := func(format string, args ...any) {
		problems++
		fmt.Fprintf(w, "  PROBLEM: "+format+"\n", args...)
	}
	fmt.Fprintf(w, "%s chain of star %s\n", c, star)
	fmt.Fprintf(w, "  epoch record: epoch %d, owner %s, window %d, K=%d W=%d, buckets %s\n", rec.Epoch, rec.Owner, rec.Window, rec.K, rec.W, strings.Join(rec.Buckets, ","))
	for _, cut := range rec.Cuts {
		fmt.Fprintf(w, "  recorded cut: epoch %d at slot %d%s\n", cut.Epoch, cut.Slot, cleanNote(cut.Clean))
	}
	if rec.Seal != nil {
		fmt.Fprintf(w, "  seal: epoch %d at slot %d%s\n", rec.Seal.Epoch, rec.Seal.Slot, cleanNote(rec.Seal.Clean))
	}
	set := b.sets[c]
	if len(set) != rec.K {
		return problems, true, fmt.Errorf("%s: the epoch record has K=%d buckets, this tool was given %d (check the backend flags)", c, rec.K, len(set))
	}
	cp, _, err := absorb.ReadCheckpoint(ctx, b.meta, star, c)
	switch {
	case errors.Is(err, metastore.ErrNotFound):
		fmt.Fprintln(w, "  checkpoint: none")
	case err != nil:
		return problems, true, err
	default:
		pending := "none"
		if cp.Pending != nil {
			pending = fmt.Sprintf("epoch %d [%d, %d)", cp.Pending.Epoch, cp.Pending.From, cp.Pending.To)
		}
		tails := cp.Tails
		if tails == "" {
			tails = "none"
		}
		fmt.Fprintf(w, "  checkpoint: absorbed below (epoch %d, slot %d); sealed by %s (epoch %d); pending round %s; tails %s\n", cp.Epoch, cp.Next, cp.Owner, cp.OwnerEpoch, pending, tails)
	}
	var trim *chain.Position // slots below it are deleted (trim's deletes done)
	var cursor chain.TrimCursor
	it, err := b.meta.Get(ctx, chain.TrimKey(star, c))
	switch {
	case errors.Is(err, metastore.ErrNotFound):
		fmt.Fprintln(w, "  trim cursor: none (nothing trimmed)")
	case err != nil:
		return problems, true, err
	default:
		if t, derr := chain.DecodeTrimCursor(it.Value); derr == nil {
			cursor, trim = t, &t.Deleted
			fmt.Fprintf(w, "  trim cursor: settled below (epoch %d, slot %d); deleted below (epoch %d, slot %d); by %s\n", t.At.Epoch, t.At.Next, t.Deleted.Epoch, t.Deleted.Next, t.Owner)
		} else {
			problem("trim cursor: %v", derr)
		}
	}
	for e := uint64(1); e <= rec.Epoch; e++ {
		if trim != nil && e < trim.Epoch {
			fmt.Fprintf(w, "  epoch %d: trimmed\n", e)
			continue
		}
		from := uint64(0)
		if trim != nil && e == trim.Epoch {
			from = trim.Next
		}
		cut, hasCut := rec.CutOf(e)
		if !hasCut && trim != nil {
			// An epoch settlement has passed: the epoch record may have
			// dropped its cut, the trim cursor keeps it.
			if slot, ok := cursor.CutOf(e); ok {
				cut, hasCut = chain.Cut{Epoch: e, Slot: slot}, true
			}
		}
		if e < rec.Epoch && !hasCut {
			fmt.Fprintf(w, "  epoch %d: no recorded cut (no longer needed by walkers)\n", e)
			continue
		}
		if err := walkEpoch(ctx, w, prog, set, star, c, e, from, cut, hasCut, rec, cursor.At, verbose, problem); err != nil {
			return problems, true, err
		}
	}
	return problems, true, nil
}

func cleanNote(clean bool) string {
	if clean {
		return " (clean seal)"
	}
	return " (found by a fence)"
}

// walkEpoch probes the slots of one epoch from `from`: up to its cut if it
// has one, else (the live or crashed epoch) until a whole window of empty
// slots past the last occupied one. Slots before settled (the trim
// cursor's At) are settled, and trim's deletes of them may be under way:
// a partly deleted one there is no problem.
func walkEpoch(ctx context.Context, w io.Writer, prog *progress, set []objstore.Store, star string, c chain.Class, e, from uint64, cut chain.Cut, hasCut bool, rec chain.EpochRecord, settled chain.Position, verbose bool, problem func(string, ...any)) error {
	k, wq := rec.K, rec.W
	window := uint64(max(rec.Window, 1))
	var committed, dead, partial, empty uint64
	deleting := uint64(0) // settled slots no longer whole: trim's deletes under way
	firstEmpty := int64(-1)
	lastOccupied := int64(-1)
	runOfEmpty := uint64(0)
	slot := from
	for ; ; slot++ {
		if hasCut && slot >= cut.Slot {
			break
		}
		if !hasCut && runOfEmpty >= window {
			break // a whole window of empty slots: nothing can be in flight past it
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		st, err := probeSlot(ctx, set, star, c, e, slot)
		if err != nil {
			return err
		}
		prog.update("walk %s epoch %d: slot %d", c, e, slot)
		state := ""
		switch {
		case st.committed(wq):
			committed++
			state = "committed"
		case st.dead(k, wq):
			dead++
			state = "dead"
		case st.empty(k):
			empty++
			state = "empty"
			if firstEmpty < 0 {
				firstEmpty = int64(slot)
			}
		default:
			partial++
			state = "undecided"
		}
		if !st.empty(k) {
			lastOccupied = int64(slot)
			runOfEmpty = 0
		} else {
			runOfEmpty++
		}
		if verbose {
			fmt.Fprintf(w, "    epoch %d slot %d: %s (%v)\n", e, slot, state, st)
		}
		if (chain.Position{Epoch: e, Next: slot}).Less(settled) {
			if state != "committed" {
				deleting++
			}
			continue
		}
		if hasCut && state != "committed" {
			problem("epoch %d slot %d is below the recorded cut %d but %s (%v)", e, slot, cut.Slot, state, st)
		}
		if !hasCut && state != "committed" && state != "empty" {
			// Past a crash: slots a fence will arbitrate.
			fmt.Fprintf(w, "  epoch %d slot %d: %s (%v): a fence decides it\n", e, slot, state, st)
		}
	}
	prog.done()
	if deleting > 0 {
		fmt.Fprintf(w, "  epoch %d: %d settled slot(s) below the trim cursor partly or wholly deleted: settled, trim's deletes under way (the next settle pass finishes them)\n", e, deleting)
	}
	if hasCut {
		st, err := probeSlot(ctx, set, star, c, e, cut.Slot)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  epoch %d: %d committed slots in [%d, %d); cut at %d%s; at the cut: %v\n", e, committed, from, cut.Slot, cut.Slot, cleanNote(cut.Clean), st)
		return nil
	}
	fe := "none"
	if firstEmpty >= 0 {
		fe = fmt.Sprint(firstEmpty)
	}
	fmt.Fprintf(w, "  epoch %d (live, no cut): %d committed, %d dead, %d undecided slots from %d; first empty slot %s; probed up to %d\n", e, committed, dead, partial, from, fe, slot)
	if firstEmpty >= 0 && lastOccupied > firstEmpty {
		fmt.Fprintf(w, "  epoch %d: occupied slots past the first empty one (up to %d): uploads in flight at a crash; a fence decides them\n", e, lastOccupied)
	}
	return nil
}
