// Package fleet runs a deployment's stars across processes on etcd:
// membership under session leases, placement of the stars on the live
// members by weighted rendezvous hashing, a controller in each member that
// opens the stars placed on it and closes the ones placed elsewhere, and a
// routing table the host asks where a stream's leader is.
//
// It owns the keys under <Config.Prefix>fleet/ and nothing else:
//
//	<Prefix>fleet/members/<member>       a Member, under the member's lease
//	<Prefix>fleet/leads/<star>/<member>  a Lead (the member and the epoch), under the same lease
//	<Prefix>fleet/claims/<star>/<member> a claim (empty): the member is opening the star, under the same lease
//	<Prefix>fleet/drained/<member>       a drain (Drain), outside any lease
//	<Prefix>fleet/moves/<star>           a placement override (Move), outside any lease
//
// The invariant it keeps is the loglet's, not one of its own: leadership is
// decided only by the epoch protocol (the seal and the mint in the
// metastore). Placement says which member should try to lead a star; a
// member whose lease has expired but which still holds its stars (a
// partition) is deposed by its successor's seal and fence, never by trust
// in its lease, and nothing it appends past the cut is acked.
//
// # The caller's loop
//
//  1. Build an etcd client and the deployment's metastore, buckets and
//     Config (Stars, Meta, and OpenStar, which returns the loglet.Config of
//     a star: the host keeps control of buckets and metastore).
//  2. Join with this process's Member (name, address, weight). The node's
//     controller opens the stars placed on it, publishing a Lead for each.
//  3. Serve: for a stream, Router.Route names its star and the member
//     leading it; Node.Star returns the *loglet.Star when that member is
//     this one. Otherwise forward to the member's Addr (the module
//     contrib/fleethttp does it over HTTP, with a client). A
//     *loglet.NotLeaderError or ErrUnled means a move is under way: wait
//     for Router.Changed and route again.
//  4. Close the node to leave cleanly (a drain, a rolling restart): its
//     stars are closed and handed over without a fence. A session lost
//     meanwhile (a lease expired or revoked, etcd unreachable for longer
//     than the TTL) needs nothing from the host: the node closes its stars,
//     opens a new session and joins again by itself (Node.Rejoins counts
//     it). With Config.NoRejoin it stops instead: Node.Done closes and
//     Node.Err wraps ErrSessionLost; Join again.
//
// # Handoffs
//
// A planned move (a member joins or leaves): the old owner sees the star
// placed elsewhere, closes it (flush, absorb, seal) and deletes its Lead;
// the new owner, which has waited for that Lead to go, opens the star from
// the clean seal without a fence. A member claims a star before it opens
// it, and the claim is waited for like a lead: members that join together
// (a cold start) hand over the stars placed on the first of them while
// it was alone, instead of fencing its opens. The new owner waits at most
// Config.HandoffWait: an old owner whose Close cannot finish is fenced. A
// crash: the old owner's lease expires, its Leads go with it, and the new
// owner opens the star at once (its Open seals, fences and takes over).
// A failed Open is retried with a backoff. A member holding a star that a
// successor has deposed (loglet's Stats say so, or a Lead of a higher epoch
// appears) closes it, and opens it again if it is still placed there. A
// star that recovers from a halt in place has minted a new epoch: its Lead
// is published again at that epoch.
//
// # A lost session
//
// When the session's lease is lost, the member first stops leading: it
// serves none of its stars, ends its opens, and closes every star it holds
// (one a successor has fenced acks nothing past the cut: the epoch protocol
// says so, not the lease). Then it revokes the lost lease (etcd extends
// leases across its restarts), grants a new one, publishes its member
// record under a new Owner, retrying with a jittered backoff while etcd is
// unreachable, and starts its controller afresh: placement gives it stars
// again, by the handoff rule.
package fleet
