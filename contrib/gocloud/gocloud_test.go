package gocloud_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"gocloud.dev/blob/azureblob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/blob/memblob"
	"google.golang.org/api/option"

	"github.com/flightlog/flightlog/contrib/gocloud"
	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/objstore/objstoretest"
)

// emulator returns the endpoint in env, or skips (fails under
// FLIGHTLOG_REQUIRE_SERVERS=1).
func emulator(t testing.TB, env, what string) string {
	t.Helper()
	ep := os.Getenv(env)
	if ep == "" {
		msg := env + " is not set: run ./scripts/test.sh, which starts " + what + " on loopback and sets it"
		if os.Getenv("FLIGHTLOG_REQUIRE_SERVERS") == "1" {
			t.Fatal(msg + " (FLIGHTLOG_REQUIRE_SERVERS=1: a missing server is a failure)")
		}
		t.Skip(msg)
	}
	return ep
}

func randomName(prefix string) string {
	var b [6]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// memHarness: every New is a fresh memblob bucket; Reopen wraps the same
// bucket in a new Store (memblob lives in the process).
func memHarness() objstoretest.Harness {
	return objstoretest.Harness{
		New: func(t testing.TB) objstore.Store {
			b := memblob.OpenBucket(nil)
			t.Cleanup(func() { b.Close() })
			return gocloud.New(b)
		},
		Reopen: func(t testing.TB, s objstore.Store) objstore.Store {
			return gocloud.New(s.(*gocloud.Store).Bucket())
		},
	}
}

func TestConformanceMemblob(t *testing.T) { objstoretest.Run(t, memHarness()) }

// fileHarness: fileblob over a fresh directory; Reopen opens the directory
// again. fileblob stores keys as paths (PathKeys), and writes a segment to
// "<segment>.<16 hex>.tmp" before renaming it, so a segment may have 234
// bytes, not 255.
func fileHarness() objstoretest.Harness {
	open := func(t testing.TB, dir string) objstore.Store {
		b, err := fileblob.OpenBucket(dir, &fileblob.Options{Metadata: fileblob.MetadataDontWrite})
		if err != nil {
			t.Fatalf("fileblob.OpenBucket(%s): %v", dir, err)
		}
		t.Cleanup(func() { b.Close() })
		return gocloud.New(b, gocloud.WithName(dir))
	}
	dirs := map[objstore.Store]string{}
	return objstoretest.Harness{
		New: func(t testing.TB) objstore.Store {
			dir := t.TempDir()
			s := open(t, dir)
			dirs[s] = dir
			return s
		},
		Reopen: func(t testing.TB, s objstore.Store) objstore.Store { return open(t, dirs[s]) },
		Caps:   objstoretest.Capabilities{PathKeys: true, MaxSegmentLen: 234},
	}
}

func TestConformanceFileblob(t *testing.T) { objstoretest.Run(t, fileHarness()) }

// gcsClient returns a storage client for the fake-gcs-server at
// FLIGHTLOG_GCS_ENDPOINT.
func gcsClient(t testing.TB) *storage.Client {
	ep := emulator(t, "FLIGHTLOG_GCS_ENDPOINT", "fake-gcs-server")
	c, err := storage.NewClient(context.Background(), option.WithEndpoint(ep+"/storage/v1/"), option.WithoutAuthentication())
	if err != nil {
		t.Fatalf("storage.NewClient: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// newGCSBucket creates a fresh bucket on the emulator and returns its name.
func newGCSBucket(t testing.TB, c *storage.Client) string {
	name := randomName("flightlog-test-")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Bucket(name).Create(ctx, "flightlog", nil); err != nil {
		t.Fatalf("create GCS bucket %s: %v", name, err)
	}
	return name
}

func openGCS(t testing.TB, c *storage.Client, name string) *gocloud.Store {
	b, err := gcsblob.OpenBucket(context.Background(), nil, name, &gcsblob.Options{Client: c})
	if err != nil {
		t.Fatalf("gcsblob.OpenBucket(%s): %v", name, err)
	}
	t.Cleanup(func() { b.Close() })
	return gocloud.New(b, gocloud.WithName("gs://"+name))
}

// namedHarness is a harness over a service whose storage is a named
// bucket: create makes a fresh one, open opens one by name with a new client.
func namedHarness(create func(t testing.TB) string, open func(t testing.TB, name string) objstore.Store) objstoretest.Harness {
	var names sync.Map // objstore.Store -> bucket name
	return objstoretest.Harness{
		New: func(t testing.TB) objstore.Store {
			name := create(t)
			s := open(t, name)
			names.Store(s, name)
			return s
		},
		Reopen: func(t testing.TB, s objstore.Store) objstore.Store {
			name, _ := names.Load(s)
			return open(t, name.(string))
		},
	}
}

func gcsHarness(t testing.TB) objstoretest.Harness {
	c := gcsClient(t)
	return namedHarness(
		func(t testing.TB) string { return newGCSBucket(t, c) },
		// A new client, as a restarted process would make.
		func(t testing.TB, name string) objstore.Store { return openGCS(t, gcsClient(t), name) })
}

func TestConformanceGCS(t *testing.T) { objstoretest.Run(t, gcsHarness(t)) }

func BenchmarkGCS(b *testing.B) { objstoretest.RunBenchmarks(b, gcsHarness(b)) }

// azuriteKey is the Azure storage emulator's published account key for
// devstoreaccount1 (the same in every Azurite).
const azuriteKey = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

// azureConnString returns the connection string for the Azurite at
// FLIGHTLOG_AZURE_ENDPOINT (http://host:port/devstoreaccount1).
func azureConnString(t testing.TB) string {
	ep := emulator(t, "FLIGHTLOG_AZURE_ENDPOINT", "Azurite")
	return "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=" + azuriteKey + ";BlobEndpoint=" + ep + ";"
}

func azureContainer(t testing.TB, name string) *container.Client {
	c, err := container.NewClientFromConnectionString(azureConnString(t), name, nil)
	if err != nil {
		t.Fatalf("container.NewClientFromConnectionString(%s): %v", name, err)
	}
	return c
}

func newAzureContainer(t testing.TB) string {
	name := randomName("flightlog-test-")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := azureContainer(t, name).Create(ctx, nil); err != nil {
		t.Fatalf("create Azure container %s: %v", name, err)
	}
	return name
}

func openAzure(t testing.TB, name string) objstore.Store {
	b, err := azureblob.OpenBucket(context.Background(), azureContainer(t, name), nil)
	if err != nil {
		t.Fatalf("azureblob.OpenBucket(%s): %v", name, err)
	}
	t.Cleanup(func() { b.Close() })
	return gocloud.New(b, gocloud.WithName("azblob://"+name))
}

func azureHarness(t testing.TB) objstoretest.Harness {
	azureConnString(t) // skip early without the emulator
	return namedHarness(newAzureContainer, openAzure)
}

func TestConformanceAzure(t *testing.T) { objstoretest.Run(t, azureHarness(t)) }

func BenchmarkAzure(b *testing.B) { objstoretest.RunBenchmarks(b, azureHarness(b)) }

func BenchmarkMemblob(b *testing.B) { objstoretest.RunBenchmarks(b, memHarness()) }
