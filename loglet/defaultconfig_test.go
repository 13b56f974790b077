package loglet

import (
	"reflect"
	"testing"
	"time"

	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// Every field of DefaultConfig holds its default, except those its doc
// lists as derived at Open (or whose default is the zero value). A field
// added later with a default DefaultConfig does not fill fails here until
// it is filled or listed (and documented).
func TestDefaultConfigFillsEveryDefault(t *testing.T) {
	zeroOK := map[string]bool{
		// set by the caller
		"Star": true, "Meta": true, "Stores": true, "Closers": true,
		// derived at Open, documented at DefaultConfig
		"Owner": true, "Stars": true, "Logger": true,
		"W": true, "BucketNames": true, "StragglerMiB": true, "ChainBacklogMiB": true,
		// the zero value is the default
		"CreateOnAppend": true, "DefaultClass": true, "RefuseLiveOwner": true, "ExclusiveOpen": true, "doomedGrace": true,
		"UncappedTimestamps": true, "FenceOverride": true, "Retry": true, "CoarseWakeups": true,
		"ReadAhead": true, // 0: chain's read-ahead defaults (its doc)
	}
	c := DefaultConfig()
	check := func(where string, v reflect.Value) {
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if f.Type == reflect.TypeFor[ClassConfig]() {
				continue
			}
			if zero := v.Field(i).IsZero(); zero != zeroOK[f.Name] {
				t.Errorf("DefaultConfig().%s%s = %v: zero %v, want zero %v", where, f.Name, v.Field(i), zero, zeroOK[f.Name])
			}
		}
	}
	check("", reflect.ValueOf(c))
	check("Standard.", reflect.ValueOf(c.Standard))
	check("Express.", reflect.ValueOf(c.Express))
	if c.Standard.MemoryBufferMiB != DefaultStandardMemoryBufferMiB || c.Express.FlushDeadline != DefaultExpressFlushDeadline {
		t.Errorf("per-class defaults crossed: Standard.MemoryBufferMiB=%d, Express.FlushDeadline=%v", c.Standard.MemoryBufferMiB, c.Express.FlushDeadline)
	}
}

// Opening DefaultConfig behaves as opening the zero Config: after Open's
// defaults, the two are the same configuration.
func TestDefaultConfigOpensAsZeroConfig(t *testing.T) {
	meta := metastore.NewMem()
	std := []objstore.Store{objstore.NewMem()}
	exp := []objstore.Store{objstore.NewMem(), objstore.NewMem(), objstore.NewMem()}
	fill := func(c Config) Config {
		c.Star, c.Owner, c.Meta = "s", "host/1/x", meta
		c.Standard.Stores, c.Express.Stores = std, exp
		return c
	}
	got, want := fill(DefaultConfig()), fill(Config{})
	if err := got.Validate(); err != nil {
		t.Fatalf("DefaultConfig with buckets does not validate: %v", err)
	}
	got.applyDefaults()
	want.applyDefaults()
	// Two defaults are applied where they are used, not by applyDefaults.
	if cacheBytes(got.ReadCacheMiB) != cacheBytes(want.ReadCacheMiB) {
		t.Errorf("read cache: %d bytes, zero Config's %d", cacheBytes(got.ReadCacheMiB), cacheBytes(want.ReadCacheMiB))
	}
	if want.PreflightTimeout == 0 && got.PreflightTimeout != DefaultPreflightTimeout {
		t.Errorf("PreflightTimeout %v, want the default %v", got.PreflightTimeout, DefaultPreflightTimeout)
	}
	want.ReadCacheMiB, want.PreflightTimeout = got.ReadCacheMiB, got.PreflightTimeout
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DefaultConfig after Open's defaults differs from the zero Config's:\n got %+v\nwant %+v", got, want)
	}
}

// Settlement is on by default (issue 24): the zero Config and DefaultConfig
// settle every DefaultSettleInterval; a negative interval keeps it off.
func TestSettlementOnByDefault(t *testing.T) {
	std := []objstore.Store{objstore.NewMem()}
	for _, tc := range []struct {
		name string
		in   time.Duration
		want time.Duration // the core's pacing; 0: off
	}{
		{"zero", 0, DefaultSettleInterval},
		{"set", 3 * time.Second, 3 * time.Second},
		{"negative", -1, 0},
	} {
		c := Config{SettleInterval: tc.in}
		c.Standard.Stores = std
		c.applyDefaults()
		if got := (&Star{cfg: c}).settleInterval(); got != tc.want {
			t.Errorf("%s: SettleInterval %v paces the core at %v, want %v", tc.name, tc.in, got, tc.want)
		}
	}
	if got := DefaultConfig().SettleInterval; got != DefaultSettleInterval {
		t.Errorf("DefaultConfig().SettleInterval = %v, want %v", got, DefaultSettleInterval)
	}
}
