package loglet

import (
	"sync"
	"testing"
)

// TestSlabCarvesDisjoint: producers carving from one slab at once never
// get overlapping bytes, whatever the sizes and however chunks fill
// (issue 26: carving takes no lock).
func TestSlabCarvesDisjoint(t *testing.T) {
	var s slab
	const producers, each = 8, 2000
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				n := 1 + (p*7919+i*104729)%(slabChunk/8) // up to the largest carved size
				if i%5 == 0 {
					n = slabChunk/8 + 1 // its own make
				}
				b := s.alloc(n)
				if len(b) != 0 || cap(b) != n {
					t.Errorf("producer %d: alloc(%d) = len %d cap %d, want len 0 cap %d", p, n, len(b), cap(b), n)
					return
				}
				b = b[:n]
				for j := range b {
					b[j] = byte(p)
				}
				for j := range b {
					if b[j] != byte(p) {
						t.Errorf("producer %d: byte %d of its %d-byte carve was overwritten with %d", p, j, n, b[j])
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}
