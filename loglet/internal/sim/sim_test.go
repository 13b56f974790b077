package sim

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	flagSeeds    = flag.Int("sim.seeds", 0, "number of seeds to run (default: the CI budget, or $SIM_SEEDS)")
	flagSeed     = flag.Uint64("sim.seed", 0, "first seed (default 1, or $SIM_SEED); alone, replays that one seed")
	flagV        = flag.Bool("sim.v", false, "log every seed's plan and summary")
	flagScen     = flag.String("sim.scenario", "mix", "TestSim's scenarios: mix (MixedScenarios: a third of seeds fence, a third crash-restart, a sixth fence-only), none, fence, fenceonly, crash")
	flagLog      = flag.Bool("sim.log", false, "send every process's loglet log (info) to stderr")
	flagRuns     = flag.Int("sim.replays", 1, "run each seed up to this many times, stopping at its first failure (a seed replays the same run most of the time, not always: see doc.go)")
	flagNoSettle = flag.Bool("sim.nosettle", false, "switch settlement off on every seed (triage)")
	flagNoTrim   = flag.Bool("sim.notrim", false, "switch the trimmer off on every seed (triage)")
	flagProcs    = flag.Int("sim.procs", 1, "GOMAXPROCS while the simulation runs; 1 makes goroutines that wake at the same virtual instant run in an order that mostly replays; 0 leaves it")
)

func TestMain(m *testing.M) {
	flag.Parse()
	if *flagProcs > 0 {
		runtime.GOMAXPROCS(*flagProcs)
	}
	os.Exit(m.Run())
}

func seedRange() (first uint64, n int) {
	first, n = 1, ciSeeds
	if v, err := strconv.ParseUint(os.Getenv("SIM_SEED"), 10, 64); err == nil {
		first, n = v, 1
	}
	if v, err := strconv.Atoi(os.Getenv("SIM_SEEDS")); err == nil && v > 0 {
		n = v
	}
	if *flagSeed != 0 {
		first, n = *flagSeed, 1
	}
	if *flagSeeds > 0 {
		n = *flagSeeds
	}
	return first, n
}

func replay(test string, seed uint64) string {
	return fmt.Sprintf("go test ./loglet/internal/sim -run '^%s$' -sim.seed=%d -sim.replays=%d -v", test, seed, replayRuns)
}

// replayRuns is how many runs the printed replay command allows a seed to
// fail again in: a seed replays its run most of the time, not every time
// (doc.go, "Replay").
const replayRuns = 50

func report(t *testing.T, test string, r *Result) {
	t.Helper()
	if *flagV {
		t.Logf("%s\n  takeovers %d (Open retries %d), crashes %d, outages %d, epochs %d, slots checked committed %d, beyond-cut seqs %d, zombie appends %d, meta applied-then-conflict %d\n  appends %d (acked %d, not committed %d, unknown %d of which present %d), reads %d (errors %d), halts %d, zone downs %d, corrupted %d, fences %d, linearizability %s, sim time %v\n  settle passes %d (failed %d), objects %d, repointed %d (checked %d), reclaimed %d, copies deleted %d, slots trimmed %d (copies left %d), trims %d, refs read back %d (settled %d), under-replicated %d\n  injected %+v\n  metastore %+v",
			r.Plan, r.Takeovers, r.OpenRetries, r.Crashes, r.Outages, r.Epochs, r.SlotsDecided, r.BeyondCut, r.ZombieAppends, r.MetaConflicts, r.Appends, r.Acked, r.NotCommitted, r.Unknown, r.UnknownPresent, r.Reads, r.ReadErrors, r.Halts, r.ZoneDowns, r.Corrupted, r.Fences, r.Linearizability, r.SimTime, r.SettlePasses, r.SettleFailures, r.SettledObjects, r.Repointed, r.Repoints, r.Reclaimed, r.DeletedCopies, r.SlotsTrimmed, r.LeftoverCopies, r.Trims, r.RefsChecked, r.SettledRefs, r.UnderReplicated, r.Injected, r.MetaInjected)
	}
	if r.Failed() {
		t.Errorf("seed %d: %d violations:\n  %s\nplan: %s\nreplay: %s", r.Seed, len(r.Violations), strings.Join(r.Violations, "\n  "), r.Plan, replay(test, r.Seed))
	}
}

// seedWall is how long a seed runs in wall time before runSeed says so on
// stderr. A race-build seed takes about a second, but a loaded machine can
// stretch that past any bound, so reaching it fails nothing: runSeed prints
// the seed and a goroutine dump, and keeps waiting. What a hang is, is
// decided in virtual time (a Close that does not return within 10 virtual
// minutes is a violation; a bubble left blocked fails its seed) or, for a
// bubble whose clock stops or that livelocks, by go test's -timeout, whose
// panic then follows the seed's name on stderr.
const seedWall = 60 * time.Second

// runSeed runs one seed, naming it on stderr (with every goroutine's stack)
// if it is still running after seedWall of wall time.
func runSeed(t *testing.T, o Options) *Result {
	t.Helper()
	done := make(chan *Result, 1)
	go func() { done <- Run(t, o) }()
	slow := time.NewTimer(seedWall)
	defer slow.Stop()
	select {
	case r := <-done:
		return r
	case <-slow.C:
		fmt.Fprintf(os.Stderr, "%s: seed %d still running after %v of wall time (a loaded machine, or a hang: go test's -timeout decides)%s; replay: %s\n",
			t.Name(), o.Seed, seedWall, dumpGoroutines(o.Seed), replay(t.Name(), o.Seed))
	}
	return <-done
}

// dumpGoroutines writes every goroutine's stack to a file, for a seed that
// hung, and says where (a hang is rare and timing-dependent: the stacks
// are what is left to read).
func dumpGoroutines(seed uint64) string {
	f, err := os.CreateTemp("", fmt.Sprintf("sim-hang-seed%d-*.txt", seed))
	if err != nil {
		return ""
	}
	defer f.Close()
	if err := pprof.Lookup("goroutine").WriteTo(f, 2); err != nil {
		return ""
	}
	return "; every goroutine's stack is in " + f.Name()
}

// scenarios is TestSim's scenario for a seed, as -sim.scenario says.
func scenarios(t *testing.T, seed uint64) Scenarios {
	switch *flagScen {
	case "mix":
		return MixedScenarios(seed)
	case "none":
		return Scenarios{}
	case "fence":
		return Scenarios{Fence: true}
	case "fenceonly":
		return Scenarios{FenceOnly: true}
	case "crash":
		return Scenarios{CrashRestart: true}
	}
	t.Fatalf("-sim.scenario=%q: want mix, none, fence, fenceonly or crash", *flagScen)
	return Scenarios{}
}

// TestSim runs the CI seed budget (or -sim.seeds / -sim.seed) with every
// fault of the menu and the scenario mix (MixedScenarios, or -sim.scenario).
func TestSim(t *testing.T) {
	first, n := seedRange()
	start := time.Now()
	var sim time.Duration
	var tot Result
	failed, settledCrashes, upgraded, upgradedSettled := 0, 0, 0, 0
	for s := first; s < first+uint64(n); s++ {
		o := Options{Seed: s, Scenarios: scenarios(t, s), NoSettle: *flagNoSettle, NoTrim: *flagNoTrim}
		if *flagLog {
			o.Log = os.Stderr
		}
		r := runSeed(t, o)
		for k := 2; k <= *flagRuns && !r.Failed(); k++ {
			r = runSeed(t, o)
			if r.Failed() {
				t.Logf("seed %d failed on run %d", s, k)
			}
		}
		sim += r.SimTime
		report(t, "TestSim", r)
		if r.Failed() {
			failed++
		}
		tot.Appends += r.Appends
		tot.Acked += r.Acked
		tot.NotCommitted += r.NotCommitted
		tot.Unknown += r.Unknown
		tot.UnknownPresent += r.UnknownPresent
		tot.Reads += r.Reads
		tot.Halts += r.Halts
		tot.ZoneDowns += r.ZoneDowns
		tot.Corrupted += r.Corrupted
		tot.Takeovers += r.Takeovers
		tot.OpenRetries += r.OpenRetries
		tot.OpenLost += r.OpenLost
		tot.Seals += r.Seals
		tot.SealViolations += r.SealViolations
		tot.Crashes += r.Crashes
		tot.Outages += r.Outages
		tot.Fences += r.Fences
		tot.Epochs += r.Epochs
		tot.SlotsDecided += r.SlotsDecided
		tot.BeyondCut += r.BeyondCut
		tot.ZombieAppends += r.ZombieAppends
		tot.MetaConflicts += r.MetaConflicts
		tot.BareReads += r.BareReads
		tot.BareReadErrors += r.BareReadErrors
		tot.SnapshotsDamaged += r.SnapshotsDamaged
		tot.Trims += r.Trims
		tot.RetentionTrims += r.RetentionTrims
		tot.SettlePasses += r.SettlePasses
		tot.SettleFailures += r.SettleFailures
		tot.SettledObjects += r.SettledObjects
		tot.Repointed += r.Repointed
		tot.Reclaimed += r.Reclaimed
		tot.DeletedCopies += r.DeletedCopies
		tot.SlotsTrimmed += r.SlotsTrimmed
		tot.RefsChecked += r.RefsChecked
		tot.SettledRefs += r.SettledRefs
		tot.Repoints += r.Repoints
		tot.ReclaimRaces += r.ReclaimRaces
		tot.UnderReplicated += r.UnderReplicated
		tot.LeftoverCopies += r.LeftoverCopies
		if r.SettlePasses > 0 && r.Crashes > 0 {
			settledCrashes++
		}
		tot.PreludeOpens += r.PreludeOpens
		if r.PreludeOpens > 0 {
			upgraded++
			if r.SettlePasses > r.SettleFailures {
				upgradedSettled++
			}
		}
		tot.DeleteRaces += r.DeleteRaces
		tot.RaceAppends += r.RaceAppends
		tot.GroupAcks += r.GroupAcks
		tot.GroupTrimmedAcks += r.GroupTrimmedAcks
		add(&tot.Injected, r.Injected)
		tot.MetaInjected.Failed += r.MetaInjected.Failed
		tot.MetaInjected.Ambiguous += r.MetaInjected.Ambiguous
		tot.MetaInjected.Delayed += r.MetaInjected.Delayed
	}
	t.Logf("readers over the healthy stores: %d calls, %d failed; tails snapshots damaged in every copy: %d", tot.BareReads, tot.BareReadErrors, tot.SnapshotsDamaged)
	t.Logf("settlement: passes %d (failed %d), settled objects %d, refs repointed %d (the observer checked %d overwrites; %d merged refs' objects already reclaimed by a trim or delete), refs reclaimed %d, slot copies deleted %d, slots below the trim cursors %d (copies left there %d); crash seeds that settled %d; trims %d (and %d by retention); live refs read back at the end %d (settled %d), settled objects under-replicated %d",
		tot.SettlePasses, tot.SettleFailures, tot.SettledObjects, tot.Repointed, tot.Repoints, tot.ReclaimRaces, tot.Reclaimed, tot.DeletedCopies, tot.SlotsTrimmed, tot.LeftoverCopies, settledCrashes, tot.Trims, tot.RetentionTrims, tot.RefsChecked, tot.SettledRefs, tot.UnderReplicated)
	t.Logf("lifecycle races: %d seeds switched settlement on after %d opens without it (%d of them settled); %d deletes raced by %d cache-miss appends; %d consumer-group acks committed, %d of them on a trimmed stream",
		upgraded, tot.PreludeOpens, upgradedSettled, tot.DeleteRaces, tot.RaceAppends, tot.GroupAcks, tot.GroupTrimmedAcks)
	t.Logf("binding seal: successor Open retries %d (of which ErrTakeoverLost %d), seals %d, writes that broke the seal %d", tot.OpenRetries, tot.OpenLost, tot.Seals, tot.SealViolations)
	t.Logf("%d seeds from %d (%d failed): %v simulated in %v wall; appends %d (acked %d, not committed %d, unknown %d of which present %d), reads %d, halts %d, zone downs %d, corrupted copies %d; injected %+v; metastore failed %d ambiguous %d delayed %d; takeovers %d (Open retries %d), crashes %d, outages %d, harness fences %d, epochs %d, slots checked committed %d, beyond-cut seqs %d, zombie appends %d, metastore applied-then-conflict %d",
		n, first, failed, sim, time.Since(start), tot.Appends, tot.Acked, tot.NotCommitted, tot.Unknown, tot.UnknownPresent, tot.Reads, tot.Halts, tot.ZoneDowns, tot.Corrupted,
		tot.Injected, tot.MetaInjected.Failed, tot.MetaInjected.Ambiguous, tot.MetaInjected.Delayed, tot.Takeovers, tot.OpenRetries, tot.Crashes, tot.Outages, tot.Fences, tot.Epochs, tot.SlotsDecided, tot.BeyondCut, tot.ZombieAppends, tot.MetaConflicts)
}
