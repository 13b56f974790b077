// Package fleethttp is a reference transport for a fleet of flightlog
// members (package fleet): an http.Handler every member serves, and a
// Client, for CreateStream, Append, Read, CheckTail and read sessions
// (long polls).
//
// Any member accepts a request. If it leads the stream's star it serves
// it; otherwise it forwards the request, once, to the member the router
// names as the star's leader, with the star and the epoch it routed on
// (HopHeader, StarHeader, EpochHeader). The target serves a forwarded
// request only if it holds that star at that epoch or a later one, and
// never forwards it again: it answers 421 (Misdirected Request) instead,
// and the member that forwarded re-resolves, waiting for the routing
// table to change (Fleet.Changed), up to Config.Attempts times. A
// *loglet.NotLeaderError on the leader (a move under way) is retried the
// same way. A request still unrouted after the attempts is answered 503
// with Retry-After.
//
// # The wire
//
//	PUT  /v1/streams/{name}        create: ?class=standard|express&star=S&max_age=D&max_bytes=B; 201 with the stream
//	POST /v1/streams/{name}        append; 200 with an Ack
//	GET  /v1/streams/{name}        read: ?from=N&max=M&max_bytes=B&wait=D&format=json|text
//	GET  /v1/streams/{name}/tail   CheckTail
//
// An append's body is a JSON batch (Content-Type: application/json:
// records with base64 bodies and headers, match_seq_num, producer_id and
// producer_seq, fencing_token) or, for any other content type, text: one
// record per line, with the batch's options in the query
// (?match_seq_num=&producer_id=&producer_seq=&fencing_token=), so that
//
//	curl --data-binary $'hello\nworld' http://member:8080/v1/streams/greetings
//
// appends two records, creating the stream (Standard) if the star's
// loglet.Config.CreateOnAppend says so. A create places a stream of
// either class, with a retention, and on a star of its choosing (it is
// served by that star's leader):
//
//	curl -X PUT 'http://member:8080/v1/streams/orders?class=express&max_age=24h'
//
// A read answers JSON (bodies and headers in
// base64), or with format=text the bodies alone, one a line, with the next
// seq and the tail in NextHeader and TailHeader. A read with wait=D (a Go duration) that finds
// nothing at from waits up to D for the next record (a read session on
// the leader, woken by each release): a Client's ReadSession is a loop of
// them. Every response names the member that served it (ServedByHeader).
//
// # Errors
//
// Each failure has a status and a code in a JSON body
// ({"error","code",...}); Client turns them back into the facade's errors,
// so errors.Is(err, loglet.ErrNotCommitted), errors.As(err,
// &*loglet.FencedError) and the rest work across the wire:
//
//	400 invalid          bad stream name, batch, parameter or star, or a class the star has not (loglet.ErrInvalidBatch, loglet.ErrInvalidStreamName, loglet.ErrClassDisabled)
//	404 not_found        loglet.ErrStreamNotFound
//	409 exists           loglet.ErrStreamExists (a create)
//	409 fenced           *loglet.FencedError
//	410 trimmed          loglet.ErrHistoryTrimmed
//	412 seq_mismatch     *loglet.SeqNumMismatchError (with the tail)
//	413 too_large        a body over Config.MaxBodyBytes (not committed)
//	421 misdirected      a forwarded request the target does not lead (between members only)
//	503 not_leader       no member led the star after Config.Attempts (*loglet.NotLeaderError, Retry-After)
//	503 not_committed    any other definite failure (loglet.ErrNotCommitted): safe to retry
//	504 outcome_unknown  loglet.ErrOutcomeUnknown (and *loglet.ProducerWindowError): retry with the same producer id and seq (a create: retry, ErrStreamExists may answer)
//	500 internal         anything else (loglet.ErrCorrupt among them)
package fleethttp
