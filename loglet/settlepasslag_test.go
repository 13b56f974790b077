package loglet

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestSettlePassLagIsRecorded: once every round is settled, each chain's
// Settle.PassLag holds one reading per pass that settled a round (at least
// one, at most Passes), none of them shorter than nothing or longer than
// the bubble's run.
func TestSettlePassLagIsRecorded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSettleRig()
		ctx := context.Background()
		began := time.Now()
		s, err := Open(ctx, r.cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		if _, err := s.CreateStream(ctx, "e", StreamOptions{Class: Express}); err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			for _, st := range []string{"a", "e"} {
				if _, err := s.Append(ctx, st, Batch{Records: []Record{{Body: []byte{byte(i)}}}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		waitSettled(t, s)
		ran := time.Since(began)
		st := s.Stats()
		for class, cs := range map[string]*ClassStats{"standard": st.Standard, "express": st.Express} {
			h := cs.Settle.PassLag
			if h.Count == 0 || h.Count > cs.Settle.Passes {
				t.Errorf("%s: PassLag has %d readings, want 1..%d (passes)", class, h.Count, cs.Settle.Passes)
			}
			if max := time.Duration(h.Max); max < 0 || max > ran {
				t.Errorf("%s: PassLag max %v, want 0..%v", class, max, ran)
			}
		}
	})
}
