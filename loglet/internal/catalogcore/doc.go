// Package catalogcore is the stream catalogue's protocol as a pure core:
// which incarnation of a name a star serves, and how an incarnation is
// created, looked up, deleted, trimmed, reconfigured and given consumer
// offsets.
//
// Each operation is an Op: a small state machine with no goroutine, clock,
// context, lock or I/O. Next returns the one request it needs executed (a
// metastore read or commit with its expected version, a step of the chain
// core, a cache update, a log line), and Step feeds back that request's
// result. When Next returns nil the operation is over and Outcome says how
// it ended. The shell (package loglet's catalogue.go, trim.go, offsets.go)
// executes one request as one call, holds the cache and turns outcomes
// into errors; every decision is here, where the trace scripts in testdata
// and the core simulator (loglet/internal/sim) reach it.
//
// The rules the core owns:
//
//   - An incarnation retired by a delete is never served again: a lookup
//     serves a record only once the cache has accepted it (CacheRecord), and
//     the cache refuses an incarnation its chain core retired. A lookup
//     whose read raced a delete is refused, and an append that may create
//     the stream then creates the name afresh, as if the read had come after
//     the delete.
//   - The cache never goes back: a lookup's record is cached only if the
//     cache did not move since the lookup looked (its token). If it moved
//     (a concurrent lookup cached an incarnation, a delete dropped one) it
//     reads again, and the record then, newer, is offered (up to
//     MaxLookupRereads).
//   - A create is a commit expecting no record. A failed create re-reads:
//     its own record (same incarnation and nonce) means the ambiguous commit
//     applied; another record means someone else created the name; no
//     record after a conflict means it was created and deleted meanwhile,
//     and the create tries again (up to MaxCreateAttempts).
//   - A delete commits the record's removal and the deleted marker
//     together, expecting the version it read. A failed commit re-reads:
//     gone or another incarnation means it applied. Once applied it retires
//     the incarnation in its chain's core, waits for what was admitted
//     before to have its outcome, then finishes: reclaims every ref and
//     deletes the marker once the chain will write no more (drained).
//   - A trim raises the record's trim point by a commit expecting the
//     version read, on the same incarnation only: another incarnation is
//     not found. A conflict re-reads, up to MaxTrimAttempts.
//   - A configure writes the record's new options by a commit expecting
//     the version read, on the incarnation it first read (or was given)
//     only: another incarnation is not found. A conflict re-reads, up to
//     MaxConfigureAttempts.
//   - An offset commit expects the stream record's version as read with its
//     incarnation. A failure re-reads the offset (its own nonce: applied),
//     then the record: another incarnation is not found; the record moved
//     with the offset unchanged (a trim) commits again, up to
//     MaxOffsetAttempts; anything else is a conflict.
package catalogcore
