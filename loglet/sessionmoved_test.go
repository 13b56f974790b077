package loglet

import (
	"context"
	"errors"
	"testing"
)

// TestReadSessionEndsWhenTheStreamMovesStars: a leader's read session
// follows the incarnation it opened on; once the stream is deleted and
// created again on another star, the session ends with ErrStreamNotFound,
// as for a re-creation on this star (not with the *NotLeaderError that
// looking the name up now gives).
func TestReadSessionEndsWhenTheStreamMovesStars(t *testing.T) {
	r := newRig(t, Standard, 1, 11, nil)
	ctx := context.Background()
	if _, err := r.star.CreateStream(ctx, "orders", StreamOptions{Class: Standard}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.star.Append(ctx, "orders", Batch{Records: []Record{{Body: []byte("old")}}}); err != nil {
		t.Fatal(err)
	}
	sess, err := r.star.OpenReadSession(ctx, "orders", ReadQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if recs, err := sess.Recv(ctx); err != nil || len(recs) != 1 {
		t.Fatalf("first Recv = %v, %v; want the old record", recs, err)
	}
	if err := r.star.DeleteStream(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.star.CreateStream(ctx, "orders", StreamOptions{Class: Standard, Star: "elsewhere"}); err != nil {
		t.Fatal(err)
	}
	recs, err := sess.Recv(ctx)
	if !errors.Is(err, ErrStreamNotFound) {
		t.Fatalf("Recv after the stream moved stars = %v, %v; want ErrStreamNotFound", recs, err)
	}
	var nl *NotLeaderError
	if errors.As(err, &nl) {
		t.Fatalf("Recv after the stream moved stars = %v; want ErrStreamNotFound, not a *NotLeaderError", err)
	}
}
