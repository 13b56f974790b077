package sim

import (
	"fmt"
	"strings"

	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
)

// Fencing tokens in the core simulation (issue 25 item 4): the first
// stream is fenced. A host hands it from writer to writer: now and then it
// appends a fence batch (a producer batch like any, retried with its
// identity) from the token it last saw set to a new one; the writers
// present the token the host last saw set, and some (a writer fenced out)
// an older one. Every record of the stream carries the token its batch
// presented in its body ("t=<token>;"), and a fence's records say the
// token they set ("fence|<token>|"). The checker walks the stream: every
// record presents the token the last fence before it set, so no batch
// with a stale token is committed after a fence's position.

// coreFencing is the host's view of the fenced stream.
type coreFencing struct {
	fences []*coreLogical // the fence batches, in the order issued
	tokens []string       // every token set so far, "" first
}

// fencedStream is the stream the simulation fences.
func (cw *coreWorld) fencedStream() string { return cw.streams[0] }

// currentToken is the token the host last saw set: that of its latest
// fence that was answered (acked, or a duplicate's range).
func (cw *coreWorld) currentToken() string {
	for i := len(cw.fencing.fences) - 1; i >= 0; i-- {
		if lg := cw.fencing.fences[i]; len(lg.answers) > 0 {
			return lg.fencing.Set
		}
	}
	return ""
}

// fencingFor returns the fencing of a new batch of stream at op ops, and
// the prefix of its records' bodies. Decided by the op count, not the
// seed's draws, so every seed's other choices are what they were.
func (cw *coreWorld) fencingFor(stream string) (chaincore.Fencing, string) {
	if stream != cw.fencedStream() {
		return chaincore.Fencing{}, ""
	}
	f := &cw.fencing
	if len(f.tokens) == 0 {
		f.tokens = []string{""}
	}
	cur := cw.currentToken()
	if cw.ops%7 == 0 && cw.fenceSettled() {
		next := fmt.Sprintf("tok-%d", len(f.tokens))
		f.tokens = append(f.tokens, next)
		return chaincore.Fencing{Token: cur, Fence: true, Set: next}, "fence|" + next + "|"
	}
	tok := cur
	if cw.ops%5 == 0 && len(f.tokens) > 1 { // a writer fenced out, or not yet in
		tok = f.tokens[cw.ops/5%len(f.tokens)]
	}
	return chaincore.Fencing{Token: tok}, "t=" + tok + ";"
}

// fenceSettled reports whether the host's latest fence has its answer (or
// was refused, or given up): only then does it hand the stream on again.
func (cw *coreWorld) fenceSettled() bool {
	f := cw.fencing.fences
	if len(f) == 0 {
		return true
	}
	lg := f[len(f)-1]
	return len(lg.answers) > 0 || lg.fenced || lg.window || lg.retries >= coreRetryLimit
}

// noteFence remembers a new fence batch.
func (cw *coreWorld) noteFence(lg *coreLogical) {
	if lg.fencing.Fence {
		cw.fencing.fences = append(cw.fencing.fences, lg)
		cw.res.Fences++
	}
}

// checkFencing checks the fenced stream walked from the bare buckets: each
// record presents the token set by the last fence before it.
func (cw *coreWorld) checkFencing(walked map[string][]envelope.Record) {
	token, at := "", -1
	for seq, r := range walked[cw.fencedStream()] {
		body := string(r.Body)
		if rest, ok := strings.CutPrefix(body, "fence|"); ok {
			token, _, _ = strings.Cut(rest, "|") // each record of a fence batch names its token
			at = seq
			continue
		}
		rest, ok := strings.CutPrefix(body, "t=")
		tok, _, _ := strings.Cut(rest, ";")
		if !ok {
			cw.violation("fenced stream %s: seq %d carries no token: %q", cw.fencedStream(), seq, trunc(r.Body))
			continue
		}
		if tok != token {
			cw.violation("fenced stream %s: seq %d was appended with token %q, but the fence at %d set %q: a stale token committed after the fence", cw.fencedStream(), seq, tok, at, token)
		}
	}
}
