package work

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/flightlog/flightlog/loglet/internal/catalogcore"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
	"github.com/flightlog/flightlog/loglet/internal/settlecore"
	"github.com/flightlog/flightlog/loglet/internal/starcore"
)

// coreRequests lists every request type of the cores, by package
// directory (relative to loglet/internal). TestRequestsListed keeps it
// complete: a request type declared in a core and missing here fails it.
var coreRequests = map[string][]any{
	"chaincore": {
		chaincore.Render{}, chaincore.PutCopy{}, chaincore.ReadEpoch{}, chaincore.ReadTrimCursor{},
		chaincore.MintFirst{}, chaincore.CreateCheckpoint{}, chaincore.Seal{}, chaincore.SealMint{}, chaincore.Fence{},
		chaincore.Mint{}, chaincore.Probe{}, chaincore.ReadCheckpoint{}, chaincore.ReadTails{},
		chaincore.Walk{}, chaincore.PutSnapshot{}, chaincore.CommitRound{}, chaincore.DropSnapshots{},
		chaincore.SealEpoch{}, chaincore.Settle{}, chaincore.MarkRoundPending{}, chaincore.CommitRefs{}, chaincore.AdvanceRound{},
	},
	"settlecore": {
		settlecore.ReadTrim{}, settlecore.ReadCheckpoint{}, settlecore.Commit{}, settlecore.DeleteSlots{},
		settlecore.ScanMarkers{}, settlecore.GetRef{}, settlecore.DeleteObject{}, settlecore.FenceEpoch{},
		settlecore.ReadSlots{}, settlecore.ScanRefs{}, settlecore.CheckLive{}, settlecore.GetRange{},
		settlecore.PutObject{}, settlecore.GetObject{}, settlecore.Parallel{}, settlecore.Wait{}, settlecore.HoldMemory{},
	},
	"catalogcore": {
		catalogcore.LookupCache{}, catalogcore.ReadRecord{}, catalogcore.CacheRecord{}, catalogcore.MintRecord{},
		catalogcore.CommitCreate{}, catalogcore.CommitDelete{}, catalogcore.ForgetName{}, catalogcore.FinishDeletesOf{},
		catalogcore.Retire{}, catalogcore.AwaitReleased{}, catalogcore.CheckDrained{}, catalogcore.ReadMarker{},
		catalogcore.Reclaim{}, catalogcore.DeleteMarker{}, catalogcore.PutTrim{}, catalogcore.PutConfig{}, catalogcore.CommitOffsetReq{},
		catalogcore.ReadOffset{}, catalogcore.Warn{},
	},
	"starcore": {
		starcore.ReadEpoch{}, starcore.ReadCheckpoint{}, starcore.StartChain{}, starcore.Abandon{},
		starcore.CloseChain{}, starcore.ReleaseHost{},
	},
}

// requestMarkers are the methods that make a type a core's request.
var requestMarkers = []string{"isRequest", "request"}

// TestRequestsCarryNoCoreState fails if a request of a core carries
// anything through which a worker could reach state the core owns or
// change it under the core: a pointer, a map, a func, a channel or an
// interface, at any depth (a slice of pointers included). A request
// carries values; slices of values are allowed (the worker reads them,
// and byte slices are payloads, immutable once admitted).
func TestRequestsCarryNoCoreState(t *testing.T) {
	for pkg, reqs := range coreRequests {
		for _, r := range reqs {
			typ := reflect.TypeOf(r)
			if bad := sharedState(typ); len(bad) > 0 {
				t.Errorf("%s.%s carries core state: %s", pkg, typ.Name(), strings.Join(bad, "; "))
			}
		}
	}
}

// TestRequestCheckFindsAPlantedPointer shows the check can fail: requests
// like the old Render (a slice of the core's batches) and others with a
// map, a func or an error inside are each found.
func TestRequestCheckFindsAPlantedPointer(t *testing.T) {
	type inner struct{ M map[string]int }
	planted := []struct {
		v    any
		want string
	}{
		{struct{ Batches []*chaincore.Batch }{}, "Batches[]: *chaincore.Batch"},
		{struct{ B *chaincore.Batch }{}, "B: *chaincore.Batch"},
		{struct{ In []inner }{}, "In[].M: map[string]int"},
		{struct{ F func() }{}, "F: func()"},
		{struct{ C chan int }{}, "C: chan int"},
		{struct{ X any }{}, "X: interface {}"},
		{struct {
			R struct{ Pending *chaincore.Batch }
		}{}, "R.Pending: *chaincore.Batch"},
		{struct{ A [2]*int }{}, "A[]: *int"},
	}
	for _, p := range planted {
		bad := sharedState(reflect.TypeOf(p.v))
		if !slices.Contains(bad, p.want) {
			t.Errorf("%T: found %q, want %q among them", p.v, bad, p.want)
		}
	}
	if bad := sharedState(reflect.TypeOf(chaincore.Render{})); len(bad) != 0 {
		t.Errorf("Render: %q, want nothing", bad)
	}
}

// valueTypes are types allowed whole though they hold a pointer or are an
// interface: values by contract.
var valueTypes = map[reflect.Type]bool{
	reflect.TypeOf(time.Time{}):          true, // its *Location is immutable
	reflect.TypeOf((*error)(nil)).Elem(): true, // an error is immutable once made
	// A frozen view of a chain's tails: no node reachable from it is ever
	// written again (the core's next write copies the node; see
	// chaincore's tailMap, whose test checks it).
	reflect.TypeOf(chaincore.TailsView{}): true,
}

// valueFields are fields allowed though their type is a pointer or an
// interface, each for the reason given: none of them reaches state the
// core owns or changes. The field's struct is named by package path and
// type name.
var valueFields = map[string]string{
	// Optional values of a record: whoever changes one assigns a new
	// pointer, nothing writes through it (the record is encoded as is).
	"github.com/flightlog/flightlog/absorb/absorbval.Checkpoint.Pending": "an optional value",
	"github.com/flightlog/flightlog/chain/chainval.EpochRecord.Seal":     "an optional value",
	// The shell's own copy of a stream record, which the core never reads.
	"github.com/flightlog/flightlog/loglet/internal/catalogcore.Record.Data": "the shell's, opaque to the core",
}

// sharedState lists the paths in typ that can share state: pointers,
// maps, funcs, channels, interfaces.
func sharedState(typ reflect.Type) []string {
	var out []string
	var walk func(t reflect.Type, path string, seen map[reflect.Type]bool)
	walk = func(t reflect.Type, path string, seen map[reflect.Type]bool) {
		if valueTypes[t] || seen[t] {
			return
		}
		switch t.Kind() {
		case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Interface, reflect.UnsafePointer:
			out = append(out, path+": "+t.String())
		case reflect.Slice, reflect.Array:
			walk(t.Elem(), path+"[]", seen)
		case reflect.Struct:
			seen = maps1(seen, t)
			for i := 0; i < t.NumField(); i++ {
				f := t.Field(i)
				if _, ok := valueFields[t.PkgPath()+"."+t.Name()+"."+f.Name]; ok {
					continue
				}
				p := f.Name
				if path != "" {
					p = path + "." + f.Name
				}
				walk(f.Type, p, seen)
			}
		}
	}
	walk(typ, "", map[reflect.Type]bool{})
	return out
}

func maps1(m map[reflect.Type]bool, t reflect.Type) map[reflect.Type]bool {
	out := make(map[reflect.Type]bool, len(m)+1)
	for k := range m {
		out[k] = true
	}
	out[t] = true
	return out
}

// TestRequestsListed checks coreRequests names every type each core
// declares a request marker for, read from the cores' sources, so a new
// request cannot escape TestRequestsCarryNoCoreState.
func TestRequestsListed(t *testing.T) {
	for pkg, reqs := range coreRequests {
		var listed []string
		for _, r := range reqs {
			listed = append(listed, reflect.TypeOf(r).Name())
		}
		declared := requestTypes(t, filepath.Join("..", pkg))
		sort.Strings(listed)
		if !slices.Equal(listed, declared) {
			t.Errorf("%s: listed %v, the package declares %v", pkg, listed, declared)
		}
	}
}

// requestTypes returns the receiver types of the request markers declared
// in dir's non-test files, sorted.
func requestTypes(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Recv == nil || !slices.Contains(requestMarkers, fd.Name.Name) {
					continue
				}
				if id, ok := fd.Recv.List[0].Type.(*ast.Ident); ok {
					out = append(out, id.Name)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}
