package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/loglet"
)

// appendCmd: flightlog append STREAM.
func appendCmd(fs *flag.FlagSet, _ *globalOpts) func(context.Context, *cmdEnv, []string) int {
	class := fs.String("class", "standard", "class of a stream created by --create: standard or express")
	create := fs.Bool("create", false, "create the stream if it does not exist")
	lp := fs.Bool("length-prefixed", false, "stdin holds records as a 4-byte big-endian length and that many bytes (default: one record per line)")
	batch := fs.Int("batch", 100, "records per batch (each batch is one append, all or nothing)")
	lf := &leadFlags{}
	lf.register(fs)
	override := fs.String("fence-override", "strict", "DANGEROUS, for a takeover blocked at a slot no fence can decide (Open logs \"fence blocked\" at WARN, naming the slot): accept-readable takes a slot with one readable flight copy as committed (buckets lost for good); discard-unreadable also takes a slot with no readable copy as dead, LOSING its records and every later slot's of that epoch, acked or not. Run fsck first")
	return func(ctx context.Context, env *cmdEnv, args []string) int {
		stream := args[0]
		fo, err := loglet.ParseFenceOverride(*override)
		if err != nil {
			return env.fail(err)
		}
		if fo != loglet.FenceStrict {
			env.errorf("WARNING: --fence-override=%s: a takeover may decide undecidable slots by the override, not by the rule; with discard-unreadable, acked records of a damaged slot and of every later slot of its epoch are lost", fo)
		}
		c, err := chain.ParseClass(*class)
		if err != nil {
			return env.fail(err)
		}
		if *batch < 1 {
			return env.fail(fmt.Errorf("--batch %d: want at least 1", *batch))
		}
		b, err := env.g.open(ctx, false)
		if err != nil {
			return env.fail(err)
		}
		defer b.Close()
		star, code := lf.lead(ctx, env, b, func(cfg *loglet.Config) {
			cfg.Standard.FenceOverride, cfg.Express.FenceOverride = fo, fo
		})
		if star == nil {
			return code
		}
		closed := false
		defer func() {
			if !closed {
				star.Close(context.Background())
			}
		}()
		if *create {
			_, err := star.CreateStream(ctx, stream, loglet.StreamOptions{Class: c, Star: env.g.Star})
			if err != nil && !errors.Is(err, loglet.ErrStreamExists) {
				return env.fail(err)
			}
		}
		sess, err := star.OpenAppendSession(ctx, stream)
		if err != nil {
			return env.failStream(err)
		}
		next := lineRecords(env.stdin)
		if *lp {
			next = lengthPrefixedRecords(env.stdin)
		}
		var (
			futures    []*loglet.AckFuture
			recs       []loglet.Record
			first, end uint64
			n          int
			readErr    error
		)
		submit := func() error {
			if len(recs) == 0 {
				return nil
			}
			f, err := sess.Submit(ctx, loglet.Batch{Records: recs})
			if err != nil {
				return err
			}
			futures = append(futures, f)
			recs = nil
			return nil
		}
		for {
			body, err := next()
			if err == io.EOF {
				break
			}
			if err != nil {
				readErr = err
				break
			}
			recs = append(recs, loglet.Record{Body: body})
			n++
			if len(recs) == *batch {
				if err := submit(); err != nil {
					return env.failAppend(err, n-len(recs))
				}
			}
		}
		if err := submit(); err != nil {
			return env.failAppend(err, n-len(recs))
		}
		for i, f := range futures {
			ack, err := f.Wait(ctx)
			if err != nil {
				return env.failAppend(err, -1)
			}
			if i == 0 {
				first = ack.Start
			}
			end = ack.End
		}
		if err := sess.Close(ctx); err != nil {
			return env.failAppend(err, -1)
		}
		closed = true
		if err := star.Close(ctx); err != nil {
			// Every record above was acked (durable); what failed is the
			// handoff (the absorb or the clean seal): the next owner fences
			// and walks instead.
			env.errorf("closing the star: %v (every appended record is durable; the next owner takes the chain over)", err)
		}
		if readErr != nil {
			env.errorf("reading stdin: %v (the %s before it were appended)", readErr, plural(n, "record"))
			return exitProblems
		}
		if n == 0 {
			fmt.Fprintf(env.stdout, "%s: no records on stdin\n", stream)
			return exitOK
		}
		fmt.Fprintf(env.stdout, "%s: appended %s, seq [%d, %d)\n", stream, plural(n, "record"), first, end)
		return exitOK
	}
}

// failAppend reports a failed append and which of the three outcomes it is.
func (e *cmdEnv) failAppend(err error, submitted int) int {
	switch {
	case errors.Is(err, loglet.ErrOutcomeUnknown):
		e.errorf("append: outcome unknown (the batch may or may not be durable; read the stream to find out): %v", err)
	case errors.Is(err, loglet.ErrNotCommitted):
		e.errorf("append: not committed (safe to retry): %v", err)
	default:
		e.errorf("append: %v", err)
	}
	return exitProblems
}

func lineRecords(r io.Reader) func() ([]byte, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	return func() ([]byte, error) {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			line = line[:len(line)-1]
			if len(line) > 0 && line[len(line)-1] == '\r' {
				line = line[:len(line)-1]
			}
			return line, nil
		}
		if err == io.EOF && len(line) > 0 {
			return line, nil // a last line without a newline
		}
		return nil, err
	}
}

func lengthPrefixedRecords(r io.Reader) func() ([]byte, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	return func() ([]byte, error) {
		var hdr [4]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if err == io.ErrUnexpectedEOF {
				return nil, errors.New("truncated length prefix")
			}
			return nil, err
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > 64<<20 {
			return nil, fmt.Errorf("record length %d is implausible", n)
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(br, body); err != nil {
			return nil, fmt.Errorf("record of %d bytes truncated: %w", n, err)
		}
		return body, nil
	}
}

// readFlags are the start and format flags of read and tail.
type readFlags struct {
	from, tailOffset uint64
	fromTS           int64
	set              map[string]bool
	format           string
}

func (r *readFlags) register(fs *flag.FlagSet) {
	fs.Uint64Var(&r.from, "from", 0, "start at this sequence number")
	fs.Int64Var(&r.fromTS, "from-ts", 0, "start at the first record whose timestamp (ms since the Unix epoch) is >= this")
	fs.Uint64Var(&r.tailOffset, "tail-offset", 0, "start this many records before the tail")
	fs.StringVar(&r.format, "format", "body", "output: body (one record body per line), tsv (seq, timestamp, body), json (one object per line)")
}

// position returns the start the flags ask for, def if none was given.
func (r *readFlags) position(fs *flag.FlagSet, def loglet.Position) (loglet.Position, error) {
	r.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { r.set[f.Name] = true })
	n := 0
	pos := def
	if r.set["from"] {
		n, pos = n+1, loglet.AtSeq(r.from)
	}
	if r.set["from-ts"] {
		n, pos = n+1, loglet.AtTimestamp(r.fromTS)
	}
	if r.set["tail-offset"] {
		n, pos = n+1, loglet.TailOffset(r.tailOffset)
	}
	if n > 1 {
		return pos, errors.New("give at most one of --from, --from-ts, --tail-offset")
	}
	switch r.format {
	case "body", "tsv", "json":
	default:
		return pos, fmt.Errorf("--format %q: want body, tsv or json", r.format)
	}
	return pos, nil
}

// readFormatHelp documents --format json's rule.
const readFormatHelp = `--format json prints one object per record, losslessly:
  {"seq":N,"ts":MS,"headers":[{"name":...,"value":...},...],"body":...}
Headers keep their order and duplicates. Each byte string (body, a header's
name or value) is a JSON string when it is valid UTF-8 and otherwise is given,
instead, base64-encoded (standard, padded) under the same key with "_base64"
appended: "body_base64", "name_base64", "value_base64". Exactly one of the two
keys is present; an empty body is "body":"". --format body and tsv write the
bytes raw (a body holding a newline or a tab spans lines or columns there).`

// jsonRecord is one line of --format json (readFormatHelp has the rule).
type jsonRecord struct {
	Seq       uint64
	Timestamp int64
	Headers   []loglet.Header
	Body      []byte
}

func (r jsonRecord) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"seq":%d,"ts":%d`, r.Seq, r.Timestamp)
	if len(r.Headers) > 0 {
		b.WriteString(`,"headers":[`)
		for i, h := range r.Headers {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('{')
			writeBytesField(&b, "name", h.Name)
			b.WriteByte(',')
			writeBytesField(&b, "value", h.Value)
			b.WriteByte('}')
		}
		b.WriteByte(']')
	}
	b.WriteByte(',')
	writeBytesField(&b, "body", r.Body)
	b.WriteByte('}')
	return b.Bytes(), nil
}

// writeBytesField writes "key":"p" when p is valid UTF-8 (json.Marshal's
// escaping is exact for it) and "key_base64":"..." otherwise (json.Marshal
// would replace each invalid byte by U+FFFD).
func writeBytesField(b *bytes.Buffer, key string, p []byte) {
	v := string(p)
	if !utf8.Valid(p) {
		key, v = key+"_base64", base64.StdEncoding.EncodeToString(p)
	}
	k, _ := json.Marshal(key)
	vj, _ := json.Marshal(v)
	b.Write(k)
	b.WriteByte(':')
	b.Write(vj)
}

// UnmarshalJSON reads what MarshalJSON writes (for tests, and the rule a
// consumer follows).
func (r *jsonRecord) UnmarshalJSON(data []byte) error {
	var raw struct {
		Seq       uint64                       `json:"seq"`
		Timestamp int64                        `json:"ts"`
		Headers   []map[string]json.RawMessage `json:"headers"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return err
	}
	body, err := readBytesField(top, "body")
	if err != nil {
		return err
	}
	*r = jsonRecord{Seq: raw.Seq, Timestamp: raw.Timestamp, Body: body}
	for _, h := range raw.Headers {
		name, err := readBytesField(h, "name")
		if err != nil {
			return err
		}
		value, err := readBytesField(h, "value")
		if err != nil {
			return err
		}
		r.Headers = append(r.Headers, loglet.Header{Name: name, Value: value})
	}
	return nil
}

func readBytesField(m map[string]json.RawMessage, key string) ([]byte, error) {
	plain, isPlain := m[key]
	coded, isCoded := m[key+"_base64"]
	var s string
	switch {
	case isPlain && isCoded:
		return nil, fmt.Errorf("both %q and %q", key, key+"_base64")
	case isCoded:
		if err := json.Unmarshal(coded, &s); err != nil {
			return nil, err
		}
		return base64.StdEncoding.DecodeString(s)
	case isPlain:
		if err := json.Unmarshal(plain, &s); err != nil {
			return nil, err
		}
		return []byte(s), nil
	}
	return nil, fmt.Errorf("no %q", key)
}

func (r *readFlags) print(w *bufio.Writer, recs []loglet.SequencedRecord) {
	for _, rec := range recs {
		switch r.format {
		case "tsv":
			fmt.Fprintf(w, "%d\t%d\t%s\n", rec.Seq, rec.Timestamp, rec.Body)
		case "json":
			b, _ := jsonRecord{rec.Seq, rec.Timestamp, rec.Headers, rec.Body}.MarshalJSON()
			w.Write(append(b, '\n'))
		default:
			w.Write(rec.Body)
			w.WriteByte('\n')
		}
	}
}

// readCmd: flightlog read STREAM. It reads absorbed history with a
// Reader, which leads nothing: after a leader's clean Close everything is
// absorbed.
func readCmd(fs *flag.FlagSet, _ *globalOpts) func(context.Context, *cmdEnv, []string) int {
	rf := &readFlags{}
	rf.register(fs)
	max := fs.Int("max", 0, "print at most this many records (0: up to the tail)")
	return func(ctx context.Context, env *cmdEnv, args []string) int {
		pos, err := rf.position(fs, loglet.AtSeq(0))
		if err != nil {
			return env.fail(err)
		}
		b, err := env.g.open(ctx, true)
		if err != nil {
			return env.fail(err)
		}
		defer b.Close()
		r, err := b.reader(time.Second)
		if err != nil {
			return env.fail(err)
		}
		if _, err := r.CheckTail(ctx, args[0]); err != nil {
			return env.failStream(err)
		}
		w := bufio.NewWriter(env.stdout)
		defer w.Flush()
		left := *max
		q := loglet.ReadQuery{Start: pos}
		for {
			if left > 0 {
				q.MaxRecords = min(left, 1000)
			}
			res, err := r.Read(ctx, args[0], q)
			if err != nil && !(errors.Is(err, loglet.ErrHistoryTrimmed) && len(res.Records) == 0 && q.Start != pos) {
				w.Flush()
				env.errorf("read %s: %v", args[0], err)
				return exitProblems
			}
			if len(res.Records) == 0 {
				return exitOK
			}
			rf.print(w, res.Records)
			if left > 0 {
				if left -= len(res.Records); left <= 0 {
					return exitOK
				}
			}
			q.Start = loglet.AtSeq(res.Next)
		}
	}
}

// tailCmd: flightlog tail STREAM. It follows with a Reader's read session,
// which polls the metastore for new refs.
func tailCmd(fs *flag.FlagSet, _ *globalOpts) func(context.Context, *cmdEnv, []string) int {
	rf := &readFlags{}
	rf.register(fs)
	poll := fs.Duration("poll", 250*time.Millisecond, "how often to poll for newly absorbed records")
	return func(ctx context.Context, env *cmdEnv, args []string) int {
		pos, err := rf.position(fs, loglet.TailOffset(0))
		if err != nil {
			return env.fail(err)
		}
		b, err := env.g.open(ctx, true)
		if err != nil {
			return env.fail(err)
		}
		defer b.Close()
		r, err := b.reader(*poll)
		if err != nil {
			return env.fail(err)
		}
		if _, err := r.CheckTail(ctx, args[0]); err != nil {
			return env.failStream(err)
		}
		sess, err := r.OpenReadSession(ctx, args[0], loglet.ReadQuery{Start: pos})
		if err != nil {
			return env.failStream(err)
		}
		w := bufio.NewWriter(env.stdout)
		defer w.Flush()
		for {
			recs, err := sess.Recv(ctx)
			if ctx.Err() != nil {
				return exitOK // Ctrl-C
			}
			if err != nil {
				w.Flush()
				env.errorf("tail %s: %v", args[0], err)
				return exitProblems
			}
			rf.print(w, recs)
			w.Flush()
		}
	}
}
