package s3_test

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/objstore/s3"
)

// fakeS3 answers each request with the next scripted reply and records
// what it received.
type fakeS3 struct {
	mu      sync.Mutex
	replies []reply
	got     []*http.Request
	bodies  []string
}

type reply struct {
	status int
	code   string        // S3 error code in an XML body
	body   string        // body of a 2xx
	hang   time.Duration // wait this long (or until the client leaves) before answering
	header map[string]string
}

func (f *fakeS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.got = append(f.got, r)
	f.bodies = append(f.bodies, string(body))
	rep := reply{status: 500, code: "InternalError"}
	if len(f.replies) > 0 {
		rep, f.replies = f.replies[0], f.replies[1:]
	}
	f.mu.Unlock()
	if rep.hang > 0 {
		select {
		case <-time.After(rep.hang):
		case <-r.Context().Done():
			return
		}
	}
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	if rep.code != "" {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(rep.status)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>scripted</Message></Error>`, rep.code)
		return
	}
	w.WriteHeader(rep.status)
	io.WriteString(w, rep.body)
}

func (f *fakeS3) requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.got)
}

func fake(t *testing.T, replies ...reply) (*fakeS3, *s3.Store) {
	t.Helper()
	f := &fakeS3{replies: replies}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	s, err := s3.New(context.Background(), s3.Config{
		Bucket: "b", Endpoint: srv.URL, UsePathStyle: true,
		AccessKey: "k", SecretKey: "s",
		AttemptTimeout: 200 * time.Millisecond, MaxAttempts: 3,
		BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return f, s
}

func TestPutIfAbsentOutcomes(t *testing.T) {
	ok := reply{status: 200, header: map[string]string{"ETag": `"x"`}}
	for _, tc := range []struct {
		name      string
		replies   []reply
		requests  int
		nil_      bool
		exists    bool
		ambiguous bool
	}{
		{"2xx is nil", []reply{ok}, 1, true, false, false},
		{"412 is ErrExists", []reply{{status: 412, code: "PreconditionFailed"}}, 1, false, true, false},
		{"409 ConditionalRequestConflict is retried", []reply{{status: 409, code: "ConditionalRequestConflict"}, ok}, 2, true, false, false},
		{"409 then 412 is still definite", []reply{{status: 409, code: "ConditionalRequestConflict"}, {status: 412, code: "PreconditionFailed"}}, 2, false, true, false},
		{"409 every time gives up, not ambiguous", []reply{{status: 409, code: "ConditionalRequestConflict"}, {status: 409, code: "ConditionalRequestConflict"}, {status: 409, code: "ConditionalRequestConflict"}}, 3, false, false, false},
		{"500 then 2xx is nil", []reply{{status: 500, code: "InternalError"}, ok}, 2, true, false, false},
		{"500 every time is ambiguous", []reply{{status: 500, code: "InternalError"}, {status: 503, code: "SlowDown"}, {status: 500, code: "InternalError"}}, 3, false, false, true},
		{"412 after a 500 is ambiguous, not ErrExists", []reply{{status: 500, code: "InternalError"}, {status: 412, code: "PreconditionFailed"}}, 2, false, false, true},
		{"412 after a timeout is ambiguous, not ErrExists", []reply{{status: 200, hang: time.Second}, {status: 412, code: "PreconditionFailed"}}, 2, false, false, true},
		{"403 is definite and not retried", []reply{{status: 403, code: "AccessDenied"}}, 1, false, false, false},
		{"other 409 is not retried", []reply{{status: 409, code: "OperationAborted"}}, 1, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, s := fake(t, tc.replies...)
			err := s.PutIfAbsent(context.Background(), "chains/a/b", []byte("body"))
			if got := f.requests(); got != tc.requests {
				t.Errorf("server saw %d requests, want %d", got, tc.requests)
			}
			if (err == nil) != tc.nil_ || errors.Is(err, objstore.ErrExists) != tc.exists || errors.Is(err, s3.ErrAmbiguous) != tc.ambiguous {
				t.Fatalf("PutIfAbsent = %v; want nil=%v ErrExists=%v ErrAmbiguous=%v", err, tc.nil_, tc.exists, tc.ambiguous)
			}
			if errors.Is(err, s3.ErrAmbiguous) && errors.Is(err, objstore.ErrExists) {
				t.Fatalf("PutIfAbsent = %v: both ambiguous and ErrExists", err)
			}
		})
	}
}

// TestPutIfAbsentWire: every attempt is a plain PutObject carrying
// If-None-Match: * and our CRC-32C, with a fixed length and no aws-chunked
// encoding or SDK-chosen checksum.
func TestPutIfAbsentWire(t *testing.T) {
	f, s := fake(t, reply{status: 500, code: "InternalError"}, reply{status: 200})
	body := []byte("the flight's bytes")
	if err := s.PutIfAbsent(context.Background(), "chains/a/b", body); err != nil {
		t.Fatal(err)
	}
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
	wantSum := base64.StdEncoding.EncodeToString(sum[:])
	if len(f.got) != 2 {
		t.Fatalf("%d requests, want 2", len(f.got))
	}
	for i, r := range f.got {
		if r.Method != http.MethodPut || r.URL.Path != "/b/chains/a/b" {
			t.Errorf("attempt %d: %s %s, want PUT /b/chains/a/b", i, r.Method, r.URL.Path)
		}
		if got := r.Header.Get("If-None-Match"); got != "*" {
			t.Errorf("attempt %d: If-None-Match = %q, want *", i, got)
		}
		if got := r.Header.Get("X-Amz-Checksum-Crc32c"); got != wantSum {
			t.Errorf("attempt %d: x-amz-checksum-crc32c = %q, want %q", i, got, wantSum)
		}
		if r.ContentLength != int64(len(body)) || f.bodies[i] != string(body) {
			t.Errorf("attempt %d: body %q (Content-Length %d), want %q", i, f.bodies[i], r.ContentLength, body)
		}
		for h := range r.Header {
			if strings.HasPrefix(strings.ToLower(h), "x-amz-checksum-") && !strings.EqualFold(h, "X-Amz-Checksum-Crc32c") {
				t.Errorf("attempt %d: unexpected checksum header %s", i, h)
			}
		}
		if ce := r.Header.Get("Content-Encoding"); strings.Contains(ce, "aws-chunked") || r.Header.Get("X-Amz-Trailer") != "" {
			t.Errorf("attempt %d: chunked/trailer encoding (Content-Encoding %q)", i, ce)
		}
	}
}

func TestTimeoutIsHonoured(t *testing.T) {
	hang := reply{status: 200, hang: 10 * time.Second}
	f, s := fake(t, hang, hang, hang)
	start := time.Now()
	err := s.PutIfAbsent(context.Background(), "k", []byte("x"))
	took := time.Since(start)
	if !errors.Is(err, s3.ErrAmbiguous) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("PutIfAbsent against a hung server = %v, want ErrAmbiguous not wrapping a context error", err)
	}
	if took > 2*time.Second || f.requests() != 3 {
		t.Fatalf("took %v over %d attempts, want 3 attempts of 200ms", took, f.requests())
	}

	// The caller's own deadline ends the call at once and is wrapped.
	_, s = fake(t, hang)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start = time.Now()
	err = s.PutIfAbsent(ctx, "k", []byte("x"))
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, s3.ErrAmbiguous) || time.Since(start) > time.Second {
		t.Fatalf("PutIfAbsent past the caller's deadline = %v after %v, want ambiguous wrapping DeadlineExceeded, promptly", err, time.Since(start))
	}

	// Gets are retried too, and their deadline is honoured.
	_, s = fake(t, hang, reply{status: 206, body: "ab", header: map[string]string{"Content-Range": "bytes 0-1/10"}})
	got, err := s.Get(context.Background(), "k", 0, 2)
	if err != nil || string(got) != "ab" {
		t.Fatalf("Get after a hung attempt = %q, %v; want \"ab\"", got, err)
	}
}

func TestGetDeleteMapping(t *testing.T) {
	ctx := context.Background()
	_, s := fake(t, reply{status: 404, code: "NoSuchKey"})
	if _, err := s.Get(ctx, "k", 0, -1); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Get of NoSuchKey = %v, want ErrNotFound", err)
	}
	_, s = fake(t, reply{status: 404, code: "NoSuchBucket"})
	if _, err := s.Get(ctx, "k", 0, -1); err == nil || errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Get from a missing bucket = %v, want an error that is not ErrNotFound", err)
	}
	_, s = fake(t, reply{status: 416, code: "InvalidRange"})
	if got, err := s.Get(ctx, "k", 100, 10); err != nil || got == nil || len(got) != 0 {
		t.Errorf("Get past the end (416) = %q, %v; want empty, nil", got, err)
	}
	// A server that ignores Range: the range is cut out locally.
	f, s := fake(t, reply{status: 200, body: "0123456789"})
	if got, err := s.Get(ctx, "k", 3, 4); err != nil || string(got) != "3456" {
		t.Errorf("Get(3, 4) from a server ignoring Range = %q, %v; want 3456", got, err)
	}
	if r := f.got[0].Header.Get("Range"); r != "bytes=3-6" {
		t.Errorf("Range = %q, want bytes=3-6", r)
	}
	_, s = fake(t, reply{status: 404, code: "NoSuchKey"})
	if err := s.Delete(ctx, "k"); err != nil {
		t.Errorf("Delete answered 404 = %v, want nil", err)
	}
	_, s = fake(t, reply{status: 204})
	if err := s.Delete(ctx, "k"); err != nil {
		t.Errorf("Delete answered 204 = %v, want nil", err)
	}
}

func TestRefusedConnectionIsUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s, err := s3.New(context.Background(), s3.Config{
		Bucket: "b", Endpoint: "http://" + addr, UsePathStyle: true, AccessKey: "k", SecretKey: "s",
		MaxAttempts: 2, BackoffBase: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.PutIfAbsent(context.Background(), "k", []byte("x"))
	if !errors.Is(err, objstore.ErrUnavailable) || errors.Is(err, s3.ErrAmbiguous) {
		t.Fatalf("PutIfAbsent to a closed port = %v, want ErrUnavailable and not ambiguous (nothing was sent)", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []s3.Config{
		{},
		{Bucket: "b", AccessKey: "k"},
		{Bucket: "b", MaxAttempts: -1},
		{Bucket: "flights--usw2-az1--x-s3", UsePathStyle: true},
	} {
		if _, err := s3.New(context.Background(), c); err == nil {
			t.Errorf("New(%+v) = nil error, want a validation error", c)
		}
	}
	if !s3.DirectoryBucket("flights--usw2-az1--x-s3") || s3.DirectoryBucket("flights") {
		t.Error("DirectoryBucket misclassifies")
	}
}

// TestPermanentRefusals: a missing bucket, a name the server rejects and
// wrong credentials are objstore.ErrPermanent, answered after one request
// (nothing to retry), on every operation; a missing key is still
// ErrNotFound, and refusals a retry can cure are not permanent.
func TestPermanentRefusals(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		status    int
		code      string
		permanent bool
		notFound  bool
		requests  int
	}{
		{404, "NoSuchBucket", true, false, 1},
		{400, "InvalidBucketName", true, false, 1},
		{403, "AccessDenied", true, false, 1},
		{403, "InvalidAccessKeyId", true, false, 1},
		{403, "SignatureDoesNotMatch", true, false, 1},
		{404, "XAdminUserNotFound", true, false, 1}, // versitygw: unknown access key
		{301, "PermanentRedirect", true, false, 1},
		{400, "AuthorizationHeaderMalformed", true, false, 1},
		{501, "NotImplemented", true, false, 1},
		{403, "SomeNewDenial", true, false, 1},
		{404, "NoSuchKey", false, true, 1},
		{403, "RequestTimeTooSkewed", false, false, 1},
		{403, "ExpiredToken", false, false, 1},
		{400, "BadDigest", false, false, 1},
		{503, "SlowDown", false, false, 3},
	} {
		t.Run(tc.code, func(t *testing.T) {
			rep := reply{status: tc.status, code: tc.code}
			ops := []struct {
				name string
				do   func(s *s3.Store) error
			}{
				{"put", func(s *s3.Store) error { return s.PutIfAbsent(ctx, "chains/a/b", []byte("x")) }},
				{"get", func(s *s3.Store) error { _, err := s.Get(ctx, "chains/a/b", 0, 60); return err }},
				{"delete", func(s *s3.Store) error { return s.Delete(ctx, "chains/a/b") }},
				{"list", func(s *s3.Store) error { _, err := s.List(ctx, "chains/", "", 10); return err }},
			}
			for _, op := range ops {
				f, s := fake(t, rep, rep, rep)
				err := op.do(s)
				if op.name == "delete" && tc.notFound {
					if err != nil {
						t.Errorf("delete answered %d %s = %v, want nil", tc.status, tc.code, err)
					}
					continue
				}
				if op.name == "list" && tc.notFound {
					continue // a listing has no key to be missing
				}
				if got := errors.Is(err, objstore.ErrPermanent); got != tc.permanent {
					t.Errorf("%s answered %d %s = %v; permanent %v, want %v", op.name, tc.status, tc.code, err, got, tc.permanent)
				}
				if got := errors.Is(err, objstore.ErrNotFound); got != tc.notFound {
					t.Errorf("%s answered %d %s = %v; ErrNotFound %v, want %v", op.name, tc.status, tc.code, err, got, tc.notFound)
				}
				if tc.permanent && errors.Is(err, s3.ErrAmbiguous) {
					t.Errorf("%s answered %d %s on its first attempt = %v: ambiguous, but nothing was applied", op.name, tc.status, tc.code, err)
				}
				if got := f.requests(); got != tc.requests {
					t.Errorf("%s answered %d %s: server saw %d requests, want %d", op.name, tc.status, tc.code, got, tc.requests)
				}
			}
		})
	}

	// A permanent refusal after an attempt of unknown outcome: the object
	// may be this call's own, so it is ambiguous as well as permanent.
	_, s := fake(t, reply{status: 500, code: "InternalError"}, reply{status: 403, code: "AccessDenied"})
	err := s.PutIfAbsent(ctx, "chains/a/b", []byte("x"))
	if !errors.Is(err, objstore.ErrPermanent) || !errors.Is(err, s3.ErrAmbiguous) {
		t.Fatalf("PutIfAbsent: 500 then 403 = %v, want ErrPermanent and ErrAmbiguous", err)
	}
}
