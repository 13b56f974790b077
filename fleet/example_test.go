package fleet_test

import (
	"fmt"

	"github.com/flightlog/flightlog/fleet"
)

// Place spreads the stars over the members by weight; when a member joins,
// only the stars it wins move, all of them to it.
func ExamplePlace() {
	var stars []string
	for i := range 3000 {
		stars = append(stars, fmt.Sprintf("s%d", i))
	}
	members := []fleet.Member{{Name: "a"}, {Name: "b", Weight: 2}}
	count := func(p map[string]string) map[string]int {
		n := map[string]int{}
		for _, m := range p {
			n[m]++
		}
		return n
	}
	before := fleet.Place(stars, members)
	after := fleet.Place(stars, append(members, fleet.Member{Name: "c"}))
	moved, toC := 0, 0
	for _, s := range stars {
		if before[s] != after[s] {
			moved++
			if after[s] == "c" {
				toC++
			}
		}
	}
	fmt.Println("before:", count(before))
	fmt.Println("after: ", count(after))
	fmt.Printf("moved %d, to c %d\n", moved, toC)
	// Output:
	// before: map[a:1029 b:1971]
	// after:  map[a:748 b:1479 c:773]
	// moved 773, to c 773
}
