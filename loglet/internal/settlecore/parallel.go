package settlecore

import "fmt"

// Parallel asks for several independent I/O calls at once, which the
// executor runs concurrently (the core asks at most Config.ReadAhead in
// one): a pass's object PUTs and deletes, and the extents it reads back to
// merge, so that its duration, not one call after another, is what bounds
// the settle lag. → ParallelDone.
type Parallel struct {
	Puts    []PutObject
	Deletes []DeleteObject
	Gets    []GetRange
}

// ParallelDone is Parallel's result: one event per call, in order.
type ParallelDone struct {
	Puts    []ObjectPut
	Deletes []ObjectDeleted
	Gets    []RangeGot
}

// parallel is reqs (PutObjects and DeleteObjects) as one Parallel request,
// and how to read its result back in reqs' order.
func parallel(reqs []Request) (Parallel, func(ParallelDone) []Event) {
	var pr Parallel
	for _, r := range reqs {
		switch r := r.(type) {
		case PutObject:
			pr.Puts = append(pr.Puts, r)
		case DeleteObject:
			pr.Deletes = append(pr.Deletes, r)
		case GetRange:
			pr.Gets = append(pr.Gets, r)
		default:
			panic(fmt.Sprintf("settlecore: %T asked in parallel", r)) // a caller's bug: fanOut's callers ask only these
		}
	}
	return pr, func(d ParallelDone) []Event {
		out := make([]Event, 0, len(reqs))
		p, q, g := 0, 0, 0
		for _, r := range reqs {
			switch r.(type) {
			case PutObject:
				out = append(out, d.Puts[p])
				p++
			case DeleteObject:
				out = append(out, d.Deletes[q])
				q++
			default:
				out = append(out, d.Gets[g])
				g++
			}
		}
		return out
	}
}

func (Parallel) isRequest()   {}
func (ParallelDone) isEvent() {}

// DefaultReadAhead is Config.ReadAhead's default.
const DefaultReadAhead = 64

// fanOut asks reqs, at most ReadAhead at once (one alone is asked as
// itself), and asks again, after a Wait, those that failed transiently
// while tries are left; then gets one event per request, in order.
func (p *Pass) fanOut(reqs []Request, then func([]Event)) {
	evs := make([]Event, len(reqs))
	tries := 0
	var round func(idx []int)
	round = func(idx []int) {
		var retry []int
		var chunk func(k int)
		chunk = func(k int) {
			if k >= len(idx) {
				if len(retry) == 0 || tries >= p.cfg.Retries {
					then(evs)
					return
				}
				p.wait(tries, func(ok bool) {
					if !ok {
						then(evs)
						return
					}
					tries++
					round(retry)
				})
				return
			}
			c := idx[k:min(len(idx), k+p.cfg.ReadAhead)]
			got := func(evc []Event) {
				for j, i := range c {
					evs[i] = evc[j]
					if Transient(eventErr(evc[j])) {
						retry = append(retry, i)
					}
				}
				chunk(k + len(c))
			}
			if len(c) == 1 {
				p.ask(reqs[c[0]], func(ev Event) { got([]Event{ev}) })
				return
			}
			rs := make([]Request, len(c))
			for j, i := range c {
				rs[j] = reqs[i]
			}
			pr, back := parallel(rs)
			p.ask(pr, func(ev Event) { got(back(ev.(ParallelDone))) })
		}
		chunk(0)
	}
	all := make([]int, len(reqs))
	for i := range all {
		all[i] = i
	}
	round(all)
}
