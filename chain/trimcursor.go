package chain

import (
	"context"
	"errors"
	"fmt"

	"github.com/flightlog/flightlog/metastore"
)

// ReadTrimCursor returns a chain's trim cursor and its version; a chain
// with none (nothing settled yet) reads as both positions at Start with
// metastore.NoVersion.
func ReadTrimCursor(ctx context.Context, ms metastore.Store, star string, c Class) (TrimCursor, metastore.Version, error) {
	it, err := ms.Get(ctx, TrimKey(star, c))
	if errors.Is(err, metastore.ErrNotFound) {
		return TrimCursor{At: Start(), Deleted: Start()}, metastore.NoVersion, nil
	}
	if err != nil {
		return TrimCursor{}, "", fmt.Errorf("chain: read the trim cursor of %s/%s: %w", star, c, err)
	}
	t, err := DecodeTrimCursor(it.Value)
	if err != nil {
		return TrimCursor{}, "", fmt.Errorf("chain: the trim cursor of %s/%s: %w", star, c, err)
	}
	return t, it.Version, nil
}
