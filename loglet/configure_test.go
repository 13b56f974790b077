package loglet

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/metastore"
)

// recordOf reads name's stream record.
func recordOf(t *testing.T, meta metastore.Store, name string) (streamRecord, metastore.Version) {
	t.Helper()
	it, err := meta.Get(context.Background(), chain.StreamRecordKey(name))
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := decodeStreamRecord(it)
	if err != nil {
		t.Fatal(err)
	}
	return rec, it.Version
}

// TestConfigureRetentionAtNextPass: retention turned on after creation, by
// a process that leads nothing (a Reader, as the CLI's config) and by a
// Star leading another star, applies at the leader's next retention pass;
// turned off by the leader itself, the pass after leaves the stream alone;
// ListStreams shows the options the record holds.
func TestConfigureRetentionAtNextPass(t *testing.T) {
	synctest.Test(t, testConfigureRetentionAtNextPass)
}

func testConfigureRetentionAtNextPass(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	noLoop := func(c *Config) { c.RetentionInterval = -1 } // the test runs the passes
	p, err := w.open("a", noLoop)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := p.star.CreateStream(ctx, "s", StreamOptions{Class: Standard, Star: "s1"}); err != nil {
		t.Fatal(err)
	}
	// seq i is stamped now − (10−i)·20min: seqs 7, 8, 9 are within the hour.
	stamp := func(seq int) int64 { return now.Add(-time.Duration(10-seq) * 20 * time.Minute).UnixMilli() }
	appendN(t, p.star, "s", 10, 1, stamp)
	waitAbsorbed(t, p.star)
	p.star.runRetention(ctx, now)
	if got := trimSeqOf(t, w.meta, "s"); got != 0 {
		t.Fatalf("a stream without retention was trimmed to %d", got)
	}

	// Another process, leading nothing, turns retention by age on.
	rd, err := NewReader(ReaderConfig{Meta: w.meta})
	if err != nil {
		t.Fatal(err)
	}
	hour := time.Hour
	info, err := rd.ConfigureStream(ctx, "s", StreamUpdate{RetentionMaxAge: &hour})
	if err != nil {
		t.Fatal(err)
	}
	if info.Retention != (Retention{MaxAge: time.Hour}) || info.Star != "s1" || info.Class != Standard {
		t.Fatalf("ConfigureStream returned %+v, want retention of an hour", info)
	}
	if got := trimSeqOf(t, w.meta, "s"); got != 0 {
		t.Fatalf("the configure itself trimmed to %d", got)
	}
	p.star.runRetention(ctx, now)
	if got := trimSeqOf(t, w.meta, "s"); got != 7 {
		t.Fatalf("the leader's next pass trimmed to %d, want 7 (by the new age)", got)
	}

	// The leader turns it off: an hour later, nothing more is trimmed.
	zero := time.Duration(0)
	if _, err := p.star.ConfigureStream(ctx, "s", StreamUpdate{RetentionMaxAge: &zero}); err != nil {
		t.Fatal(err)
	}
	p.star.runRetention(ctx, now.Add(time.Hour))
	if got := trimSeqOf(t, w.meta, "s"); got != 7 {
		t.Fatalf("after retention was turned off, the pass trimmed to %d, want 7", got)
	}

	// A Star leading another star turns retention by bytes on, to a byte:
	// the pass trims every frame run but the last (retention by bytes
	// trims whole runs and never keeps less than asked).
	appendN(t, p.star, "s", 5, 1, func(int) int64 { return now.UnixMilli() })
	waitAbsorbed(t, p.star)
	q, err := w.open("b", func(c *Config) { c.Star, c.RetentionInterval = "s2", -1 })
	if err != nil {
		t.Fatal(err)
	}
	n := int64(1)
	if _, err := q.star.ConfigureStream(ctx, "s", StreamUpdate{RetentionMaxBytes: &n}); err != nil {
		t.Fatal(err)
	}
	p.star.runRetention(ctx, now)
	if got := trimSeqOf(t, w.meta, "s"); got <= 7 || got >= 15 {
		t.Fatalf("the leader's next pass after a configure from a star's other leader trimmed to %d, want past 7 and short of the tail 15", got)
	}
	list, err := p.star.ListStreams(ctx, ListOptions{Prefix: "s"})
	if err != nil || len(list) != 1 || list[0].Retention != (Retention{MaxBytes: 1}) {
		t.Fatalf("ListStreams after the configures: %+v %v, want retention of 1 byte", list, err)
	}
}

// TestConfigureWithoutChangeReads: a StreamUpdate that sets nothing writes
// nothing and returns the stream's options; a set field leaves the others
// as they were.
func TestConfigureWithoutChangeReads(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	p, err := w.open("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.star.CreateStream(ctx, "s", StreamOptions{Class: Standard, Star: "s1", Retention: Retention{MaxAge: time.Minute, MaxBytes: 100}}); err != nil {
		t.Fatal(err)
	}
	_, v := recordOf(t, w.meta, "s")
	info, err := p.star.ConfigureStream(ctx, "s", StreamUpdate{})
	if err != nil || info.Retention != (Retention{MaxAge: time.Minute, MaxBytes: 100}) {
		t.Fatalf("an empty update: %+v %v", info, err)
	}
	if _, v2 := recordOf(t, w.meta, "s"); v2 != v {
		t.Fatalf("an empty update wrote the record: version %s, was %s", v2, v)
	}
	n := int64(500)
	info, err = p.star.ConfigureStream(ctx, "s", StreamUpdate{RetentionMaxBytes: &n})
	if err != nil || info.Retention != (Retention{MaxAge: time.Minute, MaxBytes: 500}) {
		t.Fatalf("a bytes-only update: %+v %v, want the age kept", info, err)
	}
	if rec, _ := recordOf(t, w.meta, "s"); rec.retention() != info.Retention {
		t.Fatalf("the record holds %+v, ConfigureStream said %+v", rec.retention(), info.Retention)
	}
	sub := 300 * time.Microsecond // under a millisecond: kept as the smallest age, not as off
	if info, err = p.star.ConfigureStream(ctx, "s", StreamUpdate{RetentionMaxAge: &sub}); err != nil || info.Retention.MaxAge != time.Millisecond {
		t.Fatalf("a sub-millisecond age: %+v %v, want 1ms", info, err)
	}
}

// TestConfigureRefuses: bad values, a nil or ended context, a missing or
// deleted stream, a bad name and a closed star are refused with a clear
// error, writing nothing.
func TestConfigureRefuses(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	p, err := w.open("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	info, err := p.star.CreateStream(ctx, "s", StreamOptions{Class: Standard, Star: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	_, v := recordOf(t, w.meta, "s")
	neg, negN, hour := -time.Second, int64(-1), time.Hour
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, c := range []struct {
		what string
		ctx  context.Context
		name string
		u    StreamUpdate
		is   error
		msg  string
	}{
		{"a negative age", ctx, "s", StreamUpdate{RetentionMaxAge: &neg}, nil, "negative retention max age -1s"},
		{"negative bytes", ctx, "s", StreamUpdate{RetentionMaxBytes: &negN}, nil, "negative retention max bytes -1"},
		{"a bad incarnation", ctx, "s", StreamUpdate{RetentionMaxAge: &hour, Incarnation: "x"}, nil, "invalid incarnation"},
		{"another incarnation", ctx, "s", StreamUpdate{RetentionMaxAge: &hour, Incarnation: chain.NewIncarnation()}, ErrStreamNotFound, "deleted and created again"},
		{"a nil context", nil, "s", StreamUpdate{RetentionMaxAge: &hour}, ErrNilContext, "nil context"},
		{"a cancelled context", cancelled, "s", StreamUpdate{RetentionMaxAge: &hour}, context.Canceled, `configure stream "s": context canceled`},
		{"a missing stream", ctx, "nosuch", StreamUpdate{RetentionMaxAge: &hour}, ErrStreamNotFound, `"nosuch"`},
		{"a bad name", ctx, "", StreamUpdate{RetentionMaxAge: &hour}, ErrInvalidStreamName, ""},
	} {
		_, err := p.star.ConfigureStream(c.ctx, c.name, c.u)
		if err == nil || (c.is != nil && !errors.Is(err, c.is)) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v, want %v containing %q", c.what, err, c.is, c.msg)
		}
	}
	if _, v2 := recordOf(t, w.meta, "s"); v2 != v {
		t.Fatalf("a refused configure wrote the record")
	}
	// Right incarnation given: applies.
	if _, err := p.star.ConfigureStream(ctx, "s", StreamUpdate{RetentionMaxAge: &hour, Incarnation: info.Incarnation}); err != nil {
		t.Fatal(err)
	}
	if err := p.star.DeleteStream(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.star.ConfigureStream(ctx, "s", StreamUpdate{RetentionMaxAge: &hour}); !errors.Is(err, ErrStreamNotFound) {
		t.Fatalf("configure of a deleted stream: %v, want ErrStreamNotFound", err)
	}
	if err := p.star.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.star.ConfigureStream(ctx, "s", StreamUpdate{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("configure on a closed star: %v, want ErrClosed", err)
	}
	rd, _ := NewReader(ReaderConfig{Meta: w.meta})
	if _, err := rd.ConfigureStream(nil, "s", StreamUpdate{}); !errors.Is(err, ErrNilContext) { //nolint:staticcheck // the nil context is the test
		t.Fatalf("Reader.ConfigureStream with a nil context: %v", err)
	}
}

// beforeCommit is a metastore whose first Commit that writes the record
// of name runs hook first (another process's write racing it).
type beforeCommit struct {
	metastore.Store
	name string
	once sync.Once
	hook func()
}

func (m *beforeCommit) Commit(ctx context.Context, ops []metastore.Op) ([]metastore.Version, error) {
	for _, o := range ops {
		if o.Key == chain.StreamRecordKey(m.name) && o.Kind == metastore.OpPut {
			m.once.Do(m.hook)
		}
	}
	return m.Store.Commit(ctx, ops)
}

// TestConfigureRacingRecreate: a delete and re-create of the name between
// the configure's read and its commit: the commit conflicts, and the new
// incarnation keeps its own options (the configure is ErrStreamNotFound).
// A trim racing it instead is not lost: the configure writes again on the
// trimmed record.
func TestConfigureRacingRecreate(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	p, err := w.open("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	old, err := p.star.CreateStream(ctx, "s", StreamOptions{Class: Standard, Star: "s1", Retention: Retention{MaxBytes: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	var fresh StreamInfo
	m := &beforeCommit{Store: w.meta, name: "s", hook: func() {
		if err := p.star.DeleteStream(ctx, "s"); err != nil {
			t.Error(err)
		}
		var err error
		if fresh, err = p.star.CreateStream(ctx, "s", StreamOptions{Class: Standard, Star: "s1", Retention: Retention{MaxBytes: 7}}); err != nil {
			t.Error(err)
		}
	}}
	rd, _ := NewReader(ReaderConfig{Meta: m})
	hour := time.Hour
	_, err = rd.ConfigureStream(ctx, "s", StreamUpdate{RetentionMaxAge: &hour})
	if !errors.Is(err, ErrStreamNotFound) || !strings.Contains(err.Error(), "deleted and created again") {
		t.Fatalf("configure racing a re-create: %v, want ErrStreamNotFound (deleted and created again)", err)
	}
	rec, _ := recordOf(t, w.meta, "s")
	if rec.Incarnation == old.Incarnation || rec.Incarnation != fresh.Incarnation || rec.retention() != (Retention{MaxBytes: 7}) {
		t.Fatalf("after the race the record is %s with %+v, want the new incarnation %s with its own retention", rec.Incarnation, rec.retention(), fresh.Incarnation)
	}

	// A trim racing the configure: both apply.
	appendN(t, p.star, "s", 5, 1, nil)
	m = &beforeCommit{Store: w.meta, name: "s", hook: func() {
		if err := p.star.Trim(ctx, "s", 3); err != nil {
			t.Error(err)
		}
	}}
	rd, _ = NewReader(ReaderConfig{Meta: m})
	info, err := rd.ConfigureStream(ctx, "s", StreamUpdate{RetentionMaxAge: &hour})
	if err != nil || info.Incarnation != fresh.Incarnation {
		t.Fatalf("configure racing a trim: %+v %v", info, err)
	}
	rec, _ = recordOf(t, w.meta, "s")
	if rec.TrimSeq != 3 || rec.retention() != (Retention{MaxAge: time.Hour, MaxBytes: 7}) {
		t.Fatalf("after a trim raced the configure: trim %d, %+v; want both (trim 3, an hour and 7 bytes)", rec.TrimSeq, rec.retention())
	}
}

// countGets is a metastore that counts the Gets of stream records.
type countGets struct {
	metastore.Store
	mu   sync.Mutex
	gets int
}

func (m *countGets) Get(ctx context.Context, key string) (metastore.Item, error) {
	if strings.HasPrefix(key, "streams/") {
		m.mu.Lock()
		m.gets++
		m.mu.Unlock()
	}
	return m.Store.Get(ctx, key)
}

func (m *countGets) take() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.gets
	m.gets = 0
	return n
}

// TestRetentionPassRereadsOnlyAfterAChange: the pass re-reads the records
// of streams without retention only when the star's catalogue generation
// moved (at the first pass, and after a configure elsewhere), not at every
// pass.
func TestRetentionPassRereadsOnlyAfterAChange(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	cm := &countGets{}
	p, err := w.open("a", func(c *Config) {
		// The test runs the passes; settlement's liveness reads records too.
		c.RetentionInterval, c.SettleInterval = -1, -1
		cm.Store = c.Meta
		c.Meta = cm
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"x", "y", "z"} {
		if _, err := p.star.CreateStream(ctx, name, StreamOptions{Class: Standard, Star: "s1"}); err != nil {
			t.Fatal(err)
		}
		appendN(t, p.star, name, 1, 1, nil)
	}
	cm.take()
	p.star.runRetention(ctx, time.Now())
	if n := cm.take(); n != 3 {
		t.Fatalf("the first pass read %d stream records, want the 3 it holds", n)
	}
	p.star.runRetention(ctx, time.Now())
	if n := cm.take(); n != 0 {
		t.Fatalf("a pass with nothing changed read %d stream records, want none", n)
	}
	rd, _ := NewReader(ReaderConfig{Meta: w.meta})
	n := int64(1 << 20)
	if _, err := rd.ConfigureStream(ctx, "y", StreamUpdate{RetentionMaxBytes: &n}); err != nil {
		t.Fatal(err)
	}
	p.star.runRetention(ctx, time.Now())
	// The three records, then y's again: it has retention now (retain).
	if n := cm.take(); n != 4 {
		t.Fatalf("the pass after a configure elsewhere read %d stream records, want 4", n)
	}
	p.star.runRetention(ctx, time.Now())
	if n := cm.take(); n != 1 {
		t.Fatalf("the pass after that read %d stream records, want y's only", n)
	}
}
