package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestTrimCLI: trim makes the records below SEQ unreadable to a later
// read (another process, as a service would be), a lower SEQ changes
// nothing, and a bad SEQ or unknown stream is refused.
func TestTrimCLI(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if code, _, errs := cli(t, "a\nb\nc\nd\n", "append", "--dir", dir, "--create", "s"); code != exitOK {
		t.Fatalf("append: exit %d %s", code, errs)
	}
	code, out, errs := cli(t, "", "trim", "s", "2", "--dir", dir)
	if code != exitOK || !strings.Contains(out, "first readable record is 2") {
		t.Fatalf("trim: exit %d, %q %s", code, out, errs)
	}
	if code, out, _ := cli(t, "", "read", "s", "--dir", dir); code != exitOK || out != "c\nd\n" {
		t.Fatalf("read after trim: exit %d, %q", code, out)
	}
	if code, out, _ := cli(t, "", "trim", "s", "1", "--dir", dir); code != exitOK || !strings.Contains(out, "first readable record is 2") {
		t.Fatalf("trim below the trim point: exit %d, %q", code, out)
	}
	if code, _, errs := cli(t, "", "trim", "s", "x", "--dir", dir); code != exitCannot || !strings.Contains(errs, "not a sequence number") {
		t.Fatalf("trim with a bad SEQ: exit %d %s", code, errs)
	}
	if code, _, errs := cli(t, "", "trim", "nosuch", "1", "--dir", dir); code != exitProblems || !strings.Contains(errs, "not found") {
		t.Fatalf("trim of an unknown stream: exit %d %s", code, errs)
	}
	if code, out, _ := cli(t, "", "trim", "--help"); code != exitOK || !strings.Contains(out, "below SEQ") {
		t.Fatalf("trim --help: exit %d %q", code, out)
	}
}

// TestFsckFirstReadableIsTheTrimPoint: a trim inside a ref keeps the ref
// (only refs wholly below the trim point are reclaimed), so fsck's first
// readable record is the trim point, not the first ref's start.
func TestFsckFirstReadableIsTheTrimPoint(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if code, _, errs := cli(t, "a\nb\n", "append", "--dir", dir, "--create", "s"); code != exitOK {
		t.Fatalf("append: exit %d %s", code, errs)
	}
	if code, _, errs := cli(t, "c\nd\ne\n", "append", "--dir", dir, "s"); code != exitOK {
		t.Fatalf("append: exit %d %s", code, errs)
	}
	if code, out, errs := cli(t, "", "trim", "s", "3", "--dir", dir); code != exitOK || !strings.Contains(out, "first readable record is 3") {
		t.Fatalf("trim: exit %d, %q %s", code, out, errs)
	}
	if code, out, _ := cli(t, "", "read", "s", "--dir", dir); code != exitOK || out != "d\ne\n" {
		t.Fatalf("read after trim: exit %d, %q", code, out)
	}
	code, out, errs := cli(t, "", "fsck", "--dir", dir)
	if code != exitOK || !strings.Contains(out, `stream "s": first readable record is 3 `) {
		t.Fatalf("fsck after a trim inside a ref: exit %d\n%s%s", code, out, errs)
	}
}
