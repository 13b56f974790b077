package settlecore

import "fmt"

// Parallel asks for several independent I/O calls at once, which the
// executor runs concurrently, at most Limit at a time (0: all), as a
// sliding window: a pass's object PUTs and deletes and the settled
// objects it reads back to merge (Limit: the write window,
// Config.WriteAhead), and its reads from the chain's buckets
// (Config.ReadAhead), so that its duration, not one call after another
// nor the slowest call of each batch, is what bounds the settle lag. The
// core asks at most maxParallel calls in one. → ParallelDone.
type Parallel struct {
	Puts    []PutObject
	Deletes []DeleteObject
	Gets    []GetRange
	Limit   int
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

// DefaultWriteAhead is Config.WriteAhead's default: a pass at 10,000
// active streams writes 10,000 settled objects, which at 30 ms a PUT and
// 64 at a time took ~5 s (18 s in batches that each waited for their
// slowest PUT), and at 512 ~1 s, as did reading back the ~10,000 small
// settled objects they merge; their bodies are in memory already (the
// reads' reserved before they are asked: HoldMemory), so only the calls
// in flight grow.
const DefaultWriteAhead = 2048

// maxParallel bounds the calls of one Parallel request.
const maxParallel = 4096

// fanOut asks reqs (one alone as itself), in Parallel requests of at most
// maxParallel calls run at most window at once (ReadAhead if reqs read
// the chain's buckets, else the write window: PUTs, deletes and reads of
// small settled objects to merge), and asks again, after a Wait,
// those that failed transiently while tries are left; then gets one event
// per request, in order.
func (p *Pass) fanOut(reqs []Request, then func([]Event)) {
	window := p.cfg.WriteAhead
	for _, r := range reqs {
		if g, ok := r.(GetRange); ok && !g.Settled {
			window = p.cfg.ReadAhead // reads from the chain's buckets
			break
		}
	}
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
			c := idx[k:min(len(idx), k+maxParallel)]
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
			pr.Limit = window
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
