// Package groups runs consumer groups over a flightlog star: a group's
// durable read position per stream (its offset), sessions that start from
// it and commit as the consumer acknowledges, and what an operator needs to
// run them: which groups exist, how far each is behind, moving or removing
// an offset by hand.
//
// It lives beside package loglet because only services that consume as a
// group need it, and it needs nothing of loglet's internals: a Log is a
// *loglet.Star or a *loglet.Reader (Metastore and OpenReadSession), and a
// read session says which incarnation of the stream it reads
// (loglet.ReadSession.Incarnation).
//
//	g, err := groups.Open(ctx, star, "billing", "orders", groups.Options{})
//	defer g.Close()
//	for {
//		recs, err := g.Recv(ctx) // from the group's offset, then the tail
//		...
//		err = g.Ack(ctx, recs[len(recs)-1].Seq) // commits everything up to it
//	}
//
// Delivery is at least once (see Session). Lags reports, per group, the
// records (and, if asked, bytes) behind the stream's durable tail;
// Offsets.Groups, List, Reset and Delete are the operator's tools, and
// `flightlog groups` runs them.
//
// # Offsets
//
// A consumer group's durable read position in a stream is kept in the
// metastore at
//
//	offsets/<group>/<stream-key>/<incarnation>
//
// (<stream-key> is chain.StreamKey of the name; <incarnation> is the
// stream's, or "-" for a stream created before incarnations existed). An
// offset belongs to one incarnation of a stream: a stream deleted and
// created again starts every group afresh, and a commit against the old
// incarnation fails (loglet.ErrStreamNotFound) instead of moving the new one.
//
// Every commit is a compare-and-swap on the offset's metastore version, in
// the same metastore Commit that checks the stream is still the incarnation
// the offset belongs to: it expects the stream record's version, as last
// read with that incarnation. A Trim or a retention pass rewrites the record
// (its trim point) without changing the incarnation; a commit that finds the
// record moved re-reads it and, if the incarnation is the same, commits again
// expecting the version it read (loglet.ErrStreamNotFound if not). So a commit that
// races another committer is seen (*ConflictError, with the offset
// that won), and so is one that would go backwards (ErrBackwards):
// nothing is written in either case; a trim is not a conflict.
package groups
