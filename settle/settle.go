// Package settle holds what settlement (docs/design.md, "Settlement")
// shares with the executor of its passes and with the tools that check and
// repair a star: a chain's settle configuration (Config, Liveness), the
// pass's input and result, and the doomed-marker format under
// stars/<star>/<class>/doomed/ (MarkedObjects).
//
// A pass as a whole (read the trim cursor, delete what is behind it,
// reclaim doomed objects, re-derive a lost cut, read the slots, settle
// their streams into settled objects and repoint their refs, advance the
// cursor, delete) is decided by a core in the loglet's chain runtime and
// executed one I/O call at a time.
//
// Settlement's values and pure functions (Pass, Result, SlotsPass, Slot,
// Segments, Render, Marker and its keys, the sentinel errors) are declared
// in settle/settleval, which does no I/O, and re-exported here under the
// same names.
package settle

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// Liveness tells settle whether the stream with ID id still exists (its
// record names this incarnation) and below which sequence number its
// records are trimmed. Refs of a dead incarnation, and refs wholly below
// the trim point, are reclaimed instead of settled.
type Liveness func(ctx context.Context, id string) (live bool, trimSeq uint64, err error)

// Config is one chain's settle.
type Config struct {
	Meta    metastore.Store
	Star    string
	Class   chain.Class
	Owner   string
	Epoch   uint64          // the leader's epoch, for the Writer of settled refs
	Transit chain.BucketSet // the chain's bucket set
	Settled []objstore.Store
	// Codec compresses settled frames (0: DefaultCodec, S2: chosen by
	// benchmark so that reads from settled objects are as fast as from
	// transit; zstd stores fewer bytes).
	Codec       envelope.Codec
	TargetBytes int
	FrameBytes  int
	Liveness    Liveness // nil: every stream is live, none trimmed
	// DoomedGrace is how long a settled object merged into a larger one
	// is kept before it is deleted, so that a reader that resolved a ref
	// to it just before the merge still reads it (0: DefaultDoomedGrace;
	// negative: none; readers then re-resolve the moved ref).
	DoomedGrace time.Duration
	Logger      *slog.Logger
	// Now is the clock for DoomedGrace (default time.Now).
	Now func() time.Time
}

// DefaultDoomedGrace is Config.DoomedGrace's default.
const DefaultDoomedGrace = time.Minute

// WithDefaults returns c with every zero setting at its default.
func (c Config) WithDefaults() Config {
	c.defaults()
	return c
}

func (c *Config) defaults() {
	if c.Codec == 0 {
		c.Codec = DefaultCodec
	}
	if c.TargetBytes <= 0 {
		c.TargetBytes = DefaultTargetBytes
	}
	if c.FrameBytes <= 0 {
		c.FrameBytes = DefaultFrameBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.DoomedGrace == 0 {
		c.DoomedGrace = DefaultDoomedGrace
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// DeriveCutPatience bounds the fence that re-derives a cut recorded
// nowhere (deriveCuts): a slot no fence can decide (buckets refusing, an
// object no envelope parses) fails the pass after it, and the next pass
// tries again.
const DeriveCutPatience = time.Minute

// MarkedObjects returns the settled objects that a doomed or pending
// marker of any chain names (a chunk marker names many): a settle pass of that chain deletes each once
// it is due (unless, for a pending one, its ref points at it by then). An
// operator's tool reclaiming orphans leaves these to the passes. It scans
// the control keys of every star.
func MarkedObjects(ctx context.Context, ms metastore.Store) (map[string]bool, error) {
	out := map[string]bool{}
	after := ""
	for {
		items, err := ms.Scan(ctx, "stars/", after, 1000)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			if !strings.Contains(it.Key, "/doomed/") {
				continue
			}
			if d, err := DecodeMarker(it.Value); err == nil {
				for _, n := range d.Names() {
					out[n.Key] = true
				}
			}
		}
		if len(items) < 1000 {
			return out, nil
		}
		after = items[len(items)-1].Key
	}
}
