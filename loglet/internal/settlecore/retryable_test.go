package settlecore

import (
	"errors"
	"fmt"
	"testing"

	metastore "github.com/flightlog/flightlog/metastore/metaval"
	objstore "github.com/flightlog/flightlog/objstore/objval"
)

func TestRetryable(t *testing.T) {
	refused := fmt.Errorf("put: %w", objstore.ErrPermanent)
	down := fmt.Errorf("put: %w", objstore.ErrUnavailable)
	conflict := fmt.Errorf("commit: %w", metastore.ErrConflict)
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"permanent", fmt.Errorf("stream %q: %w", "a", refused), false},
		{"transient", fmt.Errorf("stream %q: %w", "a", down), true},
		{"conflict", fmt.Errorf("stream %q: %w", "a", conflict), true},
		{"all permanent", errors.Join(fmt.Errorf("stream a: %w", refused), fmt.Errorf("stream b: %w", refused), nil), false},
		{"one transient among permanent", errors.Join(fmt.Errorf("stream a: %w", refused), fmt.Errorf("stream b: %w", down)), true},
		{"a conflict under a wrap of a join", fmt.Errorf("render: %w", errors.Join(refused, conflict)), true},
		{"not found", fmt.Errorf("copy 0: %w", objstore.ErrNotFound), false},
	} {
		if got := retryable(c.err); got != c.want {
			t.Errorf("%s: retryable(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
