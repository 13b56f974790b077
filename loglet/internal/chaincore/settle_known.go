package chaincore

import (
	"slices"

	absorb "github.com/flightlog/flightlog/absorb/absorbval"
	chain "github.com/flightlog/flightlog/chain/chainval"
	metastore "github.com/flightlog/flightlog/metastore/metaval"
	settle "github.com/flightlog/flightlog/settle/settleval"
)

// The refs a leader knows. Its absorb rounds wrote refs (a round in one
// Commit learns their versions): a settle pass that knows every ref into
// the slots it settles needs no scan of each stream's refs, so its
// metastore requests do not grow with the number of streams. The leader
// keeps the refs of rounds not settled yet (at most maxKnownRefs), and the
// last settled ref each stream's passes wrote (a merge's candidate). What
// it does not know (rounds before it took over, a split round, an
// overflow) the pass scans for.

// maxKnownRefs bounds the refs (and, apart, the settled refs) a leader
// keeps for settlement: about 300 bytes each, so up to ~80 MB. An overflow
// costs the next passes a scan per stream, which at many streams makes
// them long and the lag (and so the refs to keep) larger still: 1<<16 was
// overflowed at 10,000 active streams (one record a stream a second) as
// soon as the lag passed 6.5 s.
const maxKnownRefs = 1 << 18

// knownRefs is the leader's knowledge of refs.
type knownRefs struct {
	// ok: every ref of the rounds from from on is in rounds.
	ok     bool
	from   chain.Position
	rounds []knownRound
	n      int
	// prev: each stream's last settled refs passes wrote or read (at most
	// maxPrevPerStream, oldest dropped), nPrev their number.
	prev  map[string][]settle.KnownRef
	nPrev int
}

// maxPrevPerStream bounds the settled refs kept per stream: a merge walks
// back through at most 8 (settlecore's maxMerges), and stops at the first
// it does not merge.
const maxPrevPerStream = 10

type knownRound struct {
	to   chain.Position
	refs []settle.KnownRef
}

// noteRefs records a committed round's refs (vers: their versions, nil if
// the round did not learn them: the knowledge then starts after it).
func (s *settleState) noteRefs(round absorb.Round, refs []absorb.SpanRef, vers []metastore.Version) {
	k := &s.refs
	to := chain.Position{Epoch: round.Epoch, Next: round.To}
	if len(vers) != len(refs) || k.n+len(refs) > maxKnownRefs {
		k.ok, k.from, k.rounds, k.n = true, to, nil, 0
		return
	}
	if !k.ok {
		k.ok, k.from = true, chain.Position{Epoch: round.Epoch, Next: round.From}
	}
	kr := knownRound{to: to, refs: make([]settle.KnownRef, len(refs))}
	for i, r := range refs {
		kr.refs[i] = settle.KnownRef{Key: r.Key(), Version: vers[i], Ref: r}
	}
	k.rounds = append(k.rounds, kr)
	k.n += len(refs)
}

// knownInput fills a pass's known refs: copies, so nothing the core
// keeps crosses the boundary.
func (s *settleState) knownInput(in *Settle) {
	k := &s.refs
	in.KnownOK, in.KnownFrom = k.ok, k.from
	for _, r := range k.rounds {
		in.Known = append(in.Known, r.refs...)
	}
	for _, ps := range k.prev {
		in.Prev = append(in.Prev, ps...)
	}
}

// settledKnown forgets the refs of rounds the cursor has passed (settled
// or reclaimed) and keeps the settled refs the pass wrote.
func (s *settleState) settledKnown(r settle.Result) {
	k := &s.refs
	for len(k.rounds) > 0 && r.Trim.At.Epoch > 0 && !r.Trim.At.Less(k.rounds[0].to) {
		k.n -= len(k.rounds[0].refs)
		k.rounds = k.rounds[1:]
	}
	if len(r.Settled)+len(r.Seen) == 0 {
		return
	}
	if k.prev == nil || k.nPrev+len(r.Settled)+len(r.Seen) > maxKnownRefs {
		k.prev, k.nPrev = map[string][]settle.KnownRef{}, 0
	}
	for _, p := range r.Seen { // before what the pass wrote, which may have merged them
		k.addPrev(p, false)
	}
	for _, p := range r.Settled {
		k.addPrev(p, true)
	}
}

// addPrev keeps p as its stream's settled ref. One the pass wrote (wrote)
// replaces those it starts at or before (it merged them, or a retry wrote
// them again).
func (k *knownRefs) addPrev(p settle.KnownRef, wrote bool) {
	ps := k.prev[p.Ref.Stream]
	n := len(ps)
	ps = slices.DeleteFunc(ps, func(q settle.KnownRef) bool {
		return q.Key == p.Key || (wrote && q.Ref.Start >= p.Ref.Start)
	})
	ps = append(ps, p)
	if len(ps) > maxPrevPerStream {
		oldest := 0
		for i, q := range ps {
			if q.Ref.End < ps[oldest].Ref.End {
				oldest = i
			}
		}
		ps = slices.Delete(ps, oldest, oldest+1)
	}
	k.nPrev += len(ps) - n
	k.prev[p.Ref.Stream] = ps
}
