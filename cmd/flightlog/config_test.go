package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestCreateAndConfigRetention: create takes a retention; config with no
// flags prints the options, and with a flag changes that one only (0 turns
// it off); bad values and an unknown stream are refused.
func TestCreateAndConfigRetention(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	code, out, errs := cli(t, "", "create", "s", "--retention-age", "1h", "--retention-bytes", "1000", "--dir", dir)
	if code != exitOK || !strings.Contains(out, "retention age 1h0m0s, bytes 1000") {
		t.Fatalf("create with retention: exit %d, %q %s", code, out, errs)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "s: options (class standard, star default, incarnation "},
		{nil, "retention age 1h0m0s, bytes 1000)"},
		{[]string{"--retention-bytes", "0"}, "s: configured "},
		{nil, "retention age 1h0m0s, bytes off)"},
		{[]string{"--retention-age", "30m", "--retention-bytes", "5"}, "retention age 30m0s, bytes 5)"},
		{[]string{"--retention-age", "0"}, "retention age off, bytes 5)"},
		{[]string{"--retention-bytes", "0"}, "retention off)"},
	} {
		code, out, errs := cli(t, "", append([]string{"config", "s", "--dir", dir}, c.args...)...)
		if code != exitOK || !strings.Contains(out, c.want) {
			t.Fatalf("config %v: exit %d, %q %s; want %q", c.args, code, out, errs, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"config", "s", "--retention-age", "-1s"}, exitCannot, "want 0 (off) or more"},
		{[]string{"config", "s", "--retention-bytes", "-5"}, exitCannot, "want 0 (off) or more"},
		{[]string{"config", "s", "--retention-age", "soon"}, exitCannot, "invalid value"},
		{[]string{"config", "nosuch"}, exitProblems, "not found"},
		{[]string{"create", "t", "--retention-bytes", "-1"}, exitCannot, "negative retention"},
	} {
		code, _, errs := cli(t, "", append(c.args, "--dir", dir)...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d %s; want exit %d and %q", c.args, code, errs, c.code, c.want)
		}
	}
	if code, out, _ := cli(t, "", "config", "--help"); code != exitOK || !strings.Contains(out, "leads nothing") {
		t.Fatalf("config --help: exit %d %q", code, out)
	}
}
