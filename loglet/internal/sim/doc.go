// Package sim is flightlog's seeded fault simulation (docs/design.md, "How
// the code is tested"): a harness that runs a star over simulated buckets
// and a simulated metastore under injected faults, a workload of producers
// and readers, and a checker that fails a seed on any violation of the write
// path's invariants.
//
// # The harness
//
// Run(t, Options{Seed: s}) runs one seed inside testing/synctest, so time
// is virtual: every goroutine of loglet, every store latency and every
// timer runs in the bubble, and minutes of simulated traffic take
// milliseconds of wall time. Everything a seed decides comes from
// math/rand/v2 PCG streams derived from the seed: the plan (sizes, loglet
// knobs, which faults and how hard), each producer's and reader's batches
// and timing (each goroutine its own stream), and every fault: a
// FaultStore call draws from a generator keyed by the seed, the call's key
// and how many calls on that key came before (not from one sequence shared
// in arrival order), and retry backoff has no random jitter. Waits are
// drawn at nanosecond resolution so that independent events rarely share a
// virtual instant.
//
// # Replay
//
// What is left to chance is the order in which goroutines that are
// runnable at the same virtual instant run: the Go scheduler's, not the
// seed's (a broadcast wakes several waiters; select picks among ready
// cases at random). The tests pin GOMAXPROCS to 1 (-sim.procs) to narrow
// it. Measured over seeds 1-32, 8 runs each: 224 of 256 runs (88%)
// reproduce their seed's most common run exactly (every count, the
// simulated time to the nanosecond); before keyed draws, fixed jitter and
// nanosecond waits it was 25 of 128 (20%, seeds 1-16). So a failing seed prints a
// replay command that reruns the seed until it fails again
// (-sim.replays=50).
//
// The world: K buckets per class (Standard K=1 or 3, Express K=3), each an
// objstore.Mem (optionally behind a planted bug), seen by each leader
// process through its own objstore.FaultStore (its network); one
// metastore.Mem, seen through a metastore.FaultStore. Bucket i of every
// class is zone i.
//
// # The fault menu (Faults; each drawn per seed, so seeds mix them)
//
//   - Latency: LogNormal PUT/GET latency, some seeds with a 1% Mixture of
//     0.2–1.5 s stalls, so completions reorder.
//   - Errors: injected PUT/GET failures, not applied.
//   - Ambiguous: PUTs applied, then reported failed.
//   - ZoneDown: one zone down for 0.2–2.7 s, one to three times, toggled by
//     a scheduled goroutine (shorter than the commit deadline).
//   - SlowZone: one zone with a much slower latency mixture.
//   - MetaLatency, MetaFaults: metastore latency, errors and ambiguous
//     (applied-then-failed) writes, Commit included.
//   - Corrupt: a byte flipped in one copy of a released slot, only where
//     all K copies exist and none is corrupt yet (so at most K−W per slot
//     for K=3; never for K=1).
//   - ShortContexts: producers give up waiting (outcome unknown) and retry,
//     idempotently with MatchSeqNum on their own stream, or without it on
//     shared streams.
//   - Outage: two zones down longer than the commit deadline, so chains
//     halt by deadline and recover (fence own epoch, late acks, mint,
//     republish).
//   - MetaConflicts: conditional metastore writes that apply and then report
//     ErrConflict; on some seeds a Commit size limit (absorb splits rounds).
//
// Scenarios (MixedScenarios: the CI mix, by seed mod 6): Fence (a second
// process Opens the star while the first runs: takeover of a live
// incumbent, which becomes a zombie; some producers stay on it for a
// while), FenceOnly (the harness seals and fences one chain and dies before
// minting: the seal is binding, so the incumbent fences its own epoch, acks
// below the cut and stops leading that chain without minting; later a new
// process Opens the star, as a host retries Open), CrashRestart (the
// leader's stores go down, it is never Closed before the checker runs, and
// a new process Opens and takes over).
//
// # The workload
//
// Producers (3–6): id%3==0 own a stream and append with MatchSeqNum;
// id%3==1 append one-shot to shared streams of both classes; id%3==2
// pipeline 1–8 batches through an AppendSession and wait for them in
// completion order. Bodies start with "op<id>.r<idx>|", so every record
// read names the append that wrote it. A trimmer Trims one to three of the
// shared and exclusive streams at random seqs at or below what is acked
// (most seeds), and each chain's leader settles in every seed: every
// 5-200 ms in seven seeds in eight, at the library's default interval in
// the others. Readers: random leader Reads and
// CheckTails, a leader ReadSession per class, and a loglet.Reader (a
// non-leader) doing reads, tails and a polling session. After the workload
// the faults are healed, 90 virtual seconds let every batch settle, the
// leader reads every stream, and the star is Closed.
//
// The lifecycle races (issue 22), each drawn per seed from a stream of
// its own: on a quarter of the seeds that settle, three to five processes
// first open the star, append and close it with settlement off (the
// prelude), so the main run switches settlement on for a star with several
// epochs behind its trim cursor; on half the seeds with a neighbour star,
// a lifer sometimes has an incarnation created through the neighbour and
// deleted through the leader while two to six racers append to it there
// (their first appends are cache-miss lookups; stream-record reads reply
// late, as over a network, so a lookup can act on a record the delete
// has just removed); on half the seeds that trim, one to three consumer
// groups follow trimmed and retained streams, acknowledging as they go.
//
// # The checker
//
// A seed fails on any of:
//   - an append without exactly one outcome (acked, ErrNotCommitted,
//     ErrOutcomeUnknown), a malformed ack, a MatchSeqNum ack elsewhere, a
//     mismatch error that is not one;
//   - an AppendSession future acked before an earlier one completed, or
//     acked below an earlier one;
//   - in the final state: a gap or a duplicate sequence number, a record
//     of an append that ended not-committed, a torn or repeated batch, an
//     acked batch missing or not at its ack;
//   - any read (leader, session, Reader) returning a record that differs
//     from the final state at that seq or from what was submitted (byte
//     for byte), non-consecutive seqs, or a session that skips or repeats;
//   - the chain, walked epoch by epoch from the bare buckets up to each
//     recorded cut (the last epoch: the clean seal of the leader's Close;
//     below the trim cursor, where settlement deleted the slots, from the
//     observer's copy of the flight each slot was decided committed with),
//     not continuing each stream's seqs with no gap and no seq twice, or
//     differing from the leader's final read; a slot below a cut that does
//     not decide committed from its final occupants (chain.Decide), a
//     fenced cut that does not decide dead, a committed/dead flip below a
//     cut (the observer re-decides each slot on every write), a recorded
//     cut that changes, a second fencer (run last) reaching another cut;
//     a read returning a record found only at or past a cut; a span ref
//     overwritten;
//   - a process that released a slot at or past its epoch's cut; an append
//     sent to a deposed or crashed process after the takeover that was
//     acked, or ended unknown and is committed;
//   - a fresh Reader after Close that does not read every stream back
//     exactly (from its trim point), or whose CheckTail differs;
//   - settlement and trim (settlecheck.go): a ref overwritten other than by
//     a settled ref holding the same records byte for byte (a ref deleted
//     in the same Commit likewise covered), a trim cursor that moves back
//     or passes the checkpoint, a live ref at the end whose extents do not
//     all read back with good CRCs or hold other records than the chain's,
//     live refs that do not cover a stream from its trim point to its tail,
//     a read begun after a Trim returned that holds a record below the trim
//     point it left (a Reader's session: after 5 s), a final trim point
//     outside what the Trim calls left and asked for;
//   - the lifecycle races: an append begun after DeleteStream returned
//     that is acked (into the deleted incarnation); a consumer group's
//     open, Recv or Ack failing ErrStreamNotFound on a stream never
//     deleted, or its committed offset moving back; a trim cursor still
//     inside the prelude's epochs after the 90 healed seconds;
//   - after every process closed: a settled object in the Standard buckets
//     that no ref points at and no settle marker or deleted-incarnation
//     marker names (a leak nothing reclaims), or a doomed object still
//     there well after its grace ran out (passes run when one falls due,
//     idle or not);
//   - a Stats sample with the pool over its budget, the backlog over its
//     flights or bytes, or the window over its size;
//   - per-stream histories not linearizable (porcupine) against an
//     append-only sequence: appends return [start, end) or fail; unknown
//     outcomes return at the end of time (porcupine's convention: they may
//     take effect or not); reads return a slice of the sequence; the
//     leader's CheckTail is at least, a Reader's at most, its length.
//
// Unknown appends are resolved by the final state for porcupine (present:
// took effect at its seq; absent: no effect). A Close that does not return
// within 10 virtual minutes is a violation; a seed whose bubble's clock
// stops or that livelocks runs until go test's -timeout, and after
// seedWall of wall time the test names it on stderr with every
// goroutine's stack (a wall-clock bound never fails a seed: a loaded
// machine overruns it). The binding seal is checked
// on every checkpoint write, below the fault wrappers, knowing who writes
// (sealwatch.go): the checkpoint's owner changes only through a seal (a
// candidate sealing for the epoch after the record's current one), and no
// process writes over another owner's seal except by sealing it itself.
//
// # The core-level simulation
//
// RunCore (coresim.go) drives the chain's pure cores (loglet/internal/chaincore)
// directly, with no goroutine of its own and no real clock: one loop picks
// the next thing to happen in virtual time (a request completing, executed
// in line by loglet/internal/work against objstore.Mem buckets and a
// metastore.Mem; a core's wake-up; an admit; a zone or the metastore going
// down or up; a live takeover; a crash whose in-flight PUTs land later),
// steps it into its core and executes the core's Ready. Every choice comes
// from one seeded generator in a fixed order, so a seed replays its exact
// trace every time: TestCoreSim runs every seed twice and compares the
// trace hashes (-sim.core.trace prints one; -sim.core.diff keeps both and
// prints where they part). An executor call may start goroutines of its
// own (a fence's slots and buckets, a probe's keys), so what it leaves in
// the stores must not depend on their interleaving: the fence runs with
// work.Env.FenceParallel 1, since with more its look-ahead's poisons past
// the cut land or not as its goroutines race the cancel.
// TestCoreReplayPerturbed replays seeds with the scheduling inside every
// bucket call shaken (perturbedBucket) and GOMAXPROCS varied, and fails
// if a run hashes differently. The checker: invariant 1 at
// every release (slot order, W copies stored), the seal checker, flips
// below a cut, overwritten refs, the window and backlog bounds, every batch
// one outcome, and the final chain walked from the bare buckets (streams
// contiguous from 0, no seq twice, every acked batch at its ack byte for
// byte, no not-committed batch anywhere); the planted bugs are caught there
// too (coresim_planted_test.go, -tags invariants). Every seed settles
// (coresim_settle.go) and ends with a quiet period (CoreOptions.Quiet,
// -sim.core.quiet; 0: none): no appends, faults off, the live leader run
// until its settlement has caught up, then a checker that fails on any
// doomed or pending marker, entry on the under-replicated list, flight
// copy of a settled slot or settled object no ref points at.
//
//	go test ./loglet/internal/sim -run '^TestCoreSim$' -v                       # seeds 1-256, each twice
//	go test ./loglet/internal/sim -run '^TestCoreSim$' -sim.core.seed=7 -sim.core.trace -v   # one seed's trace
//
// RunCatalog (coresim_catalog.go) drives the stream catalogue's core
// (loglet/internal/catalogcore) the same way, for a leader and a neighbour
// over one metastore.Mem: creates, deletes, re-creates, appends, trims and
// offset commits interleaved request by request, with metastore failures
// before and after applying. It checks that no retired incarnation is
// served, cached or admitted to, that a process never serves an older life
// of a name than one it served, that trims and offsets land on their own
// incarnation, and that a deleted incarnation whose marker is gone left no
// ref. TestCatalogSim runs each seed twice and compares trace hashes.
//
//	go test ./loglet/internal/sim -run '^TestCatalogSim$' -sim.catalog.seed=7 -sim.catalog.trace -v
//
// RunCoreStar (coresim_star.go) runs the star's leadership the same way:
// two or three processes open one star at once, each a leadership core
// (loglet/internal/starcore) driving a chain core per class, in the same
// loop. Its checker: a failed opening runs no chain; at the end one process
// holds every chain (the epoch records name it) and no process serves
// from a chain it does not hold; Close seals every chain cleanly.
// TestCoreStarSim runs each seed twice and compares the traces;
// TestCoreStarSimFindsABlindShell plants a shell whose hold checks always
// answer "ours" and must see the star split.
//
//	go test ./loglet/internal/sim -run '^TestCoreStarSim$' -sim.star.seed=7 -sim.star.trace -v   # one seed's trace
//
// # Running, replaying, soaking
//
//	go test -race ./loglet/internal/sim     # seeds 1-16 (the race budget), ~20 s on 2 cores
//	go test ./loglet/internal/sim           # seeds 1-500 (the non-race budget), ~30 s
//	go test ./loglet/internal/sim -run '^TestSim$' -sim.seed=5 -sim.replays=50 -v   # replay one seed
//	go test ./loglet/internal/sim -run '^TestSim$' -sim.seed=1001 -sim.seeds=5000 -v  # soak (or SIM_SEEDS)
//
// scripts/test.sh (CI) runs both budgets. Every failure prints the seed,
// its plan and the replay command. -sim.v logs each seed's plan and what it
// injected; -sim.scenario picks the scenarios (mix, none, fence, fenceonly,
// crash); -sim.log streams every process's loglet log.
//
// # Planted bugs
//
// planted_test.go switches on one deliberately broken part at a time and
// fails unless the checker reports a violation within the seed budget
// (each test stops at its first catch; -sim.rate runs every seed and
// reports the catch rate): acks released out of slot order
// (invariants.ReleaseOutOfOrder, in the chain's core), a fence that accepts
// W−1 copies (a bucket that serves another bucket's copy as its own), an
// absorb that overwrites refs (invariants.AbsorbOverwritesRefs, in absorb;
// its test forces split rounds so replays happen), a PutIfAbsent that
// overwrites, PUTs acked and never stored, a metastore Commit that ignores
// versions, and a Reader whose metastore view stops early. The bugs of
// package invariants are planted per test (invariants.Plant, undone when
// the test ends); they compile only with -tags invariants, and so do these
// tests:
//
//	go test -tags invariants ./loglet/internal/sim -run Planted -v
package sim
