package groups

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
)

// Operating groups: which groups there are, how far behind each is, and
// moving or removing an offset by hand. Each is a few metastore reads (and
// Reset a commit), usable from any process, leader or not.

// scanPage is how many offsets one metastore Scan returns.
const scanPage = 1000

// scan calls each for every offset item under prefix, a page at a time.
func (o *Offsets) scan(ctx context.Context, prefix string, each func(metastore.Item) error) error {
	after := ""
	for {
		items, err := o.meta.Scan(ctx, prefix, after, scanPage)
		if err != nil {
			return fmt.Errorf("groups: scan %s: %w", prefix, err)
		}
		for _, it := range items {
			if err := each(it); err != nil {
				return err
			}
		}
		if len(items) < scanPage {
			return nil
		}
		after = items[len(items)-1].Key
	}
}

// Groups returns the name of every group with an offset in the metastore,
// on any stream or incarnation, sorted. It reads every offset key (one
// Scan per 1,000 offsets).
func (o *Offsets) Groups(ctx context.Context) ([]string, error) {
	if ctx == nil {
		return nil, loglet.ErrNilContext
	}
	seen := map[string]bool{}
	err := o.scan(ctx, offsetsPrefix, func(it metastore.Item) error {
		group, _, ok := strings.Cut(strings.TrimPrefix(it.Key, offsetsPrefix), "/")
		if ok {
			seen[group] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(seen))
	for g := range seen {
		out = append(out, g)
	}
	sort.Strings(out)
	return out, nil
}

// List returns every group's offset in the current incarnation of stream,
// sorted by group: those that committed something there (an offset of an
// earlier incarnation is not listed; Delete removes it). It reads the
// stream record and then every offset key (one Scan per 1,000 offsets); a
// stream that does not exist is loglet.ErrStreamNotFound.
func (o *Offsets) List(ctx context.Context, stream string) ([]Offset, error) {
	if ctx == nil {
		return nil, loglet.ErrNilContext
	}
	if err := chain.ValidateStreamName(stream); err != nil {
		return nil, fmt.Errorf("groups: %w", err)
	}
	rec, rv, err := o.record(ctx, stream)
	if err != nil {
		return nil, err
	}
	inc := rec.Incarnation
	if inc == "" {
		inc = noIncarnation
	}
	tail := "/" + chain.StreamKey(stream) + "/" + inc
	var out []Offset
	err = o.scan(ctx, offsetsPrefix, func(it metastore.Item) error {
		rest := strings.TrimPrefix(it.Key, offsetsPrefix)
		group, ok := strings.CutSuffix(rest, tail)
		if !ok || group == "" || strings.Contains(group, "/") {
			return nil
		}
		var v offsetValue
		if err := json.Unmarshal(it.Value, &v); err != nil || v.Nonce == "" {
			return &loglet.CorruptError{Object: it.Key, Err: fmt.Errorf("offset value does not parse: %v", err)}
		}
		out = append(out, Offset{Group: group, Stream: stream, Incarnation: rec.Incarnation, Next: v.Next, Version: it.Version, record: rv})
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out, nil
}

// Reset moves the group's offset prev (as Get, List or Commit returned it)
// to next, forwards or backwards: backwards replays what the group had
// processed, forwards skips records it has not. It is the same
// compare-and-swap as Commit, with the same errors, except that it never
// fails with ErrBackwards. A session of the group already open goes on
// from where it is (it never moves backwards); the next one opened starts
// at next.
func (o *Offsets) Reset(ctx context.Context, prev Offset, next uint64) (Offset, error) {
	return o.commitFrom(ctx, prev, next, true)
}

// TailLog is a Log that reports a stream's tail: a *loglet.Star or a
// *loglet.Reader.
type TailLog interface {
	Log
	CheckTail(ctx context.Context, stream string) (loglet.Tail, error)
}

var (
	_ TailLog = (*loglet.Star)(nil)
	_ TailLog = (*loglet.Reader)(nil)
)

// Lag is how far a group is behind a stream's tail.
type Lag struct {
	// Offset is the group's offset, as read (Committed false: the group
	// has committed nothing on this incarnation).
	Offset Offset
	// Tail is the stream's durable tail as log reported it: the next
	// sequence number (on a Reader, the absorbed tail, which trails the
	// leader's by up to an absorb round).
	Tail uint64
	// TrimSeq is the stream's trim point: records below it are no longer
	// readable, so a group below it skips to it.
	TrimSeq uint64
	// Records is how many readable records the group has not processed:
	// Tail − max(Offset.Next, TrimSeq), or 0. A group with no offset counts
	// from the trim point (where Options.Start's default, the oldest
	// record, starts it).
	Records uint64
	// Bytes estimates the decoded bytes of those records, when
	// LagOptions.Bytes asked for it (else 0): the decoded lengths of the
	// absorbed frame runs that end past max(Offset.Next, TrimSeq), whole
	// runs, so a little more than exact. Records not yet absorbed (on a
	// Star, the last absorb round's worth) are not counted.
	Bytes int64
}

// LagOptions choose what a lag reading costs.
type LagOptions struct {
	// Bytes fills Lag.Bytes: one more metastore Scan per 256 of the
	// stream's refs behind the group furthest behind.
	Bytes bool
}

// Lags returns the lag of every group with an offset on the current
// incarnation of stream (as List), against one reading of the stream's
// tail taken after the offsets were read, sorted by group.
func Lags(ctx context.Context, log TailLog, stream string, opts LagOptions) ([]Lag, error) {
	if ctx == nil {
		return nil, loglet.ErrNilContext
	}
	o := OffsetsOf(log)
	offs, err := o.List(ctx, stream)
	if err != nil {
		return nil, err
	}
	tail, trim, err := o.tailOf(ctx, log, stream, offs)
	if err != nil {
		return nil, err
	}
	out := make([]Lag, len(offs))
	for i, off := range offs {
		out[i] = lagOf(off, tail, trim)
	}
	if opts.Bytes {
		if err := o.fillBytes(ctx, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// LagOf returns group's lag on stream: its offset, then the stream's tail
// read after it.
func LagOf(ctx context.Context, log TailLog, group, stream string, opts LagOptions) (Lag, error) {
	if ctx == nil {
		return Lag{}, loglet.ErrNilContext
	}
	o := OffsetsOf(log)
	off, err := o.Get(ctx, group, stream)
	if err != nil {
		return Lag{}, err
	}
	tail, trim, err := o.tailOf(ctx, log, stream, []Offset{off})
	if err != nil {
		return Lag{}, err
	}
	lag := []Lag{lagOf(off, tail, trim)}
	if opts.Bytes {
		if err := o.fillBytes(ctx, lag); err != nil {
			return Lag{}, err
		}
	}
	return lag[0], nil
}

// fillBytes sets each lag's Bytes from one scan of the stream's refs past
// the lowest point any of them reads from. The lags are of one incarnation.
func (o *Offsets) fillBytes(ctx context.Context, lags []Lag) error {
	if len(lags) == 0 {
		return nil
	}
	type run struct {
		end   uint64
		bytes int64
	}
	from := ^uint64(0)
	for _, l := range lags {
		from = min(from, max(l.Offset.Next, l.TrimSeq))
	}
	id := chain.StreamID(lags[0].Offset.Stream, lags[0].Offset.Incarnation)
	var runs []run
	prefix := chain.RefPrefix(id)
	after := chain.RefKey(id, from) // refs are keyed by their end: those that end past from
	for {
		items, err := o.meta.Scan(ctx, prefix, after, refPage)
		if err != nil {
			return fmt.Errorf("groups: scan the refs of %q: %w", lags[0].Offset.Stream, err)
		}
		for _, it := range items {
			if !chain.IsRefOf(id, it.Key) {
				continue
			}
			ref, err := absorb.DecodeRef(it.Value)
			if err != nil {
				return &loglet.CorruptError{Object: "ref " + it.Key, Err: err}
			}
			for _, e := range ref.Extents {
				if end := e.FirstSeq + uint64(e.Count); end > from {
					runs = append(runs, run{end, int64(e.RawLength)})
				}
			}
		}
		if len(items) < refPage {
			break
		}
		after = items[len(items)-1].Key
	}
	for i := range lags {
		at := max(lags[i].Offset.Next, lags[i].TrimSeq)
		for _, r := range runs {
			if r.end > at {
				lags[i].Bytes += r.bytes
			}
		}
	}
	return nil
}

// refPage is how many refs one metastore Scan returns.
const refPage = 256

// tailOf reads stream's durable tail, then its record's trim point, and
// checks the record is still the incarnation offs were read on.
func (o *Offsets) tailOf(ctx context.Context, log TailLog, stream string, offs []Offset) (tail, trim uint64, err error) {
	t, err := log.CheckTail(ctx, stream)
	if err != nil {
		return 0, 0, err
	}
	rec, _, err := o.record(ctx, stream)
	if err != nil {
		return 0, 0, err
	}
	for _, off := range offs {
		if off.Incarnation != rec.Incarnation {
			return 0, 0, fmt.Errorf("%w: %q was deleted (and created again) while its lag was read", loglet.ErrStreamNotFound, stream)
		}
	}
	return t.Seq - t.Pending, rec.TrimSeq, nil
}

func lagOf(off Offset, tail, trim uint64) Lag {
	l := Lag{Offset: off, Tail: tail, TrimSeq: trim}
	if from := max(off.Next, trim); tail > from {
		l.Records = tail - from
	}
	return l
}
