package main

import (
	"strings"
	"testing"
)

// TestUnknownStreamExitCode: a stream that does not exist is one exit code
// in every command that names one: 1, "the operation failed" (the command
// ran; what it was asked to work on is not there), as delete and trim
// always said, never 2, which is for a command that could not run (bad
// flags, a backend unreachable or in use).
func TestUnknownStreamExitCode(t *testing.T) {
	dir := seeded(t)
	for _, args := range [][]string{
		{"read", "nosuch"},
		{"tail", "nosuch"},
		{"append", "nosuch"},
		{"delete", "nosuch"},
		{"trim", "nosuch", "1"},
		{"config", "nosuch"},
	} {
		code, _, errs := cli(t, "x\n", append(args, "--dir", dir)...)
		if code != exitProblems || !strings.Contains(errs, "not found") {
			t.Errorf("%s of an unknown stream: exit %d, want %d; stderr:\n%s", args[0], code, exitProblems, errs)
		}
	}
	// The stream exists after all: the same commands succeed (tail aside:
	// it follows until interrupted).
	if code, out, errs := cli(t, "", "read", "orders", "--dir", dir); code != exitOK || out != "one\ntwo\nthree\n" {
		t.Errorf("read of a stream that exists: exit %d, %q %s", code, out, errs)
	}
}
