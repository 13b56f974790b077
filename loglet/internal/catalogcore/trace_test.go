package catalogcore

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestTraces runs the data-driven scripts in testdata. Each command starts
// an operation or answers the pending request of one, and its expected
// output is what the operation then does: the requests the harness answers
// itself from its model of the shell's in-process state (the cache, the
// chain cores' retired incarnations and admissions, logging), shown as
// "request => result", then the request left for the script to answer, or
// the outcome. Rewrite the expected output after a deliberate change with
//
//	go test ./loglet/internal/catalogcore -run TestTraces -rewrite
//
// Commands (arguments key=value):
//
//	star NAME                          (the star this process leads; default s1)
//	lookup NAME [create] [as=OP]       create NAME [as=OP]   delete NAME [as=OP]
//	finish NAME inc= marker= [as=OP]   trim NAME inc= seq= [as=OP]
//	commit-offset NAME group= inc= next= [prev=] [v=] rv= [as=OP]
//	configure NAME [inc=] [read] [as=OP]  (read: only read the record)
//	admit NAME [n=]                    (an append admitted by the chain core, or refused)
//	cache                              (what the cache serves; what is retired)
//	OP RESULT ...                      (answers OP's pending request; OP defaults to
//	                                    the operation's name), RESULT one of:
//	  record inc= [star=] [trim=] [v=] [nonce=] | not-found | read-failed | corrupt
//	  minted inc= [nonce=]
//	  commit-ok [marker=] | commit-conflict | commit-failed
//	  awaited [err] | drained | not-drained | marker v= | marker-failed
//	  reclaimed | reclaim-failed | marker-deleted | marker-gone | marker-conflict | marker-failed
//	  put-ok | put-conflict | put-failed
//	  config-ok [v=] | config-conflict | config-failed
//	  offset-ok v= nonce= | offset-conflict nonce= | offset-failed nonce=
//	  offset [next= nonce= v=] | offset-none | offset-read-failed | offset-corrupt
func TestTraces(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := &harness{t: t, star: "s1", ops: map[string]Op{}, cache: map[string]Record{}, retired: map[string]bool{}, admitted: map[string]uint64{}}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out, err := h.run(d)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			return out
		})
	})
}

type harness struct {
	t    *testing.T
	star string
	ops  map[string]Op
	// The shell's in-process state.
	cache    map[string]Record // name → the incarnation served
	retired  map[string]bool   // stream ID → retired by a delete
	admitted map[string]uint64 // stream ID → the tail admission reached
	drops    int               // cache entries dropped (a forget, a retire)
}

// token is the cache's token for name: the incarnation it holds, or the
// count of entries dropped (a miss is stale once a drop happened).
func (h *harness) token(name string) string {
	if rec, ok := h.cache[name]; ok {
		return rec.ID()
	}
	return fmt.Sprintf("#%d", h.drops)
}

func (h *harness) run(d *datadriven.TestData) (string, error) {
	arg := func(k, def string) string {
		for _, a := range d.CmdArgs {
			if a.Key == k {
				if len(a.Vals) == 0 {
					return "true"
				}
				return a.Vals[0]
			}
		}
		return def
	}
	num := func(k string) uint64 {
		v, err := strconv.ParseUint(arg(k, "0"), 10, 64)
		if err != nil {
			d.Fatalf(h.t, "%s: %v", k, err)
		}
		return v
	}
	first := ""
	if len(d.CmdArgs) > 0 {
		first = d.CmdArgs[0].Key
	}
	start := func(o Op) (string, error) {
		name := arg("as", first)
		if prev, ok := h.ops[name]; ok && prev.Next() != nil {
			return "", fmt.Errorf("operation %s still runs", name)
		}
		h.ops[name] = o
		return h.settle(name, o)
	}
	switch d.Cmd {
	case "star":
		h.star = first
		return "", nil
	case "lookup":
		return start(NewLookup(first, h.star, arg("create", "") != ""))
	case "create":
		return start(NewCreate(first, h.star))
	case "delete":
		return start(NewDelete(first))
	case "finish":
		return start(NewFinishDelete(Record{Name: first, Incarnation: arg("inc", ""), Star: h.star}, Version(arg("marker", ""))))
	case "trim":
		return start(NewTrim(first, arg("inc", ""), num("seq")))
	case "configure":
		return start(NewConfigure(first, arg("inc", ""), arg("read", "") == ""))
	case "commit-offset":
		prev := Offset{Group: arg("group", "g"), Stream: first, Incarnation: arg("inc", ""), Next: num("prev"), Version: Version(arg("v", "")), RecordVersion: Version(arg("rv", ""))}
		return start(NewCommitOffset(prev, num("next")))
	case "admit":
		rec, ok := h.cache[first]
		switch {
		case !ok:
			return "refused: not in the cache\n", nil
		case h.retired[rec.ID()]:
			// The chain core refuses a retired incarnation (Core.Retire).
			return "refused: " + rec.ID() + " retired\n", nil
		}
		n := max(num("n"), 1)
		from := h.admitted[rec.ID()]
		h.admitted[rec.ID()] = from + n
		return fmt.Sprintf("admitted %s [%d,%d)\n", rec.ID(), from, from+n), nil
	case "cache":
		var b strings.Builder
		for _, name := range sortedKeys(h.cache) {
			fmt.Fprintf(&b, "serves %s\n", h.cache[name].ID())
		}
		for _, id := range sortedKeys(h.retired) {
			fmt.Fprintf(&b, "retired %s\n", id)
		}
		return b.String(), nil
	}
	// A result for an operation's pending request.
	name := d.Cmd
	o, ok := h.ops[name]
	if !ok {
		return "", fmt.Errorf("unknown command or operation %q", name)
	}
	res, err := h.result(first, arg, num, o)
	if err != nil {
		return "", err
	}
	if err := o.Step(res); err != nil {
		return "", err
	}
	return h.settle(name, o)
}

func (h *harness) result(kind string, arg func(string, string) string, num func(string) uint64, o Op) (Result, error) {
	failed := errors.New("metastore unavailable")
	conflict := errors.New("metastore: version conflict")
	switch kind {
	case "record":
		name := ""
		if r, ok := o.Next().(ReadRecord); ok {
			name = r.Name
		}
		return RecordRead{Record: Record{Name: name, Incarnation: arg("inc", ""), Star: arg("star", h.star), TrimSeq: num("trim"),
			Version: Version(arg("v", "v1")), Nonce: arg("nonce", "")}}, nil
	case "not-found":
		return RecordRead{NotFound: true, Err: errors.New("metastore: not found")}, nil
	case "read-failed":
		return RecordRead{Err: failed}, nil
	case "corrupt":
		return RecordRead{Corrupt: true, Record: Record{Version: Version(arg("v", "v1"))}, Err: errors.New("stream record is corrupt")}, nil
	case "minted":
		return Minted{Record: Record{Name: o.Next().(MintRecord).Name, Incarnation: arg("inc", ""), Nonce: arg("nonce", "n-"+arg("inc", "")), Star: arg("star", h.star)}}, nil
	case "commit-ok":
		return CommitDone{MarkerVersion: Version(arg("marker", ""))}, nil
	case "commit-conflict":
		return CommitDone{Err: conflict, Conflict: true}, nil
	case "commit-failed":
		return CommitDone{Err: failed}, nil
	case "awaited":
		if arg("err", "") != "" {
			return Awaited{Err: errors.New("context deadline exceeded")}, nil
		}
		return Awaited{}, nil
	case "drained", "not-drained":
		return DrainChecked{Drained: kind == "drained"}, nil
	case "marker":
		return MarkerRead{Version: Version(arg("v", "m1"))}, nil
	case "marker-read-failed":
		return MarkerRead{Err: failed}, nil
	case "reclaimed":
		return Reclaimed{}, nil
	case "reclaim-failed":
		return Reclaimed{Err: errors.New("delete ref: bucket unreachable")}, nil
	case "marker-deleted":
		return MarkerDeleted{}, nil
	case "marker-gone":
		return MarkerDeleted{Err: errors.New("metastore: not found"), NotFound: true}, nil
	case "marker-conflict":
		return MarkerDeleted{Err: conflict, Conflict: true}, nil
	case "marker-failed":
		return MarkerDeleted{Err: failed}, nil
	case "put-ok":
		return TrimPut{}, nil
	case "put-conflict":
		return TrimPut{Err: conflict, Conflict: true}, nil
	case "put-failed":
		return TrimPut{Err: failed}, nil
	case "config-ok":
		return ConfigPut{Version: Version(arg("v", "v2"))}, nil
	case "config-conflict":
		return ConfigPut{Err: conflict, Conflict: true}, nil
	case "config-failed":
		return ConfigPut{Err: failed}, nil
	case "offset-ok":
		return OffsetCommitted{Version: Version(arg("v", "")), Nonce: arg("nonce", "")}, nil
	case "offset-conflict":
		return OffsetCommitted{Nonce: arg("nonce", ""), Err: conflict, Conflict: true}, nil
	case "offset-failed":
		return OffsetCommitted{Nonce: arg("nonce", ""), Err: failed}, nil
	case "offset":
		return OffsetRead{Found: true, Next: num("next"), Nonce: arg("nonce", ""), Version: Version(arg("v", ""))}, nil
	case "offset-none":
		return OffsetRead{}, nil
	case "offset-read-failed":
		return OffsetRead{Err: failed}, nil
	case "offset-corrupt":
		return OffsetRead{Found: true, Corrupt: true, Version: Version(arg("v", ""))}, nil
	}
	return nil, fmt.Errorf("unknown result %q", kind)
}

// settle answers the requests the shell answers from its own state, and
// prints them, then the request left for the script or the outcome.
func (h *harness) settle(name string, o Op) (string, error) {
	var b strings.Builder
	for {
		req := o.Next()
		if req == nil {
			fmt.Fprintf(&b, "%s: => %s\n", name, o.Outcome())
			return b.String(), nil
		}
		res := h.local(req)
		if res == nil {
			fmt.Fprintf(&b, "%s: %s\n", name, req)
			return b.String(), nil
		}
		fmt.Fprintf(&b, "%s: %s => %s\n", name, req, res)
		if err := o.Step(res); err != nil {
			return "", err
		}
	}
}

// local answers a request from the model of the shell's in-process state
// (nil: the script answers it).
func (h *harness) local(req Request) Result {
	switch r := req.(type) {
	case LookupCache:
		rec, ok := h.cache[r.Name]
		return CacheLooked{Hit: ok, Record: rec, Token: h.token(r.Name)}
	case CacheRecord:
		if h.retired[r.Record.ID()] {
			return Cached{Retired: true}
		}
		cur, ok := h.cache[r.Record.Name]
		switch {
		case ok && cur.ID() == r.Record.ID():
		case r.Expect != "" && r.Expect != h.token(r.Record.Name):
			return Cached{Other: h.token(r.Record.Name)}
		default:
			h.cache[r.Record.Name] = r.Record
		}
		return Cached{}
	case ForgetName:
		if _, ok := h.cache[r.Name]; ok {
			delete(h.cache, r.Name)
			h.drops++
		}
		return Done{}
	case Retire:
		if cur, ok := h.cache[r.Record.Name]; ok && cur.ID() == r.Record.ID() {
			delete(h.cache, r.Record.Name)
			h.drops++
		}
		if r.Record.Star != h.star {
			return Retired{}
		}
		h.retired[r.Record.ID()] = true
		return Retired{Served: true, Admitted: h.admitted[r.Record.ID()]}
	case FinishDeletesOf, Warn:
		return Done{}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
