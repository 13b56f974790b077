package loglet

import (
	"context"
	"testing"

	"github.com/flightlog/flightlog/chain"
)

func TestTrimStreamLiveness(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, Standard, 1, 1, nil)
	s := r.star
	info, err := s.CreateStream(ctx, "live", StreamOptions{Class: Standard, Star: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	id := chain.StreamID(info.Name, info.Incarnation)
	if live, trim, err := s.streamLiveness(ctx, id); err != nil || !live || trim != 0 {
		t.Fatalf("fresh stream: live=%v trim=%d err=%v, want live, 0", live, trim, err)
	}
	if err := s.DeleteStream(ctx, "live"); err != nil {
		t.Fatal(err)
	}
	if live, _, err := s.streamLiveness(ctx, id); err != nil || live {
		t.Fatalf("deleted stream: live=%v err=%v, want not live", live, err)
	}
	info2, err := s.CreateStream(ctx, "live", StreamOptions{Class: Standard, Star: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if live, _, err := s.streamLiveness(ctx, id); err != nil || live {
		t.Fatalf("old incarnation after re-create: live=%v err=%v, want not live", live, err)
	}
	if live, _, err := s.streamLiveness(ctx, chain.StreamID(info2.Name, info2.Incarnation)); err != nil || !live {
		t.Fatalf("new incarnation: live=%v err=%v, want live", live, err)
	}
	if live, _, err := s.streamLiveness(ctx, "never"); err != nil || live {
		t.Fatalf("unknown stream: live=%v err=%v", live, err)
	}
}
