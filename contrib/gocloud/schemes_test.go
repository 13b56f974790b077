package gocloud_test

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"

	"github.com/flightlog/flightlog/contrib/gocloud"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/open"
)

// TestSchemesOpenURL: open.URL opens a star whose Standard bucket is a
// gs:// URL and whose Express buckets are azblob:// URLs, through
// gocloud.Schemes, on fake-gcs-server and Azurite (credentials from the
// environment, as a deployment gives them); a record of each class reads
// back, and a bucket that does not exist is refused with the URL named.
func TestSchemesOpenURL(t *testing.T) {
	gcs := gcsClient(t)
	azureConnString(t) // skip early without Azurite
	ep, err := url.Parse(emulator(t, "FLIGHTLOG_GCS_ENDPOINT", "fake-gcs-server"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("STORAGE_EMULATOR_HOST", ep.Host)
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", azureConnString(t))
	// go-cloud reaches an emulator over plain http only when told so.
	az, err := url.Parse(emulator(t, "FLIGHTLOG_AZURE_ENDPOINT", "Azurite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("AZURE_STORAGE_IS_LOCAL_EMULATOR", "true")
	t.Setenv("AZURE_STORAGE_DOMAIN", az.Host)
	std := newGCSBucket(t, gcs)
	exp := []string{newAzureContainer(t), newAzureContainer(t), newAzureContainer(t)}
	spec := open.Spec{
		Meta:     "mem://",
		Standard: []string{"gs://" + std},
		Express:  []string{"azblob://" + exp[0], "azblob://" + exp[1], "azblob://" + exp[2]},
		Schemes:  gocloud.Schemes(),
	}
	ctx := context.Background()
	cfg := loglet.DefaultConfig()
	cfg.SettleInterval = -1
	cfg.Logger = slog.New(slog.DiscardHandler)
	s, err := open.URL(ctx, cfg, spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []loglet.Class{loglet.Standard, loglet.Express} {
		name := "s-" + c.String()
		if _, err := s.CreateStream(ctx, name, loglet.StreamOptions{Class: c}); err != nil {
			t.Fatal(err)
		}
		ack, err := s.Append(ctx, name, loglet.Batch{Records: []loglet.Record{{Body: []byte(name)}}})
		if err != nil {
			t.Fatalf("append %s: %v", name, err)
		}
		res, err := s.Read(ctx, name, loglet.ReadQuery{Start: loglet.AtSeq(ack.Start)})
		if err != nil || len(res.Records) != 1 || string(res.Records[0].Body) != name {
			t.Fatalf("read %s: %v %v", name, res.Records, err)
		}
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	spec.Standard = []string{"gs://no-such-bucket-" + std}
	spec.Express = nil
	if _, err := open.URL(ctx, cfg, spec); err == nil || !strings.Contains(err.Error(), "Standard[0]") || !strings.Contains(err.Error(), "no-such-bucket-") {
		t.Fatalf("a missing bucket opened, or the error does not name it: %v", err)
	}
}
