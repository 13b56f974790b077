package gocloud_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob/azureblob"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/blob/s3blob"
	"google.golang.org/api/option"

	"github.com/flightlog/flightlog/contrib/gocloud"
	"github.com/flightlog/flightlog/objstore"
)

// answer is what the fake service replies to every request.
type answer struct {
	status int
	header map[string]string
	body   string
}

// fakeService answers every request alike and counts them.
func fakeService(t *testing.T, a answer) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		io.Copy(io.Discard, r.Body)
		for k, v := range a.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(a.status)
		io.WriteString(w, a.body)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func fakeGCS(t *testing.T, a answer) (*gocloud.Store, *atomic.Int32) {
	srv, n := fakeService(t, a)
	ctx := context.Background()
	c, err := storage.NewClient(ctx, option.WithEndpoint(srv.URL+"/storage/v1/"), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	b, err := gcsblob.OpenBucket(ctx, nil, "b", &gcsblob.Options{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	return gocloud.New(b), n
}

func fakeAzure(t *testing.T, a answer) (*gocloud.Store, *atomic.Int32) {
	srv, n := fakeService(t, a)
	c, err := container.NewClientWithNoCredential(srv.URL+"/devstoreaccount1/c", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := azureblob.OpenBucket(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	return gocloud.New(b), n
}

func fakeS3(t *testing.T, a answer) (*gocloud.Store, *atomic.Int32) {
	srv, n := fakeService(t, a)
	c := awss3.New(awss3.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), UsePathStyle: true,
		Credentials: aws.AnonymousCredentials{}, Retryer: aws.NopRetryer{},
	})
	b, err := s3blob.OpenBucket(context.Background(), c, "b", nil)
	if err != nil {
		t.Fatal(err)
	}
	return gocloud.New(b), n
}

func gcsError(code int) string {
	return `{"error":{"code":` + strconv.Itoa(code) + `,"message":"fake"}}`
}

func azureError(status int, code string) answer {
	return answer{status: status, header: map[string]string{"x-ms-error-code": code, "Content-Type": "application/xml"},
		body: `<?xml version="1.0" encoding="utf-8"?><Error><Code>` + code + `</Code><Message>fake</Message></Error>`}
}

func s3Error(status int, code string) answer {
	return answer{status: status, header: map[string]string{"Content-Type": "application/xml"},
		body: `<?xml version="1.0" encoding="UTF-8"?><Error><Code>` + code + `</Code><Message>fake</Message></Error>`}
}

// TestWireMapping: each service's answer, as its driver reports it, maps
// to the objstore sentinel the contract names, and a conditional write is
// sent once (no client retry), so a 412 can never be an echo of our own
// earlier attempt.
func TestWireMapping(t *testing.T) {
	type want int
	const (
		exists want = iota
		permanent
		ambiguous // an error that is none of the sentinels
	)
	cases := []struct {
		name  string
		open  func(*testing.T, answer) (*gocloud.Store, *atomic.Int32)
		a     answer
		op    string // "put" or "get"
		want  want
		calls int32 // requests sent, 0: not checked
	}{
		{"gcs/412", fakeGCS, answer{status: 412, body: gcsError(412)}, "put", exists, 1},
		{"gcs/503", fakeGCS, answer{status: 503, body: gcsError(503)}, "put", ambiguous, 1},
		{"gcs/403/put", fakeGCS, answer{status: 403, body: gcsError(403)}, "put", permanent, 1},
		{"gcs/403/get", fakeGCS, answer{status: 403, body: gcsError(403)}, "get", permanent, 0},
		{"azure/409BlobAlreadyExists", fakeAzure, azureError(409, "BlobAlreadyExists"), "put", exists, 1},
		{"azure/412ConditionNotMet", fakeAzure, azureError(412, "ConditionNotMet"), "put", exists, 1},
		{"azure/503", fakeAzure, azureError(503, "ServerBusy"), "put", ambiguous, 1},
		{"azure/404ContainerNotFound/put", fakeAzure, azureError(404, "ContainerNotFound"), "put", permanent, 1},
		{"azure/404ContainerNotFound/get", fakeAzure, azureError(404, "ContainerNotFound"), "get", permanent, 0},
		{"azure/403AuthenticationFailed/get", fakeAzure, azureError(403, "AuthenticationFailed"), "get", permanent, 0},
		{"s3/412", fakeS3, s3Error(412, "PreconditionFailed"), "put", exists, 0},
		{"s3/409ConditionalRequestConflict", fakeS3, s3Error(409, "ConditionalRequestConflict"), "put", ambiguous, 0},
		{"s3/404NoSuchBucket/get", fakeS3, s3Error(404, "NoSuchBucket"), "get", permanent, 0},
		{"s3/403AccessDenied/get", fakeS3, s3Error(403, "AccessDenied"), "get", permanent, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, n := c.open(t, c.a)
			// A bound for a client that retries (the GCS client retries a
			// 503 until its context ends): the failure then says so
			// instead of hanging.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var err error
			if c.op == "put" {
				err = s.PutIfAbsent(ctx, "chains/s/std/1/0", []byte("flight"))
			} else {
				_, err = s.Get(ctx, "chains/s/std/1/0", 0, -1)
			}
			isExists, isPerm := errors.Is(err, objstore.ErrExists), errors.Is(err, objstore.ErrPermanent)
			isNotFound := errors.Is(err, objstore.ErrNotFound)
			switch {
			case err == nil:
				t.Fatalf("%s = nil, want an error", c.op)
			case c.want == exists && (!isExists || isPerm || isNotFound):
				t.Fatalf("%s = %v, want ErrExists alone", c.op, err)
			case c.want == permanent && (!isPerm || isExists || isNotFound):
				t.Fatalf("%s = %v, want ErrPermanent alone", c.op, err)
			case c.want == ambiguous && (isExists || isPerm || isNotFound):
				t.Fatalf("%s = %v, want an error of unknown outcome (no sentinel)", c.op, err)
			}
			if c.calls > 0 && n.Load() != c.calls {
				t.Fatalf("%s sent %d requests, want %d (the conditional write must not be retried)", c.op, n.Load(), c.calls)
			}
		})
	}
}
