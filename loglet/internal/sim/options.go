package sim

import (
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
)

// Faults is the fault menu: each field switches one kind of fault on for
// the seeds that draw it. A seed draws each switched-on fault with
// probability about 2/3, so seeds mix faults at random; AllFaults switches
// every one on.
type Faults struct {
	Latency       bool // heavy-tailed PUT/GET latency (LogNormal, some seeds a Mixture with stalls): completions reorder
	Errors        bool // injected PUT/GET errors (not applied)
	Ambiguous     bool // ambiguous PUTs: applied, then reported failed
	ZoneDown      bool // one zone (bucket i of each class) down for a while, toggled by a scheduled goroutine
	SlowZone      bool // one zone much slower than the others
	MetaLatency   bool // metastore latency
	MetaFaults    bool // metastore errors and ambiguous (applied-then-failed) writes, Commit included
	Corrupt       bool // flip a byte of one stored copy of a released slot (at most K−W copies per slot)
	ShortContexts bool // producers give up waiting (outcome unknown) and retry, with and without MatchSeqNum
	// Outage: two zones down at once for longer than the commit deadline:
	// Express (and a Standard chain with a bucket there) halts by deadline
	// and recovers (fence its own epoch, late acks, mint, republish).
	Outage bool
	// MetaConflicts: conditional metastore writes that apply and then
	// report ErrConflict (a client's retry finding its own first attempt),
	// and on some seeds a Commit size limit, so absorb splits its rounds.
	MetaConflicts bool
}

// AllFaults returns the menu with every fault switched on.
func AllFaults() Faults {
	return Faults{true, true, true, true, true, true, true, true, true, true, true}
}

// Scenarios are the switchable whole-system events.
type Scenarios struct {
	// Fence: mid-run a second process Opens the star while the first one
	// keeps running: the successor seals, fences, mints, walks and serves,
	// and the incumbent, deposed, is a zombie. Some producers move to the
	// successor at once, the rest keep appending to the zombie for a while
	// (those appends must end not-committed, or unknown and absent).
	Fence bool
	// FenceOnly: mid-run the harness seals one class's checkpoint and
	// fences its live epoch with chain.Fence, as a successor that dies
	// before minting. The seal is binding: the incumbent halts on the
	// poison (or finds the seal at its next absorb round), fences its own
	// epoch to the same cut, acks below it, and stops leading that class
	// without minting. A while later a new process Opens the star, as a
	// host retries Open, and takes both chains over (the incumbent is then
	// a zombie, as in Fence).
	FenceOnly bool
	// CrashRestart: mid-run the leader process crashes (its stores go down
	// under it, its producers die, it is never Closed before the checker
	// runs) and a new process Opens the same star and takes over.
	CrashRestart bool
}

// MixedScenarios is the CI seed mix: seeds ≡ 1, 4 (mod 6) run Fence, ≡ 2, 5
// CrashRestart, ≡ 3 FenceOnly, ≡ 0 none.
func MixedScenarios(seed uint64) Scenarios {
	switch seed % 6 {
	case 1, 4:
		return Scenarios{Fence: true}
	case 2, 5:
		return Scenarios{CrashRestart: true}
	case 3:
		return Scenarios{FenceOnly: true}
	}
	return Scenarios{}
}

func (s Scenarios) String() string {
	var out []string
	if s.Fence {
		out = append(out, "fence (successor Opens, incumbent a zombie)")
	}
	if s.FenceOnly {
		out = append(out, "fence-only (successor dies before minting)")
	}
	if s.CrashRestart {
		out = append(out, "crash-restart")
	}
	if len(out) == 0 {
		return "no scenario"
	}
	return strings.Join(out, ", ")
}

// Broken plants a bug in a part the harness controls, to show the checker
// catches it. The zero value plants nothing.
type Broken struct {
	// OverwritingPut: every bucket's PutIfAbsent overwrites an existing
	// object and reports success (a broken conditional PUT).
	OverwritingPut bool
	// LostPut: chain-slot PUTs to every bucket report success
	// without storing anything, with this probability (a lost ack).
	LostPut float64
	// CommitIgnoresExpect: the metastore's Commit applies every op whatever
	// the expected versions (OpCheck always passes).
	CommitIgnoresExpect bool
	// StaleReader: the non-leader Reader's metastore view freezes at a
	// snapshot taken early in the run (a replica that stopped applying).
	StaleReader bool
	// MirrorFence: a fence that accepts W−1 copies: a bucket asked to hold
	// a fencer's poison where another bucket holds a flight copy reports
	// the key occupied and serves that other copy as its own
	// (mirroringBucket).
	MirrorFence bool
	// CommitLimit forces a metastore Commit size limit (absorb splits
	// rounds) on every seed; 0 leaves it to the seed.
	CommitLimit int
}

func (b Broken) any() bool { return b != Broken{} }

// Options configure one simulated run. The zero value (plus a Seed) is a
// sensible default: every fault on the menu, no scenario, nothing broken.
type Options struct {
	Seed      uint64
	Faults    *Faults // nil: AllFaults()
	Scenarios Scenarios
	Broken    Broken
	// Producers, Streams per class and OpsPerProducer: 0 draws them from
	// the seed.
	Producers, Streams, OpsPerProducer int
	// NoLinearizability skips the porcupine check (it is the slowest part).
	NoLinearizability bool
	// Log, if set, receives every process's loglet log (info level).
	Log io.Writer
	// NoSettle and NoTrim switch settlement and the trimmer off whatever
	// the seed draws (triage: does a failure need them?).
	NoSettle, NoTrim bool

	// hooks force interleavings the scheduler only rarely makes (tests
	// of this package; nil: none).
	hooks *hooks
}

// hooks are points in the workload where a test forces an interleaving.
// Each runs in the workload's goroutine, so what it does happens there, in
// that order, whatever the scheduler would have done.
type hooks struct {
	// afterTrim runs in the trimmer after a Trim of stream to seq on pr
	// returned nil, before the trimmer reads the trim point back (holding
	// w.lifeLock, so pr stays the leader).
	afterTrim func(w *world, pr *process, stream string, seq uint64)
	// trimDone runs in the trimmer after it recorded that Trim's outcome,
	// still holding w.lifeLock.
	trimDone func(w *world, pr *process, stream string, seq uint64)
}

// plan is everything a seed decides before the run starts: sizes, the
// loglet configuration knobs and the faults. It is printed on failure.
type plan struct {
	seed                      uint64
	faults                    Faults // drawn: what this seed actually injects
	stdK                      int
	producers, streams, ops   int
	flightBytes, window       int
	backlogFlights            int
	absorbEvery               time.Duration
	absorbMaxSlots            int
	commitDeadline            time.Duration
	putLat, getLat            fault.LatencyDist
	latDesc                   string
	putErr, getErr, ambiguous float64
	downZone                  int
	downs                     []window // zone-down intervals
	slowZone                  int
	metaLat                   time.Duration // median
	metaErr, metaAmbig        float64
	shortCtx                  float64 // fraction of appends with a short deadline
	corruptEvery              time.Duration
	fenceAt, crashAt          time.Duration
	fenceClassExpress         bool
	// drawn from a second stream, so the draws above stay those of older
	// seeds
	outage       window
	outageZones  [2]int
	metaConflict float64
	commitLimit  int           // 0: none
	zombieFor    time.Duration // Fence: how long the slowest producers stay on the zombie
	reopenAfter  time.Duration // FenceOnly: how long after the harness's fence a new process Opens

	// A stream's life and the edges (issue 13), drawn from a fourth
	// stream: lifers delete and re-create their names (some on the
	// neighbour star), crowd streams are created and appended once each
	// mid-run (some named at the key limit), some batches are many tiny
	// records, and the metastore may enforce a byte limit as well.
	lifers      int
	neighbour   bool    // a second star, s2, where lifers re-create names too
	crowd       int     // streams created mid-run and appended once each
	tinyBatch   float64 // fraction of batches that are 50-999 records of 16 bytes
	frameBytes  int     // ClassConfig.FrameBytes (0: the default)
	commitBytes int     // metastore Commit byte limit (0: none)

	// Settlement and stream trim, drawn from a fifth stream: how often each
	// chain's leader runs a settle pass (Config.SettleInterval: on in
	// every seed, an eighth of them at the library's default; negative:
	// off, Options.NoSettle), and how many streams a trimmer trims
	// (Star.Trim) how often.
	settleEvery time.Duration
	trimmed     int           // shared and exclusive streams the trimmer trims (0: none)
	trimEvery   time.Duration // the trimmer's mean pause
	// retained is how many shared streams of each class are created with
	// retention (by age retainAge, by bytes retainBytes; 0: that one off).
	retained    int
	retainAge   time.Duration
	retainBytes int64
	// readAhead: ClassConfig.ReadAhead of every process (0: the defaults),
	// so that takeovers and halt recoveries also fence and walk a slot or
	// a few at a time.
	readAhead int

	// The lifecycle races (issue 22), drawn from a sixth stream:
	// preludeOpens processes open, append and close the star one after
	// another with settlement off before the main run (whose processes
	// settle): settlement switched on for a star with several epochs of
	// history. deleteRaces: a lifer's incarnation is sometimes created
	// through the neighbour and deleted through the leader while racers
	// append to it there (cache-miss lookups racing the delete).
	// groups: consumer-group sessions follow trimmed and retained
	// streams and acknowledge across every trim.
	preludeOpens int
	deleteRaces  bool
	groups       int
}

type window struct{ at, dur time.Duration }

func drawPlan(o Options) plan {
	r := rand.New(rand.NewPCG(o.Seed, 0x5eed))
	menu := AllFaults()
	if o.Faults != nil {
		menu = *o.Faults
	}
	draw := func(on bool) bool { return on && r.IntN(3) > 0 }
	p := plan{seed: o.Seed}
	p.faults = Faults{
		Latency: draw(menu.Latency), Errors: draw(menu.Errors), Ambiguous: draw(menu.Ambiguous),
		ZoneDown: draw(menu.ZoneDown), SlowZone: draw(menu.SlowZone), MetaLatency: draw(menu.MetaLatency),
		MetaFaults: draw(menu.MetaFaults), Corrupt: draw(menu.Corrupt), ShortContexts: draw(menu.ShortContexts),
	}
	p.stdK = []int{1, 3}[r.IntN(2)]
	p.producers = pick(o.Producers, 3+r.IntN(4))
	p.streams = pick(o.Streams, 2+r.IntN(3))
	p.ops = pick(o.OpsPerProducer, 25+r.IntN(25))
	p.flightBytes = []int{2 << 10, 16 << 10, 64 << 10}[r.IntN(3)]
	p.window = 2 + r.IntN(12)
	p.backlogFlights = p.window + r.IntN(3)*p.window
	p.absorbEvery = time.Duration(2+r.IntN(100)) * time.Millisecond
	p.absorbMaxSlots = []int{1, 3, 16, 256}[r.IntN(4)]
	p.commitDeadline = time.Duration(4+r.IntN(6)) * time.Second
	// "Fixed" 1 ms, spread by a microsecond so that the K copies of a
	// flight never land at the same virtual instant (see nsUpTo).
	p.putLat = fault.Uniform(time.Millisecond-time.Microsecond, time.Millisecond+time.Microsecond)
	p.getLat = p.putLat
	p.latDesc = "fixed 1ms"
	if p.faults.Latency {
		med := time.Duration(2+r.IntN(15)) * time.Millisecond
		p99 := med * time.Duration(5+r.IntN(30))
		p.putLat, p.getLat = fault.LogNormal(med, p99), fault.LogNormal(med/2, p99/2)
		p.latDesc = fmt.Sprintf("lognormal(median %v, p99 %v)", med, p99)
		if r.IntN(2) == 0 {
			p.putLat = fault.Mixture(0.01, p.putLat, fault.Uniform(200*time.Millisecond, 1500*time.Millisecond))
			p.latDesc += " + 1% stalls 0.2-1.5s"
		}
	}
	if p.faults.Errors {
		p.putErr, p.getErr = r.Float64()*0.05, r.Float64()*0.03
	}
	if p.faults.Ambiguous {
		p.ambiguous = r.Float64() * 0.05
	}
	p.downZone, p.slowZone = r.IntN(3), r.IntN(3)
	if p.faults.ZoneDown {
		at := time.Duration(r.IntN(2000)) * time.Millisecond
		for i := 0; i < 1+r.IntN(3); i++ {
			// Shorter than the commit deadline: K=1 Standard rides it out.
			d := time.Duration(200+r.IntN(2500)) * time.Millisecond
			p.downs = append(p.downs, window{at, d})
			at += d + time.Duration(500+r.IntN(3000))*time.Millisecond
		}
	}
	if p.faults.MetaLatency {
		p.metaLat = time.Duration(1+r.IntN(30)) * time.Millisecond
	}
	if p.faults.MetaFaults {
		p.metaErr, p.metaAmbig = r.Float64()*0.1, r.Float64()*0.1
	}
	if p.faults.ShortContexts {
		p.shortCtx = 0.02 + r.Float64()*0.15
	}
	p.corruptEvery = time.Duration(200+r.IntN(1000)) * time.Millisecond
	p.fenceAt = time.Duration(500+r.IntN(3000)) * time.Millisecond
	p.crashAt = time.Duration(500+r.IntN(3000)) * time.Millisecond
	p.fenceClassExpress = r.IntN(2) == 0

	r2 := rand.New(rand.NewPCG(o.Seed, 0x5eed2))
	p.faults.Outage, p.faults.MetaConflicts = draw2(r2, menu.Outage), draw2(r2, menu.MetaConflicts)
	// Two zones down longer than the commit deadline.
	p.outage = window{time.Duration(300+r2.IntN(2500)) * time.Millisecond, p.commitDeadline + time.Duration(500+r2.IntN(2500))*time.Millisecond}
	z := r2.IntN(3)
	p.outageZones = [2]int{z, (z + 1 + r2.IntN(2)) % 3}
	if p.faults.MetaConflicts {
		p.metaConflict = 0.01 + r2.Float64()*0.08
		if r2.IntN(2) == 0 {
			p.commitLimit = 2 + r2.IntN(6)
		}
	}
	if p.commitLimit > 0 {
		// Drawn as 2-7 before Open refused limits below MinCommitOps;
		// clamped rather than redrawn, so the draws after it are unchanged.
		p.commitLimit = max(p.commitLimit, metastore.MinCommitOps)
	}
	if o.Broken.CommitLimit > 0 {
		p.commitLimit = o.Broken.CommitLimit
	}
	p.zombieFor = time.Duration(r2.IntN(2500)) * time.Millisecond
	r3 := rand.New(rand.NewPCG(o.Seed, 0x5eed3))
	p.reopenAfter = time.Duration(200+r3.IntN(3000)) * time.Millisecond

	r4 := rand.New(rand.NewPCG(o.Seed, 0x5eed4))
	p.lifers = 1 + r4.IntN(2)
	p.neighbour = r4.IntN(2) == 0
	switch r4.IntN(8) {
	case 0:
		p.crowd = 1000 + r4.IntN(1500) // thousands
	case 1, 2:
		p.crowd = 50 + r4.IntN(200)
	}
	if r4.IntN(4) == 0 {
		p.tinyBatch = 0.02 + r4.Float64()*0.08
	}
	if r4.IntN(4) == 0 {
		p.flightBytes = 512 // far below one batch: a flight per batch or so
	}
	if r4.IntN(3) == 0 {
		p.frameBytes = 64 << 10 // = MaxBatchBytes: a stream's batches split over frames
	}
	if r4.IntN(3) == 0 {
		// etcd enforces op and byte limits (--max-txn-ops,
		// --max-request-bytes); these are small enough to split rounds.
		// At least 16 KiB: room for the longest name's stream record
		// and a ref of it (a real etcd takes 1.5 MiB).
		p.commitBytes = 16<<10 + r4.IntN(48<<10)
		if p.commitLimit == 0 {
			p.commitLimit = 16 + r4.IntN(112)
		}
	}
	r5 := rand.New(rand.NewPCG(o.Seed, 0x5eed5))
	if r5.IntN(8) > 0 {
		p.settleEvery = []time.Duration{5, 20, 50, 200}[r5.IntN(4)] * time.Millisecond
		p.settleEvery += time.Duration(r5.IntN(1000)) * time.Microsecond
	} else {
		// Settlement is on by default: these seeds run the library's
		// default interval (Config.SettleInterval 0).
		p.settleEvery = loglet.DefaultSettleInterval
	}
	if r5.IntN(4) > 0 {
		p.trimmed = 1 + r5.IntN(3)
		p.trimEvery = time.Duration(100+r5.IntN(700)) * time.Millisecond
	}
	r6 := rand.New(rand.NewPCG(o.Seed, 0x7e7a1))
	if r6.IntN(2) == 0 {
		p.retained = 1 + r6.IntN(2)
		if r6.IntN(3) > 0 {
			p.retainAge = time.Duration(3+r6.IntN(40)) * time.Second
		}
		if p.retainAge == 0 || r6.IntN(2) == 0 {
			p.retainBytes = int64(512 + r6.IntN(8<<10))
		}
	}
	r7 := rand.New(rand.NewPCG(o.Seed, 0x4ead))
	if r7.IntN(3) == 0 {
		p.readAhead = 1 + r7.IntN(8)
	}
	r8 := rand.New(rand.NewPCG(o.Seed, 0x22a1))
	if p.settleEvery > 0 && r8.IntN(4) == 0 {
		p.preludeOpens = 3 + r8.IntN(3)
	}
	p.deleteRaces = p.neighbour && r8.IntN(2) == 0
	if (p.trimmed > 0 || p.retained > 0) && r8.IntN(2) == 0 {
		p.groups = 1 + r8.IntN(3)
	}
	if o.NoSettle {
		p.settleEvery = -1 // off (0 would be the default interval)
		p.preludeOpens = 0
	}
	if o.NoTrim {
		p.trimmed, p.retained = 0, 0
	}
	return p
}

// draw2 is drawPlan's draw on the second stream: on, with probability 1/2
// (these faults are heavy; the rest of the menu keeps its 2/3).
func draw2(r *rand.Rand, on bool) bool { return r.IntN(2) == 0 && on }

func pick(v, d int) int {
	if v > 0 {
		return v
	}
	return d
}

func (p plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: standard K=%d, express K=3; %d producers, %d streams/class, %d ops each; flight %dB window %d backlog %d absorb every %v max %d slots; commit deadline %v",
		p.seed, p.stdK, p.producers, p.streams, p.ops, p.flightBytes, p.window, p.backlogFlights, p.absorbEvery, p.absorbMaxSlots, p.commitDeadline)
	fmt.Fprintf(&b, "; latency %s", p.latDesc)
	if p.faults.Errors {
		fmt.Fprintf(&b, "; errors put %.3f get %.3f", p.putErr, p.getErr)
	}
	if p.faults.Ambiguous {
		fmt.Fprintf(&b, "; ambiguous puts %.3f", p.ambiguous)
	}
	if p.faults.ZoneDown {
		fmt.Fprintf(&b, "; zone %d down %v", p.downZone, p.downs)
	}
	if p.faults.SlowZone {
		fmt.Fprintf(&b, "; zone %d slow", p.slowZone)
	}
	if p.faults.MetaLatency {
		fmt.Fprintf(&b, "; metastore median %v", p.metaLat)
	}
	if p.faults.MetaFaults {
		fmt.Fprintf(&b, "; metastore errors %.3f ambiguous %.3f", p.metaErr, p.metaAmbig)
	}
	if p.faults.Corrupt {
		fmt.Fprintf(&b, "; corrupt a copy every %v", p.corruptEvery)
	}
	if p.readAhead > 0 {
		fmt.Fprintf(&b, "; read-ahead %d", p.readAhead)
	}
	if p.faults.ShortContexts {
		fmt.Fprintf(&b, "; short contexts %.3f", p.shortCtx)
	}
	if p.faults.Outage {
		fmt.Fprintf(&b, "; zones %v down %v", p.outageZones, p.outage)
	}
	if p.faults.MetaConflicts {
		fmt.Fprintf(&b, "; metastore applied-then-conflict %.3f", p.metaConflict)
	}
	if p.commitLimit > 0 {
		fmt.Fprintf(&b, "; commit limit %d ops", p.commitLimit)
	}
	if p.commitBytes > 0 {
		fmt.Fprintf(&b, " and %d bytes", p.commitBytes)
	}
	fmt.Fprintf(&b, "; %d lifers", p.lifers)
	if p.neighbour {
		b.WriteString(" (and a neighbour star)")
	}
	if p.crowd > 0 {
		fmt.Fprintf(&b, "; %d crowd streams", p.crowd)
	}
	if p.tinyBatch > 0 {
		fmt.Fprintf(&b, "; tiny batches %.3f", p.tinyBatch)
	}
	if p.frameBytes > 0 {
		fmt.Fprintf(&b, "; frames of %dB", p.frameBytes)
	}
	if p.settleEvery > 0 {
		fmt.Fprintf(&b, "; settle every %v", p.settleEvery)
	} else {
		b.WriteString("; settle off")
	}
	if p.retained > 0 {
		fmt.Fprintf(&b, "; retention on %d streams a class (max age %v, max bytes %d)", p.retained, p.retainAge, p.retainBytes)
	}
	if p.trimmed > 0 {
		fmt.Fprintf(&b, "; trim %d streams every ~%v", p.trimmed, p.trimEvery)
	}
	if p.preludeOpens > 0 {
		fmt.Fprintf(&b, "; %d opens with settlement off first", p.preludeOpens)
	}
	if p.deleteRaces {
		b.WriteString("; deletes race cache-miss appends")
	}
	if p.groups > 0 {
		fmt.Fprintf(&b, "; %d consumer groups across trims", p.groups)
	}
	return b.String()
}
