package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flightlog/flightlog/loglet/groups"
	"github.com/flightlog/flightlog/metastore/bbolt"
)

// groups lists each group's offset and lag on a stream; --reset-to moves
// an offset and --delete removes it; none of it leads the star.
func TestGroupsCLI(t *testing.T) {
	ctx := context.Background()
	dir := seeded(t) // orders: 3 records in one batch, so one frame run (35 bytes decoded)
	meta, err := bbolt.Open(filepath.Join(dir, metaFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	o := groups.NewOffsets(meta, "test")
	for group, next := range map[string]uint64{"billing": 1, "audit": 3} {
		off, err := o.Get(ctx, group, "orders")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := o.Commit(ctx, off, next); err != nil {
			t.Fatal(err)
		}
	}
	meta.Close()

	rows := func(args ...string) []string {
		t.Helper()
		code, out, errs := cli(t, "", append([]string{"groups", "orders", "--dir", dir}, args...)...)
		if code != exitOK {
			t.Fatalf("groups %v: exit %d %s", args, code, errs)
		}
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			got = append(got, strings.Join(strings.Fields(line), " "))
		}
		return got
	}
	if got, want := strings.Join(rows(), "|"), "GROUP NEXT TAIL TRIM LAG BYTES|audit 3 3 0 0 0|billing 1 3 0 2 35"; got != want {
		t.Fatalf("groups orders:\n%s\nwant\n%s", got, want)
	}
	if got := rows("--group", "audit", "--reset-to", "0"); got[0] != "audit on orders: offset moved from 3 to 0" {
		t.Fatalf("--reset-to: %q", got)
	}
	if got := rows("--group", "billing", "--delete"); got[0] != "billing on orders: offset deleted (was 1)" {
		t.Fatalf("--delete: %q", got)
	}
	if got, want := strings.Join(rows(), "|"), "GROUP NEXT TAIL TRIM LAG BYTES|audit 0 3 0 3 35"; got != want {
		t.Fatalf("groups orders after the reset and the delete:\n%s\nwant\n%s", got, want)
	}

	for _, tc := range []struct {
		args []string
		code int
		errs string
	}{
		{[]string{"groups", "nosuch"}, exitProblems, "not found"},
		{[]string{"groups", "orders", "--group", "audit"}, exitCannot, "--group without"},
		{[]string{"groups", "orders", "--reset-to", "1"}, exitCannot, "need --group"},
		{[]string{"groups", "orders", "--group", "audit", "--reset-to", "x"}, exitCannot, "want a sequence number"},
		{[]string{"groups", "orders", "--group", ".bad", "--delete"}, exitCannot, "invalid consumer group"},
	} {
		code, _, errs := cli(t, "", append(tc.args, "--dir", dir)...)
		if code != tc.code || !strings.Contains(errs, tc.errs) {
			t.Errorf("%v: exit %d %q; want exit %d and %q", tc.args, code, errs, tc.code, tc.errs)
		}
	}
}
