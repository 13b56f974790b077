// Package loglet is flightlog's public facade: named streams a Go service
// appends to and reads from, with acknowledgements that mean "durable in
// object storage".
//
// A Star is the composition root for one star this process leads. For each
// configured class it runs one chain: producers' batches are sequenced and
// admitted to the class's pool; one loop cuts the pool into flights and
// claims their chain slots in order; each flight is rendered once as a
// transit bundle and written with PutIfAbsent to the K buckets of the class;
// a slot is durable at W copies, and acks release strictly in slot order.
// The metastore is not on this path.
//
// Every append ends in exactly one of three ways, and the error says which:
// acked (nil); definitely not committed (errors.Is(err, ErrNotCommitted):
// safe to retry); or outcome unknown (errors.Is(err, ErrOutcomeUnknown):
// retry with the same Batch.Producer, and the batch is committed once: a
// Producer does it for you; docs/design.md, "Producers: exactly once
// across retries").
//
// # A chain's runtime: a pure core and a thin shell
//
// Every decision of a chain is made by its core (loglet/internal/chaincore,
// after etcd-raft's raft.RawNode): admission and sequencing, the cut, the
// claim and window, release in slot order, each batch's outcome in order,
// halts, the succession protocol, absorb pacing, the backlog and its stall
// diagnosis, and the clean close. The core does no I/O, starts no goroutine
// and reads no clock. The shell (lane.go) is the loop that drives it:
//
//  1. One mutex guards the core; producers call Admit under it, after
//     reserving the batch's bytes in the pool budget (where admission
//     blocks at the budget).
//  2. One goroutine takes the core's Ready (and Advances it) under the lock,
//     then executes it outside: one worker per request
//     (loglet/internal/work: one I/O call, one event back, but for a
//     settlement pass, still run whole by its worker; a request
//     carries the values its worker needs, the checkpoint the core holds
//     among them, and its event brings the new values back: a worker holds
//     no state and makes no decision), cancellations,
//     pool budget returned, outcomes delivered in the order decided, read
//     sessions woken, logs emitted.
//  3. It waits for the next event or the core's wake-up time and steps it
//     into the core; the core decides what follows.
//
// Each chain runs under an epoch minted by compare-and-swap. Open mints the
// first epoch of a new chain, continues after a clean Close from the
// recorded seal, or takes the chain over (seal the checkpoint, fence the old
// epoch by point lookups, mint with the seal, garbage-probe, walk and absorb
// every committed slot below the cut). A halt (a foreign occupant, a missed
// commit deadline, a lost seal) is recovered in place by the same
// succession sub-machine: fence the own epoch, ack below the cut, mint the
// next epoch (only while this process holds the checkpoint's seal: the seal
// is binding), republish the rest. A process that finds itself sealed by a
// successor stops leading the chain: its reads go on from history, its
// appends fail with a *NotLeaderError.
//
// A star's leadership (which of its chains this process holds) has a core
// of its own (loglet/internal/starcore): Open opens one chain per enabled
// class, Standard first (the star's lock), checks that the first is still
// its own before each later chain and at the end, and takes a later chain
// lost to a rival again while it holds the first, in the opening and
// while serving; Open, the shell's watchChains (while serving) and Close
// (leadership.go) execute its requests.
//
// Close(ctx) is a cooperative handoff (flush, acks, absorb, clean seal) that
// ends within ctx in every state and returns what failed.
//
// The absorb, off the ack path, turns released flights into span refs in
// the metastore (one Commit per paced round) so any process can read
// history (Reader); until a flight is absorbed the leader serves it from its
// flight index.
//
// Settlement, on by default (Config.SettleInterval; negative: off), rewrites absorbed
// transit slots into per-stream settled objects in the Standard bucket set
// (package settle), repoints their refs, advances the chain's trim cursor
// and deletes the slots behind it from every bucket. Trim and retention
// raise a stream's trim point and reclaim the refs and settled objects
// below it (ConfigureStream changes a stream's retention after creation,
// from any process); DeleteStream ends an incarnation at once and reclaims
// its data from a durable marker. docs/design.md describes each protocol, its
// invariants, where each is enforced and which test breaks when it does.
//
// # What is not in this package
//
// loglet holds what most programs call: Open, Star, Reader, the sessions,
// Config and Stats. Two jobs a program needs less often live beside it, and
// use only loglet's exported API:
//
//   - loglet/groups: consumer groups and their offsets (groups.Open, a
//     Session with Recv, Ack and Close; Offsets with Get, Commit, Reset,
//     Delete, List and Groups; Lags). Only services that consume as a group
//     need it; it reads through Star.Metastore, Reader.Metastore and
//     ReadSession.Incarnation.
//   - loglet/open: open.Dir, the embedded default (a bbolt metastore and
//     local-directory buckets in one directory). It is one choice of
//     backends among several, and it brings in bbolt, which a program on S3
//     and etcd has no use for: loglet imports no backend. It hands the bbolt
//     file to Config.Closers, which Star.Close closes.
//
// Star.RepairUnderReplicated stays here: it reads the chain's core's list
// of under-replicated slots and its epoch, which are the lane's internals.
//
// # Glossary
//
// One name per concept; the code uses these (where it still uses two, the
// second is noted for a later rename).
//
//   - star: the unit of leadership; one process leads it (a Star).
//   - class: Standard or Express; each has its own K buckets and quorum W.
//   - chain: one star's durable log in one class: slots per epoch, in the
//     class's buckets (package chain).
//   - lane: a chain's runtime in this process: its core, the loop that
//     executes it, and its workers (lane.go). Also called "the chain's
//     runtime" and, in older comments, "the leader".
//   - core: the lane's decision maker (chaincore.Core), pure: no I/O, no
//     goroutine, no clock.
//   - worker: runs one request of the core and steps back one event
//     (loglet/internal/work).
//   - slot: one position of a chain; each bucket holds at most one object
//     there, ever (PutIfAbsent).
//   - flight: batches of many streams cut from the pool and written to one
//     slot as one transit bundle; a flight copy is one bucket's object.
//   - poison: the object a fencer puts in a slot so no writer can reach W.
//   - committed, dead: a slot with W flight copies of one nonce, or with
//     K−W+1 poisons; never both, never revoked.
//   - release: a durable slot's batches acked, strictly in slot order.
//   - epoch: one leadership term of a chain, minted by compare-and-swap.
//   - cut (of an epoch): its first dead slot; nothing at or past it counts.
//     Cutting a flight (from the pool) is a different act.
//   - seal: the checkpoint's owner mark, taken first by a takeover. An
//     epoch's clean seal is the cut a clean Close records.
//   - halt: the incumbent stops releasing at a slot (foreign occupant,
//     missed commit deadline, lost seal).
//   - succession: replacing an epoch by the next: a takeover (opening) or a
//     halt's recovery; its steps are seal, fence, mint, probe, walk or
//     republish.
//   - fence: deciding an epoch's cut by poisoning every free bucket of its
//     slots (chain.Fence).
//   - walk: reading every committed slot below a cut (chain.Walk).
//   - garbage probe: poisoning the slots just past a cut (chain.GarbageProbe).
//   - absorb round: released flights turned into span refs, and the
//     checkpoint advanced, in one metastore Commit.
//   - span ref: where records [Start, End) of one stream live.
//   - checkpoint: everything before (Epoch, Next) is absorbed; it carries
//     the seal and the pending round.
//   - tails snapshot: every stream's tail as of a checkpoint, full or a
//     delta over a full one.
//   - flight index: released, unabsorbed batches a leader serves reads from.
//   - backlog: claimed, unabsorbed flights and bytes; bounded.
//   - straggler: a copy still uploading after its flight was acked;
//     under-replicated: a committed slot missing some of its K copies.
//   - settlement: the settle package's passes (the "auditor" is its old
//     name).
//   - settled object: one stream's records rewritten out of transit slots.
//   - trim cursor: how far settlement got through a chain; chain trim
//     deletes the slots behind it.
//   - trim point: a stream's first readable record (Trim, retention).
//   - incarnation: one life of a stream name; its stream ID keys its data.
//   - retire: ending admission to a deleted incarnation (Core.Retire).
//   - doomed: no longer needed and deleted a while later; said of tails
//     snapshots (Checkpoint.Doomed) and of merged settled objects alike.
//   - pending: a round recorded before its refs (Checkpoint.Pending); also
//     a settled object written before its repoint, and Tail.Pending.
//   - deleted marker: the metastore record of a deleted incarnation whose
//     data is still being reclaimed.
//   - Reader: reads absorbed history in any process, leading nothing.
//   - consumer group, offset: a named consumer's durable position in one
//     incarnation of a stream (loglet/groups).
package loglet
