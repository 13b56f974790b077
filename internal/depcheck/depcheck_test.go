package depcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/flightlog/flightlog"

// knownCores are the cores that must be found: a rename or a move that
// hid one from the check fails the test rather than skipping it.
var knownCores = []string{"chaincore", "settlecore", "catalogcore", "starcore"}

// deniedDep reports why a core may not depend on the package at path, or
// "" when it may.
func deniedDep(path string) string {
	switch path {
	case module + "/metastore", module + "/objstore", module + "/chain", module + "/absorb", module + "/settle":
		return "a store or I/O package (a core imports its pure half, which it re-exports)"
	case module + "/loglet", module + "/loglet/internal/work":
		return "the runtime that executes a core"
	case "os/exec", "os/signal", "database/sql", "plugin":
		return "a process, signal, database or plugin package of the standard library"
	}
	switch {
	case path == "net" || strings.HasPrefix(path, "net/"):
		return "a network package"
	case strings.HasPrefix(path, module+"/metastore/") && path != module+"/metastore/metaval",
		strings.HasPrefix(path, module+"/objstore/") && path != module+"/objstore/objval":
		return "a store backend"
	case strings.HasPrefix(path, "go.etcd.io/"), strings.HasPrefix(path, "github.com/aws/"), strings.HasPrefix(path, "google.golang.org/grpc"):
		return "a store client"
	}
	return ""
}

// deniedImport reports why a core may not import the package at path
// directly, or "" when it may.
func deniedImport(path string) string {
	switch path {
	case "os":
		return "the operating system (only fmt's dependency on it is allowed)"
	case "sync", "sync/atomic":
		return "a lock or an atomic: a core is driven by one caller"
	case "context":
		return "a context: a core never waits"
	case "math/rand", "math/rand/v2", "crypto/rand":
		return "randomness: a core's decisions replay exactly"
	}
	return deniedDep(path)
}

// pkg is what go list says of one package.
type pkg struct {
	ImportPath string
	Name       string
	Imports    []string
	Deps       []string
}

// goList runs go list -json on the patterns and decodes its packages.
func goList(t *testing.T, patterns ...string) []pkg {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("depcheck: the go command is needed to list the cores' dependencies: %v", err)
	}
	cmd := exec.Command(gobin, append([]string{"list", "-json=ImportPath,Name,Imports,Deps"}, patterns...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("depcheck: go list %v: %v\n%s", patterns, err, stderr.Bytes())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("depcheck: decode go list's output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// violations returns one line per dependency or direct import of p that
// the rules refuse.
func violations(p pkg) []string {
	var out []string
	for _, d := range p.Deps {
		if why := deniedDep(d); why != "" {
			out = append(out, p.ImportPath+" depends on "+d+": "+why)
		}
	}
	for _, d := range p.Imports {
		if why := deniedImport(d); why != "" {
			out = append(out, p.ImportPath+" imports "+d+": "+why)
		}
	}
	return out
}

// TestCoresDoNoIO: no core depends on a package that does I/O or holds a
// store client, and none imports os, a lock, a context or randomness.
func TestCoresDoNoIO(t *testing.T) {
	var cores []pkg
	for _, p := range goList(t, module+"/loglet/internal/...") {
		if strings.HasSuffix(p.Name, "core") {
			cores = append(cores, p)
		}
	}
	for _, name := range knownCores {
		if !slices.ContainsFunc(cores, func(p pkg) bool { return p.Name == name }) {
			t.Errorf("core %s not found under loglet/internal", name)
		}
	}
	for _, p := range cores {
		for _, v := range violations(p) {
			t.Error(v)
		}
	}
	if t.Failed() {
		t.Log("go list -deps <core> shows every dependency; go list -deps -json shows which package imports which")
	}
}

// TestRulesRefuse: the rules refuse what they are meant to, so that
// TestCoresDoNoIO passing means something; and they let through what the
// cores rightly use.
func TestRulesRefuse(t *testing.T) {
	bad := pkg{
		ImportPath: module + "/loglet/internal/xcore",
		Imports:    []string{"fmt", "os", "sync", "context", "math/rand/v2", module + "/chain"},
		Deps: []string{"fmt", "os", "sync", "net", "net/http", "os/exec", "database/sql",
			module + "/metastore", module + "/metastore/bbolt", module + "/objstore", module + "/objstore/s3",
			module + "/chain", module + "/absorb", module + "/settle", module + "/loglet/internal/work",
			"go.etcd.io/bbolt", "github.com/aws/aws-sdk-go-v2/service/s3", "google.golang.org/grpc"},
	}
	got := violations(bad)
	for _, want := range []string{
		"imports os:", "imports sync:", "imports context:", "imports math/rand/v2:", "imports " + module + "/chain:",
		"depends on net:", "depends on net/http:", "depends on os/exec:", "depends on database/sql:",
		"depends on " + module + "/metastore:", "depends on " + module + "/metastore/bbolt:",
		"depends on " + module + "/objstore:", "depends on " + module + "/objstore/s3:",
		"depends on " + module + "/chain:", "depends on " + module + "/absorb:", "depends on " + module + "/settle:",
		"depends on " + module + "/loglet/internal/work:",
		"depends on go.etcd.io/bbolt:", "depends on github.com/aws/aws-sdk-go-v2/service/s3:", "depends on google.golang.org/grpc:",
	} {
		if !slices.ContainsFunc(got, func(v string) bool { return strings.Contains(v, " "+want) }) {
			t.Errorf("not refused: %s", want)
		}
	}
	if n := len(got); n != 20 {
		t.Errorf("%d refusals, want 20 (one per bad import or dependency):\n%s", n, strings.Join(got, "\n"))
	}
	good := pkg{
		ImportPath: module + "/loglet/internal/xcore",
		Imports:    []string{"errors", "fmt", "slices", "time", module + "/chain/chainval", module + "/metastore/metaval"},
		Deps: []string{"errors", "fmt", "os", "sync", "slices", "time", module + "/chain/chainval", module + "/metastore/metaval",
			module + "/objstore/objval", module + "/absorb/absorbval", module + "/settle/settleval", module + "/envelope"},
	}
	if v := violations(good); len(v) != 0 {
		t.Errorf("refused what a core may use:\n%s", strings.Join(v, "\n"))
	}
}
