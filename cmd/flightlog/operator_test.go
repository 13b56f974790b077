package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/metastore/bbolt"
)

// Issue 15, item 6: a CLI an operator can trust.

// TestHelpPrintedOnce: a subcommand's --help used to print its usage twice
// (once to stderr by the flag package, once to stdout); a bad flag prints
// its error and the usage once, to stderr.
func TestHelpPrintedOnce(t *testing.T) {
	for _, c := range commands {
		code, out, errs := cli(t, "", c.name, "--help")
		if code != exitOK || strings.Count(out, "Usage: flightlog "+c.name) != 1 || errs != "" {
			t.Errorf("%s --help: exit %d, %d usages on stdout, stderr %q", c.name, code, strings.Count(out, "Usage: flightlog "+c.name), errs)
		}
	}
	code, out, errs := cli(t, "", "read", "--no-such-flag", "s")
	if code != exitCannot || out != "" || strings.Count(errs, "Usage: flightlog read") != 1 || !strings.Contains(errs, "no-such-flag") {
		t.Errorf("read with a bad flag: exit %d, stdout %q, stderr:\n%s", code, out, errs)
	}
}

// TestBackendFlagsFromEnv: every backend flag may come from FLIGHTLOG_*,
// named as the s3 example and scripts/test.sh already name them; a flag
// given explicitly wins; --help names the variable.
func TestBackendFlagsFromEnv(t *testing.T) {
	dir := seeded(t)
	code, out, errs := cliEnv(t, map[string]string{"FLIGHTLOG_DIR": dir}, "", "read", "orders")
	if code != exitOK || out != "one\ntwo\nthree\n" {
		t.Fatalf("read with $FLIGHTLOG_DIR: exit %d, %q\n%s", code, out, errs)
	}
	code, out, errs = cliEnv(t, map[string]string{"FLIGHTLOG_DIR": filepath.Join(t.TempDir(), "elsewhere")}, "", "read", "orders", "--dir", dir)
	if code != exitOK || out != "one\ntwo\nthree\n" {
		t.Fatalf("--dir over $FLIGHTLOG_DIR: exit %d, %q\n%s", code, out, errs)
	}
	code, _, errs = cliEnv(t, map[string]string{"FLIGHTLOG_DIR": dir, "FLIGHTLOG_LOCK_TIMEOUT": "soon"}, "", "read", "orders")
	if code != exitCannot || !strings.Contains(errs, "FLIGHTLOG_LOCK_TIMEOUT") {
		t.Fatalf("a bad $FLIGHTLOG_LOCK_TIMEOUT: exit %d, stderr %s", code, errs)
	}
	// The variables deployments already set, and --help naming them.
	_, help, _ := cli(t, "", "read", "--help")
	for flagName, env := range map[string]string{
		"s3-endpoint": "FLIGHTLOG_S3_ENDPOINT", "etcd": "FLIGHTLOG_ETCD_ENDPOINTS",
		"s3-access-key": "FLIGHTLOG_S3_ACCESS_KEY", "s3-secret-key": "FLIGHTLOG_S3_SECRET_KEY",
		"dir": "FLIGHTLOG_DIR", "etcd-prefix": "FLIGHTLOG_ETCD_PREFIX", "s3-express-buckets": "FLIGHTLOG_S3_EXPRESS_BUCKETS",
	} {
		if !strings.Contains(help, "$"+env) {
			t.Errorf("read --help does not name $%s (for --%s)", env, flagName)
		}
	}
	// Every backend flag has a variable of its own.
	g := &globalOpts{}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	g.register(fs)
	seen := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		e := envName(f.Name)
		if other, dup := seen[e]; dup {
			t.Errorf("--%s and --%s share $%s", f.Name, other, e)
		}
		seen[e] = f.Name
		if !strings.Contains(f.Usage, "$"+e) {
			t.Errorf("--%s's usage does not name $%s: %q", f.Name, e, f.Usage)
		}
	})
	// The s3 credentials each from their own variable, a flag winning.
	g = &globalOpts{}
	fs = flag.NewFlagSet("x", flag.ContinueOnError)
	g.register(fs)
	fs.Parse([]string{"--s3-secret-key", "from-flag"})
	if err := g.fromEnv(fs, mapEnv(map[string]string{"FLIGHTLOG_S3_ACCESS_KEY": "ak", "FLIGHTLOG_S3_SECRET_KEY": "from-env",
		"FLIGHTLOG_S3_ENDPOINT": "http://s3.test", "FLIGHTLOG_S3_PATH_STYLE": "false", "FLIGHTLOG_S3_PARALLEL_UPLOADS": "7"})); err != nil {
		t.Fatal(err)
	}
	if g.S3AccessKey != "ak" || g.S3SecretKey != "from-flag" || g.S3Endpoint != "http://s3.test" || g.S3PathStyle || g.ParallelUploads != 7 {
		t.Fatalf("from the environment: %+v", g)
	}
}

// seededWith returns a data directory holding stream "s" (Standard) with
// recs, written by one leader and cleanly closed.
func seededWith(t *testing.T, recs []loglet.Record) string {
	t.Helper()
	ctx := context.Background()
	dir, g, b := tempBackends(t)
	defer b.Close()
	star, err := g.openStar(ctx, b, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := star.CreateStream(ctx, "s", loglet.StreamOptions{Class: loglet.Standard}); err != nil {
		t.Fatal(err)
	}
	if _, err := star.Append(ctx, "s", loglet.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	if err := star.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestReadJSONIsLossless: binary bodies used to come out as U+FFFD and
// duplicate header names were lost (a map). Now each byte string is a JSON
// string when valid UTF-8 and base64 under key_base64 otherwise, and
// headers are an ordered list. The test decodes the lines by the
// documented rule, not with the command's own type.
func TestReadJSONIsLossless(t *testing.T) {
	recs := []loglet.Record{
		{Body: []byte{0xff, 0xfe, 0, 'x', 0x80}, Headers: []loglet.Header{
			{Name: []byte("k"), Value: []byte("1")}, {Name: []byte("k"), Value: []byte("2")},
			{Name: []byte{0xc3}, Value: []byte{0xff}}, {Name: []byte("a"), Value: []byte("")},
		}},
		{Body: []byte("héllo\n<&>\"\u2028")},
		{Body: []byte{}},
	}
	dir := seededWith(t, recs)
	code, out, errs := cli(t, "", "read", "s", "--format", "json", "--dir", dir)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != exitOK || len(lines) != len(recs) {
		t.Fatalf("read --format json: exit %d, %d lines\n%s%s", code, len(lines), out, errs)
	}
	field := func(m map[string]any, key string, valid bool) []byte {
		t.Helper()
		s, plain := m[key].(string)
		b64, coded := m[key+"_base64"].(string)
		if plain == coded || plain != valid {
			t.Fatalf("%q: want exactly %q (valid UTF-8: %v), got %v", key, map[bool]string{true: key, false: key + "_base64"}[valid], valid, m)
		}
		if plain {
			return []byte(s)
		}
		b, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			t.Fatalf("%s_base64 %q: %v", key, b64, err)
		}
		return b
	}
	for i, line := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, line)
		}
		if m["seq"] != float64(i) {
			t.Errorf("line %d: seq %v", i, m["seq"])
		}
		if got := field(m, "body", i > 0); !bytes.Equal(got, recs[i].Body) {
			t.Errorf("line %d: body %q, want %q", i, got, recs[i].Body)
		}
		hs, _ := m["headers"].([]any)
		if len(hs) != len(recs[i].Headers) {
			t.Fatalf("line %d: headers %v, want %d in order: %s", i, m["headers"], len(recs[i].Headers), line)
		}
		for j, h := range hs {
			hm, _ := h.(map[string]any)
			want := recs[i].Headers[j]
			name, value := field(hm, "name", j != 2), field(hm, "value", j != 2)
			if !bytes.Equal(name, want.Name) || !bytes.Equal(value, want.Value) {
				t.Errorf("line %d header %d: %q=%q, want %q=%q", i, j, name, value, want.Name, want.Value)
			}
		}
	}
}

// TestIsTerminal: /dev/null is a character device but no terminal; it used
// to count as one (progress escapes written into a redirect).
func TestIsTerminal(t *testing.T) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if isTerminal(null) {
		t.Errorf("%s counts as a terminal", os.DevNull)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if isTerminal(w) || isTerminal(&bytes.Buffer{}) {
		t.Errorf("a pipe or a buffer counts as a terminal")
	}
	// A pseudo-terminal's master side answers the terminal ioctls.
	if ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0); err == nil {
		defer ptmx.Close()
		if !isTerminal(ptmx) {
			t.Errorf("/dev/ptmx does not count as a terminal")
		}
	}
}

// TestEtcdWithLocalBucketsNeedsNoMetaDB: --etcd with the buckets in --dir
// used to demand <dir>/meta.db, which such a layout never has. (Opening
// the etcd client contacts nothing yet: the address need not answer.)
func TestEtcdWithLocalBucketsNeedsNoMetaDB(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, standardDir), 0o755); err != nil {
		t.Fatal(err)
	}
	g := &globalOpts{}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	g.register(fs)
	fs.Parse([]string{"--dir", dir, "--etcd", "http://127.0.0.1:1"})
	b, err := g.open(context.Background(), true)
	if err != nil {
		t.Fatalf("open with --etcd and buckets in --dir: %v", err)
	}
	b.Close()
	if _, err := os.Stat(filepath.Join(dir, metaFile)); err == nil {
		t.Errorf("a %s was created beside etcd", metaFile)
	}
	// A read of a directory with no buckets still says so, and creates none.
	empty := filepath.Join(t.TempDir(), "none")
	fs = flag.NewFlagSet("x", flag.ContinueOnError)
	g.register(fs)
	fs.Parse([]string{"--dir", empty, "--etcd", "http://127.0.0.1:1"})
	if _, err := g.open(context.Background(), true); err == nil || !strings.Contains(err.Error(), "no flightlog data") {
		t.Errorf("--etcd over an empty --dir: %v", err)
	}
	if _, err := os.Stat(empty); err == nil {
		t.Errorf("a read created %s", empty)
	}
}

// TestEtcdWithLocalBucketsEndToEnd runs append, streams and read over a
// real etcd (scripts/test.sh starts one) with the buckets in --dir.
func TestEtcdWithLocalBucketsEndToEnd(t *testing.T) {
	eps := os.Getenv("FLIGHTLOG_ETCD_ENDPOINTS")
	if eps == "" {
		if os.Getenv("FLIGHTLOG_REQUIRE_SERVERS") == "1" {
			t.Fatal("FLIGHTLOG_ETCD_ENDPOINTS is not set (FLIGHTLOG_REQUIRE_SERVERS=1)")
		}
		t.Skip("FLIGHTLOG_ETCD_ENDPOINTS is not set: run ./scripts/test.sh, which starts etcd")
	}
	dir := filepath.Join(t.TempDir(), "data")
	env := map[string]string{"FLIGHTLOG_ETCD_ENDPOINTS": eps, "FLIGHTLOG_ETCD_PREFIX": fmt.Sprintf("cli-test/%d/", time.Now().UnixNano()), "FLIGHTLOG_DIR": dir}
	if code, out, errs := cliEnv(t, env, "a\nb\n", "append", "--create", "s"); code != exitOK || !strings.Contains(out, "appended 2 records") {
		t.Fatalf("append: exit %d %s%s", code, out, errs)
	}
	if code, out, errs := cliEnv(t, env, "", "read", "s"); code != exitOK || out != "a\nb\n" {
		t.Fatalf("read: exit %d %q %s", code, out, errs)
	}
	if code, out, errs := cliEnv(t, env, "", "streams", "--format", "json"); code != exitOK || !strings.Contains(out, `"name":"s"`) {
		t.Fatalf("streams: exit %d %q %s", code, out, errs)
	}
	if _, err := os.Stat(filepath.Join(dir, metaFile)); err == nil {
		t.Errorf("a %s was created beside etcd", metaFile)
	}
}

// TestInspectSlotNumber: inspect takes a slot number, in the live epoch
// unless --epoch, of --class's chain.
func TestInspectSlotNumber(t *testing.T) {
	dir := seeded(t)
	key := slotOf(t, dir, "clicks")
	_, c, epoch, slot, ok := chain.ParseSlotKey(key)
	if !ok || c != chain.Express {
		t.Fatalf("slot key %s", key)
	}
	code, want, errs := cli(t, "", "inspect", key, "--dir", dir)
	if code != exitOK {
		t.Fatalf("inspect %s: exit %d %s", key, code, errs)
	}
	n := strconv.FormatUint(slot, 10)
	for _, args := range [][]string{
		{"inspect", "--class", "express", n},
		{"inspect", "--class", "express", "--epoch", strconv.FormatUint(epoch, 10), n},
	} {
		code, out, errs := cli(t, "", append(args, "--dir", dir)...)
		if code != exitOK || out != want {
			t.Errorf("%v: exit %d\n%s\nwant\n%s%s", args, code, out, want, errs)
		}
	}
	if code, out, _ := cli(t, "", "inspect", "--class", "express", "--epoch", strconv.FormatUint(epoch+5, 10), n, "--dir", dir); code != exitProblems || !strings.Contains(out, chain.SlotKey(defaultStarName, chain.Express, epoch+5, slot)) {
		t.Errorf("inspect of a slot of an epoch with none: exit %d\n%s", code, out)
	}
	if code, _, errs := cli(t, "", "inspect", "--epoch", "2", key, "--dir", dir); code != exitCannot || !strings.Contains(errs, "slot number") {
		t.Errorf("inspect --epoch with a key: exit %d %s", code, errs)
	}
}

func TestAppendSaysRecordOrRecords(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if code, out, errs := cli(t, "only\n", "append", "--create", "s", "--dir", dir); code != exitOK || out != "s: appended 1 record, seq [0, 1)\n" {
		t.Errorf("append of one: exit %d %q %s", code, out, errs)
	}
	if code, out, errs := cli(t, "a\nb\n", "append", "s", "--dir", dir); code != exitOK || out != "s: appended 2 records, seq [1, 3)\n" {
		t.Errorf("append of two: exit %d %q %s", code, out, errs)
	}
}

// TestStreamsCreateDelete: create and delete lead the star for one call;
// streams lists from the name index, paged.
func TestStreamsCreateDelete(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	for _, s := range []struct{ name, class string }{{"orders", "express"}, {"orders.eu", "standard"}, {"clicks", "standard"}} {
		code, out, errs := cli(t, "", "create", s.name, "--class", s.class, "--dir", dir)
		if code != exitOK || !strings.Contains(out, s.name+": created (class "+s.class) {
			t.Fatalf("create %s: exit %d %s%s", s.name, code, out, errs)
		}
	}
	if code, _, errs := cli(t, "", "create", "orders", "--dir", dir); code != exitProblems || !strings.Contains(errs, "exists") {
		t.Fatalf("create of an existing stream: exit %d %s", code, errs)
	}
	names := func(args ...string) (string, string) {
		t.Helper()
		code, out, errs := cli(t, "", append(append([]string{"streams", "--format", "json"}, args...), "--dir", dir)...)
		if code != exitOK {
			t.Fatalf("streams %v: exit %d %s", args, code, errs)
		}
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if line == "" {
				continue
			}
			var s listedStream
			if err := json.Unmarshal([]byte(line), &s); err != nil {
				t.Fatalf("streams: %v: %q", err, line)
			}
			got = append(got, s.Name+"/"+s.Class)
		}
		return strings.Join(got, " "), errs
	}
	for _, tc := range []struct {
		args       []string
		want, errs string
	}{
		{nil, "clicks/standard orders/express orders.eu/standard", ""},
		{[]string{"--prefix", "orders"}, "orders/express orders.eu/standard", ""},
		{[]string{"--limit", "1"}, "clicks/standard", `more streams follow: --start-after "clicks"`},
		{[]string{"--start-after", "clicks", "--limit", "1"}, "orders/express", `--start-after "orders"`},
		{[]string{"--start-after", "orders", "--limit", "1"}, "orders.eu/standard", ""},
		{[]string{"--limit", "3"}, "clicks/standard orders/express orders.eu/standard", ""},
		{[]string{"--prefix", "nothing"}, "", ""},
	} {
		got, errs := names(tc.args...)
		if got != tc.want || (tc.errs == "") != (errs == "") || !strings.Contains(errs, tc.errs) {
			t.Errorf("streams %v: %q, stderr %q; want %q, stderr %q", tc.args, got, errs, tc.want, tc.errs)
		}
	}
	code, out, _ := cli(t, "", "streams", "--dir", dir)
	if code != exitOK || !strings.HasPrefix(out, "NAME") || strings.Count(out, "\n") != 4 {
		t.Errorf("streams (table): exit %d\n%s", code, out)
	}
	if code, out, errs := cli(t, "", "delete", "orders", "--dir", dir); code != exitOK || !strings.Contains(out, "deleted") {
		t.Fatalf("delete: exit %d %s%s", code, out, errs)
	}
	if got, _ := names(); got != "clicks/standard orders.eu/standard" {
		t.Errorf("streams after delete: %q", got)
	}
	if code, _, errs := cli(t, "", "delete", "orders", "--dir", dir); code != exitProblems || !strings.Contains(errs, "not found") {
		t.Errorf("delete of a deleted stream: exit %d %s", code, errs)
	}
	if code, _, errs := cli(t, "", "read", "orders", "--dir", dir); code != exitProblems || !strings.Contains(errs, "not found") {
		t.Errorf("read of a deleted stream: exit %d %s", code, errs)
	}
	if code, _, _ := cli(t, "", "trim", "orders"); code != exitCannot {
		t.Errorf("trim without SEQ: exit %d", code)
	}
	if code, _, errs := cli(t, "", "trim", "orders", "3", "--dir", dir); code != exitProblems || !strings.Contains(errs, "not found") {
		t.Errorf("trim of a deleted stream: exit %d %s", code, errs)
	}
	if _, help, _ := cli(t, "", "--help"); !strings.Contains(help, "trim") || !strings.Contains(help, "settlement") {
		t.Errorf("--help does not say what trim reclaims:\n%s", help)
	}
}

// TestListStreamsPages: listStreams pages through the name index, so a
// listing longer than one Scan is whole.
func TestListStreamsPages(t *testing.T) {
	ctx := context.Background()
	ms := metastore.NewMem()
	var want []string
	for i := range 7 {
		name := fmt.Sprintf("s%02d", i)
		want = append(want, name)
		val, _ := json.Marshal(listedStream{Name: name, Class: "standard", Star: "default"})
		if _, err := ms.Put(ctx, chain.StreamNameKey(name), val, metastore.NoVersion); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		prefix, after string
		limit, page   int
		want          []string
		more          bool
	}{
		{"", "", 0, 2, want, false},
		{"", "", 0, 7, want, false},
		{"", "", 5, 2, want[:5], true},
		{"", "s01", 3, 2, want[2:5], true},
		{"", "s03", 0, 3, want[4:], false},
		{"", "", 7, 3, want, false},
		{"s0", "", 0, 1, want, false},
	} {
		got, more, err := listStreams(ctx, ms, tc.prefix, tc.after, tc.limit, tc.page)
		var names []string
		for _, s := range got {
			names = append(names, s.Name)
		}
		if err != nil || strings.Join(names, ",") != strings.Join(tc.want, ",") || more != tc.more {
			t.Errorf("%+v: %v more=%v %v", tc, names, more, err)
		}
	}
}

// TestStreamsLeadsNothing: with a chain's live owner (here crashed: no
// clean Close), streams lists and leaves the epoch record as it was, while
// create refuses the owner unless --takeover.
func TestStreamsLeadsNothing(t *testing.T) {
	ctx := context.Background()
	dir, g, b := tempBackends(t)
	star, err := g.openStar(ctx, b, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := star.CreateStream(ctx, "orders", loglet.StreamOptions{Class: loglet.Standard}); err != nil {
		t.Fatal(err)
	}
	b.Close() // the leader crashes
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	star.Close(cctx)
	cancel()
	epochs := func() string {
		t.Helper()
		ms, err := bbolt.Open(filepath.Join(dir, metaFile), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ms.Close()
		var s string
		for _, c := range chain.Classes() {
			it, err := ms.Get(ctx, chain.EpochKey(defaultStarName, c))
			if err != nil {
				t.Fatal(err)
			}
			s += string(it.Value) + string(it.Version) + "\n"
		}
		return s
	}
	before := epochs()
	code, out, errs := cli(t, "", "streams", "--dir", dir)
	if code != exitOK || !strings.Contains(out, "orders") {
		t.Fatalf("streams beside a live owner: exit %d %s%s", code, out, errs)
	}
	if after := epochs(); after != before {
		t.Fatalf("streams changed the epoch records:\n%s\nto\n%s", before, after)
	}
	code, _, errs = cli(t, "", "create", "clicks", "--dir", dir)
	if code != exitCannot || !strings.Contains(errs, "live owner") || !strings.Contains(errs, "--takeover") {
		t.Fatalf("create over a live owner: exit %d %s", code, errs)
	}
	if after := epochs(); after != before {
		t.Fatalf("a refused create changed the epoch records")
	}
	if code, out, errs := cli(t, "", "create", "clicks", "--takeover", "--dir", dir); code != exitOK || !strings.Contains(out, "created") {
		t.Fatalf("create --takeover: exit %d %s%s", code, out, errs)
	}
	if code, out, errs := cli(t, "", "delete", "clicks", "--dir", dir); code != exitOK {
		t.Fatalf("delete after a clean close: exit %d %s%s", code, out, errs)
	}
}
