// Package chain owns the durable artifact of the write path: chain slots in
// a class's bucket set, and the epoch records that name who may write them.
//
// A chain is one (star, class): per epoch, a contiguous sequence of slots at
// chains/<star>/<class>/<epoch>/<slot> in every bucket of the set. This
// package keeps invariant 4's write half: a flight copy is created only by a
// conditional PUT (PutIfAbsent), so a slot key holds at most one object per
// bucket, ever; a slot is committed when W buckets hold this writer's copy
// (kind flight, same epoch, slot and nonce), and a writer that finds any
// other occupant (a poison, another writer's flight, an unreadable object)
// reports it as foreign, which halts the epoch.
//
// WriteFlight is the quorum commit of one flight. Its caller (the loglet's
// flusher) claims slots in order, renders each flight once, and calls
// WriteFlight for each slot in its own goroutine; ordering never depends on
// which returns first.
//
// Ambiguous PUT failures (timeouts, 5xx, lost responses) are retried; a
// retry that finds the key occupied probes the 60-byte envelope, and our own
// nonce there means an earlier attempt landed (a ghost PUT): the copy counts.
package chain
