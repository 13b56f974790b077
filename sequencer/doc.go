// Package sequencer owns the two orders flightlog promises, as pure state
// machines with no goroutines, clocks or I/O (the loglet drives them under
// its own lock, and the simulation drives them directly):
//
//   - Stream sequencing (Stream): each admitted record gets its stream's
//     next contiguous sequence number, once; a batch whose MatchSeqNum is
//     not the stream's tail is rejected alone with the tail; timestamps
//     never go backwards within a stream.
//   - Slot sequencing (Window): at most Size chain slots are claimed but not
//     yet released; slots are claimed in order, may become durable in any
//     order, and are released strictly in slot order: slot s is released
//     only when it is durable and every slot below it has been released. A
//     halt at slot h stops every release at or past h, forever.
//
// The caller's loop for a chain:
//
//  1. Claim a slot when CanClaim (else wait: the window is full).
//  2. Upload the flight; when it reaches its copy quorum, MarkDurable.
//  3. Release, and acknowledge every flight in the returned range, in order.
//  4. On a foreign occupant or a missed commit deadline, Halt at that slot.
package sequencer
