// Package fault is the one fault-injection shape of flightlog's stores:
// objstore.FaultStore and metastore.FaultStore both wrap their store
// around an Injector, so both take the same settings (per-operation
// latency, error and ambiguous rates, a down switch, a scripting hook)
// through the same methods, draw from the same distributions, and count
// what they injected in the same Counters.
//
// Every random choice is keyed by what a call is, not by when it arrives:
// a call draws from a generator seeded by the Injector's seed, the call's
// operation and keys, and how many calls with the same operation and keys
// came before it. What a call draws therefore does not depend on how
// concurrent calls interleave, and a failing run replays from its seed
// however goroutines are scheduled. The draws come from a Draws, whose
// per-key call counts are kept for the Injector's life: an Injector is for
// tests and bounded runs, not an unbounded production path.
package fault

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// Op names one operation of a store, for per-operation settings and for
// hooks. Each store documents which it has.
type Op string

// The operations of the stores: objstore's are Put (PutIfAbsent), Get,
// Delete and List; metastore's Get, Put, Delete, Scan and Commit.
const (
	Get    Op = "get"
	Put    Op = "put"
	Delete Op = "delete"
	List   Op = "list"
	Scan   Op = "scan"
	Commit Op = "commit"
)

// Call is one call as a hook sees it.
type Call struct {
	Op Op
	// Key is the call's key: the object or item key, the prefix of a
	// List or Scan, the first op's key of a Commit.
	Key string
	// Keys is every key of the call: for a Commit each op's key in op
	// order, else just Key.
	Keys []string
}

// Kind is what happens to a call besides its delay.
type Kind uint8

const (
	// None passes the call on.
	None Kind = iota
	// Fail fails the call without passing it on: nothing is applied.
	Fail
	// Ambiguous passes the call on, discards its result and fails: the
	// lost response of an applied call.
	Ambiguous
	// Unavailable fails the call as a down store would, passing nothing on.
	Unavailable
)

// String returns the kind's name.
func (k Kind) String() string {
	switch k {
	case None:
		return "none"
	case Fail:
		return "fail"
	case Ambiguous:
		return "ambiguous"
	case Unavailable:
		return "unavailable"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Fault is what a store does to one call: a hook's verdict, or what the
// random settings drew. The zero Fault passes the call through untouched.
type Fault struct {
	// Kind is the call's fate. A Fault with Err set and Kind None fails
	// the call (as Fail).
	Kind Kind
	// Delay is waited before the call is applied, honouring its context.
	Delay time.Duration
	// Err, with Fail or Ambiguous, is the cause the store's error wraps
	// instead of its ErrInjected or ErrInjectedAmbiguous.
	Err error
}

// IsZero reports whether f passes the call through untouched.
func (f Fault) IsZero() bool { return f.Kind == None && f.Delay == 0 && f.Err == nil }

// Counters counts what an Injector injected.
type Counters struct {
	Unavailable uint64 // calls failed because the store was down (SetDown or Unavailable)
	Failed      uint64 // calls failed without being applied (error rate or hook)
	Ambiguous   uint64 // calls applied and then failed (ambiguous rate or hook)
	Delayed     uint64 // calls given a non-zero delay
	Cancelled   uint64 // calls whose context ended during their delay
	Hooked      uint64 // calls for which the hook returned a non-zero Fault
}

// Injector holds a store wrapper's fault settings and decides each call's
// fault. It is safe for concurrent use, and its settings may be changed
// while calls are in flight. With nothing set it injects nothing.
//
// For each call, in order: if the store is down the call fails
// (Unavailable); the call's draws are made (its fate first, whatever the
// rates, so that changing a rate or the latency does not shift the other
// draws); the hook, if set, is consulted, and a non-zero Fault it returns
// is used as is; otherwise the operation's error rate, then its ambiguous
// rate, and a latency sample give the Fault. The delay is waited on a
// timer that also watches the context (so it works under
// testing/synctest's fake clock); a context that ends during the delay
// fails the call unapplied, and a store that went down during it fails
// the call as down.
type Injector struct {
	name   string // the store's package, for errors
	ops    []Op   // every op of the store, in order
	writes []Op   // the ops that change the store

	mu      sync.Mutex
	draws   *Draws
	down    bool
	latency map[Op]LatencyDist
	errRate map[Op]float64
	ambig   map[Op]float64
	hook    func(Call) Fault
	counts  Counters
}

// NewInjector returns an Injector for a store named name (its package, for
// errors) whose operations are ops, of which writes change the store.
// seed fixes every random choice.
func NewInjector(name string, seed uint64, ops, writes []Op) *Injector {
	return &Injector{
		name: name, ops: slices.Clone(ops), writes: slices.Clone(writes),
		draws:   NewDraws(seed),
		latency: map[Op]LatencyDist{}, errRate: map[Op]float64{}, ambig: map[Op]float64{},
	}
}

// SetDown makes every later call fail as a down store's would, without
// passing it on (down = true), or lets calls through again (down = false).
// Calls already waiting out a delay fail too.
func (in *Injector) SetDown(down bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.down = down
}

// SetLatency sets the latency distribution of the calls of ops (no ops:
// every operation of the store); nil removes it.
func (in *Injector) SetLatency(d LatencyDist, ops ...Op) error {
	ops, err := in.pick("SetLatency", ops, in.ops)
	if err != nil {
		return err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, op := range ops {
		in.latency[op] = d
	}
	return nil
}

// SetErrorRate makes a fraction p of the calls of ops (no ops: every
// operation of the store) fail unapplied, with an error wrapping the
// store's ErrInjected.
func (in *Injector) SetErrorRate(p float64, ops ...Op) error {
	return in.setRate("SetErrorRate", in.errRate, p, ops, in.ops)
}

// SetAmbiguousRate makes a fraction p of the calls of ops (no ops: every
// write of the store) that the error rate spared reach the store and then
// fail with an error wrapping the store's ErrInjectedAmbiguous: the call
// applied, the caller was told it failed.
func (in *Injector) SetAmbiguousRate(p float64, ops ...Op) error {
	return in.setRate("SetAmbiguousRate", in.ambig, p, ops, in.writes)
}

// SetHook installs a function that scripts faults call by call (nil removes
// it). It runs with the Injector's lock held, so it must be quick, must not
// block and must not call the store. It is not consulted for calls that
// fail before anything is sent (an ended context, an invalid key) or
// while the store is down.
func (in *Injector) SetHook(hook func(Call) Fault) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.hook = hook
}

// Injected returns the counts of faults injected so far.
func (in *Injector) Injected() Counters {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.counts
}

func (in *Injector) setRate(what string, rates map[Op]float64, p float64, ops, all []Op) error {
	if !(p >= 0 && p <= 1) {
		return fmt.Errorf("%s: faults: %s(%v): the rate must be within [0, 1]", in.name, what, p)
	}
	ops, err := in.pick(what, ops, all)
	if err != nil {
		return err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, op := range ops {
		rates[op] = p
	}
	return nil
}

// pick returns ops, or all when there are none, checking each is the
// store's.
func (in *Injector) pick(what string, ops, all []Op) ([]Op, error) {
	if len(ops) == 0 {
		return all, nil
	}
	for _, op := range ops {
		if !slices.Contains(in.ops, op) {
			names := make([]string, len(in.ops))
			for i, o := range in.ops {
				names[i] = string(o)
			}
			return nil, fmt.Errorf("%s: faults: %s: %q is not an operation of the store (%s)", in.name, what, op, strings.Join(names, ", "))
		}
	}
	return ops, nil
}

// Do runs one call under its fault. draw identifies the call for its
// seeded draws (its operation and keys, as the store names them); apply
// passes the call on to the inner store. It returns the fault the call
// met and apply's error (nil when apply was not called):
//
//   - Kind Unavailable: the store was down; apply was not called.
//   - Kind Fail: apply was not called; Err is the cause (nil: the store's
//     ErrInjected).
//   - Kind Ambiguous: apply was called and its result must be discarded;
//     Err is the cause (nil: the store's ErrInjectedAmbiguous), and the
//     error returned is apply's.
//   - Kind None: apply's error, or, when the context ended during the
//     delay, the context's error (apply was not called).
func (in *Injector) Do(ctx context.Context, c Call, draw []string, apply func() error) (Fault, error) {
	f, down := in.plan(c, draw)
	if down {
		return Fault{Kind: Unavailable}, nil
	}
	if f.Delay > 0 {
		t := time.NewTimer(f.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			in.count(func(c *Counters) { c.Cancelled++ })
			return Fault{}, ctx.Err()
		}
		in.mu.Lock()
		down := in.down
		if down {
			in.counts.Unavailable++
		}
		in.mu.Unlock()
		if down {
			return Fault{Kind: Unavailable}, nil
		}
	}
	switch f.Kind {
	case Fail:
		in.count(func(c *Counters) { c.Failed++ })
		return f, nil
	case Unavailable:
		in.count(func(c *Counters) { c.Unavailable++ })
		return f, nil
	case Ambiguous:
		err := apply()
		in.count(func(c *Counters) { c.Ambiguous++ })
		return f, err
	}
	return Fault{}, apply()
}

// plan decides the fault of one call; down reports a down store.
func (in *Injector) plan(c Call, draw []string) (f Fault, down bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.down {
		in.counts.Unavailable++
		return Fault{}, true
	}
	rng := in.draws.Rand(draw...)
	// The fate is drawn first, whatever the rates, so that changing a rate
	// or the latency does not shift the other draws.
	e, a := rng.Float64(), rng.Float64()
	var hooked Fault
	if in.hook != nil {
		hooked = in.hook(c)
	}
	if !hooked.IsZero() {
		in.counts.Hooked++
		f = hooked
		if f.Kind == None && f.Err != nil {
			f.Kind = Fail
		}
	} else {
		if d := in.latency[c.Op]; d != nil {
			f.Delay = d.Sample(rng)
		}
		if p := in.errRate[c.Op]; e < p {
			f.Kind = Fail
		} else if p := in.ambig[c.Op]; a < p {
			f.Kind = Ambiguous
		}
	}
	if f.Delay > 0 {
		in.counts.Delayed++
	}
	return f, false
}

func (in *Injector) count(inc func(*Counters)) {
	in.mu.Lock()
	inc(&in.counts)
	in.mu.Unlock()
}

// LatencyDist is a distribution of request latencies. Sample draws one from
// r; it is called with the Injector's lock held, so it must not block.
type LatencyDist interface {
	Sample(r *rand.Rand) time.Duration
}

// DistFunc adapts a function to a LatencyDist.
type DistFunc func(r *rand.Rand) time.Duration

// Sample implements LatencyDist.
func (f DistFunc) Sample(r *rand.Rand) time.Duration { return f(r) }

type fixed time.Duration

func (d fixed) Sample(*rand.Rand) time.Duration { return time.Duration(d) }

// Fixed returns a distribution that is always d.
func Fixed(d time.Duration) LatencyDist { return fixed(d) }

type uniform struct{ lo, hi time.Duration }

func (u uniform) Sample(r *rand.Rand) time.Duration {
	if u.hi <= u.lo {
		return u.lo
	}
	return u.lo + time.Duration(r.Int64N(int64(u.hi-u.lo)+1))
}

// Uniform returns a distribution uniform over [lo, hi].
func Uniform(lo, hi time.Duration) LatencyDist { return uniform{lo, hi} }

// z99 is the standard normal quantile of 0.99.
const z99 = 2.3263478740408408

type logNormal struct{ mu, sigma float64 }

func (l logNormal) Sample(r *rand.Rand) time.Duration {
	v := math.Exp(l.mu + l.sigma*r.NormFloat64())
	if v >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(v)
}

// LogNormal returns a heavy-tailed distribution with the given median and
// 99th percentile, the usual shape of object-store request latency. Its
// tail makes concurrent requests complete out of the order they were sent.
// A p99 at or below the median gives a fixed median.
func LogNormal(median, p99 time.Duration) LatencyDist {
	if median <= 0 {
		return fixed(0)
	}
	if p99 <= median {
		return fixed(median)
	}
	return logNormal{
		mu:    math.Log(float64(median)),
		sigma: math.Log(float64(p99)/float64(median)) / z99,
	}
}

type mixture struct {
	p    float64
	a, b LatencyDist
}

func (m mixture) Sample(r *rand.Rand) time.Duration {
	if r.Float64() < m.p {
		return m.b.Sample(r)
	}
	return m.a.Sample(r)
}

// Mixture returns a distribution that samples b with probability p and a
// otherwise: a healthy bucket with an occasional stall, or a zone that is
// slow for a fraction of requests.
func Mixture(p float64, a, b LatencyDist) LatencyDist { return mixture{p: p, a: a, b: b} }
