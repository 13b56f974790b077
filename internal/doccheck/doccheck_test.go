package doccheck

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// modulePath is the import path of the repository's root module; an import
// under it is a package of the repository, anything else is external.
const modulePath = "github.com/flightlog/flightlog"

// index is what the repository declares, by name only (never by package
// path), so that a package moving does not change what resolves.
type index struct {
	names    map[string]bool            // every declared name: top level, methods, fields, parameters, locals
	fields   map[string]bool            // names declared as struct fields
	used     map[string]bool            // names the code uses from other modules: selectors, keys, identifier-shaped string literals
	pkgs     map[string]map[string]bool // package name → its top-level declarations
	types    map[string]map[string]bool // type name → its methods and fields (any package)
	members  map[string]bool            // every type's methods and fields, by name (isMember builds it)
	embeds   map[string]map[string]bool // type name → the types it embeds
	external map[string]bool            // names of packages imported from outside the repository
	deps     map[string]bool            // lower-cased words of the module paths the repository requires
	// The repository's files: every path (directories end in "/"), the
	// top-level directories, and every file's base name.
	paths, topDirs, bases map[string]bool
}

// addPath records a file or directory (relative, slash-separated; a
// directory ends in "/") of the repository.
func (ix *index) addPath(rel string) {
	ix.paths[rel] = true
	if top, _, ok := strings.Cut(rel, "/"); ok {
		ix.topDirs[top] = true
	}
	if !strings.HasSuffix(rel, "/") {
		ix.bases[rel[strings.LastIndex(rel, "/")+1:]] = true
	}
}

var (
	// repoPath is a path a doc names: a run of path characters with a slash.
	repoPath = regexp.MustCompile(`\.?/?[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]*)+`)
	// goFileName is a Go file's name.
	goFileName = regexp.MustCompile(`(^|[^A-Za-z0-9_./-])([A-Za-z0-9_]+\.go)\b`)
)

// checkPaths reports the paths in text that name a file or directory of
// the repository that does not exist: a path whose first segment is a
// top-level directory of the repository (loglet/lane.go, ./internal/sim,
// chain/), and a Go file's base name (lane.go) that no directory holds.
// Key layouts (chains/<star>/...), URLs and module paths do not start with
// a top-level directory and are not checked.
func (ix *index) checkPaths(text string) []string {
	var bad []string
	for _, loc := range repoPath.FindAllStringIndex(text, -1) {
		p := text[loc[0]:loc[1]]
		if loc[0] > 0 && strings.ContainsAny(text[loc[0]-1:loc[0]], "<:*{$@") {
			continue // a key template, a URL, a module path
		}
		if loc[1] < len(text) && strings.ContainsAny(text[loc[1]:loc[1]+1], "<*{$@:") {
			continue
		}
		p = strings.TrimPrefix(p, "./")
		p = strings.TrimSuffix(strings.TrimRight(p, ".,;"), "/...")
		if i := strings.LastIndexByte(p, '.'); i > strings.LastIndexByte(p, '/') && i+1 < len(p) && p[i+1] >= 'A' && p[i+1] <= 'Z' {
			// An import path and a name: metastore/etcd.Config.
			dir := p[:i]
			if why := ix.resolve(dir[strings.LastIndexByte(dir, '/')+1:] + p[i:]); why != "" {
				bad = append(bad, p)
				continue
			}
			p = dir
		}
		top, _, _ := strings.Cut(p, "/")
		if !ix.topDirs[top] || strings.HasPrefix(p, "/") {
			continue
		}
		if !ix.paths[p] && !ix.paths[strings.TrimSuffix(p, "/")+"/"] {
			bad = append(bad, p)
		}
	}
	for _, m := range goFileName.FindAllStringSubmatch(text, -1) {
		if !ix.bases[m[2]] {
			bad = append(bad, m[2])
		}
	}
	return bad
}

func newIndex() *index {
	return &index{
		names:    map[string]bool{},
		used:     map[string]bool{},
		fields:   map[string]bool{},
		deps:     map[string]bool{},
		pkgs:     map[string]map[string]bool{},
		types:    map[string]map[string]bool{},
		embeds:   map[string]map[string]bool{},
		external: map[string]bool{},
		paths:    map[string]bool{},
		topDirs:  map[string]bool{},
		bases:    map[string]bool{},
	}
}

func addTo(m map[string]map[string]bool, k, v string) {
	if m[k] == nil {
		m[k] = map[string]bool{}
	}
	m[k][v] = true
}

// typeName is the name of the type expression e (T, *T, T[P], pkg.T).
func typeName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.StarExpr:
		return typeName(x.X)
	case *ast.IndexExpr:
		return typeName(x.X)
	case *ast.IndexListExpr:
		return typeName(x.X)
	case *ast.SelectorExpr:
		return x.Sel.Name
	}
	return ""
}

// addFile records every declaration of f.
func (ix *index) addFile(f *ast.File) {
	pkg := f.Name.Name
	ix.names[pkg] = true
	if ix.pkgs[pkg] == nil {
		ix.pkgs[pkg] = map[string]bool{}
	}
	for _, imp := range f.Imports {
		p, err := strconv.Unquote(imp.Path.Value)
		if err != nil || p == modulePath || strings.HasPrefix(p, modulePath+"/") {
			continue
		}
		if imp.Name != nil {
			ix.external[imp.Name.Name] = true
			continue
		}
		elems := strings.Split(p, "/")
		last := elems[len(elems)-1]
		ix.external[last] = true
		if len(elems) > 1 && regexp.MustCompile(`^v[0-9]+$`).MatchString(last) {
			prev := elems[len(elems)-2]
			ix.external[prev] = true
			ix.external[prev+last] = true // go.etcd.io/etcd/client/v3 is package clientv3
		}
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			ix.names[d.Name.Name] = true
			if d.Recv == nil || len(d.Recv.List) == 0 {
				ix.pkgs[pkg][d.Name.Name] = true
			} else {
				addTo(ix.types, typeName(d.Recv.List[0].Type), d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					ix.pkgs[pkg][s.Name.Name] = true
					ix.addMembers(s.Name.Name, s.Type)
				case *ast.ValueSpec:
					for _, n := range s.Names {
						ix.pkgs[pkg][n.Name] = true
					}
				}
			}
		}
	}
	// Every other declaration site: fields, parameters, locals, labels.
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Field:
			for _, id := range n.Names {
				ix.names[id.Name] = true
			}
		case *ast.TypeSpec:
			ix.names[n.Name.Name] = true
		case *ast.ValueSpec:
			for _, id := range n.Names {
				ix.names[id.Name] = true
			}
		case *ast.AssignStmt:
			if n.Tok == token.DEFINE {
				for _, e := range n.Lhs {
					if id, ok := e.(*ast.Ident); ok {
						ix.names[id.Name] = true
					}
				}
			}
		case *ast.RangeStmt:
			if n.Tok == token.DEFINE {
				for _, e := range []ast.Expr{n.Key, n.Value} {
					if id, ok := e.(*ast.Ident); ok {
						ix.names[id.Name] = true
					}
				}
			}
		case *ast.LabeledStmt:
			ix.names[n.Label.Name] = true
		case *ast.SelectorExpr:
			ix.used[n.Sel.Name] = true // client.PutObject, codes.ResourceExhausted
		case *ast.KeyValueExpr:
			if id, ok := n.Key.(*ast.Ident); ok {
				ix.used[id.Name] = true // tests.Features{GuaranteedOrder: true}
			}
		case *ast.BasicLit:
			if v, err := strconv.Unquote(n.Value); err == nil && n.Kind == token.STRING && identChain.MatchString(v) {
				ix.used[v] = true // "NoSuchBucket", an error code matched by value
			}
		}
		return true
	})
}

// addMembers records the fields, interface methods and embedded types of
// the type named t whose definition is e.
func (ix *index) addMembers(t string, e ast.Expr) {
	var fields *ast.FieldList
	switch x := e.(type) {
	case *ast.StructType:
		fields = x.Fields
	case *ast.InterfaceType:
		fields = x.Methods
	default:
		return
	}
	for _, fl := range fields.List {
		if len(fl.Names) == 0 {
			if emb := typeName(fl.Type); emb != "" {
				addTo(ix.embeds, t, emb)
				addTo(ix.types, t, emb) // an embedded field is named after its type
			}
			continue
		}
		for _, n := range fl.Names {
			addTo(ix.types, t, n.Name)
			if _, ok := e.(*ast.StructType); ok {
				ix.fields[n.Name] = true
			}
		}
	}
	if ix.types[t] == nil {
		ix.types[t] = map[string]bool{}
	}
}

// isMember reports whether some type of the repository has a method or
// field named m.
func (ix *index) isMember(m string) bool {
	if ix.members == nil {
		ix.members = map[string]bool{}
		for _, ms := range ix.types {
			for n := range ms {
				ix.members[n] = true
			}
		}
	}
	return ix.members[m]
}

// hasMember reports whether some type named t has a method or field named
// m, directly or through the types it embeds.
func (ix *index) hasMember(t, m string, seen map[string]bool) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	if ix.types[t][m] {
		return true
	}
	for emb := range ix.embeds[t] {
		if ix.hasMember(emb, m, seen) {
			return true
		}
	}
	return false
}

// goWords are Go's keywords and predeclared identifiers: written as code
// they name the language, not the repository.
var goWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`break case chan const continue default defer else fallthrough for
		func go goto if import interface map package range return select struct switch type var
		any bool byte comparable complex64 complex128 error float32 float64 int int8 int16 int32
		int64 rune string uint uint8 uint16 uint32 uint64 uintptr true false iota nil
		append cap clear close complex copy delete imag len make max min new panic print println
		real recover`) {
		goWords[w] = true
	}
}

// fileExts are the extensions a file name ends with: `star.go` is a file,
// not a member go of star.
var fileExts = map[string]bool{}

func init() {
	for _, e := range strings.Fields("go md db json sh mod sum txt yaml yml toml csv log out pb bin html svg png") {
		fileExts[e] = true
	}
}

var (
	identChain = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
	methodExpr = regexp.MustCompile(`^\(\*?([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)\)\.([A-Za-z_][A-Za-z0-9_]*)`)
	mixedCaps  = regexp.MustCompile(`[a-z][A-Z][a-z0-9]`)
	// qualifiedName is pkg.Name in code: a lower-case qualifier.
	qualifiedName = regexp.MustCompile(`\b([a-z][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)`)
)

// resolve reports why the code span s names nothing declared, or "" when
// it resolves or is not shaped like an identifier.
func (ix *index) resolve(s string) string {
	s = strings.TrimSpace(s)
	if m := methodExpr.FindStringSubmatch(s); m != nil {
		s = m[1] + "." + m[2] // (*Star).Close → Star.Close
	} else if i := strings.IndexByte(s, '('); i > 0 && strings.HasSuffix(s, ")") {
		s = s[:i] // Fence(epoch, from) → Fence
	}
	if s == "" || strings.HasPrefix(s, "-") || strings.ContainsAny(s, "/\\") || !identChain.MatchString(s) {
		return "" // a flag, a path, a command, a phrase or an expression
	}
	parts := strings.Split(s, ".")
	if len(parts) > 1 && fileExts[parts[len(parts)-1]] {
		return "" // a file name
	}
	if len(parts) == 1 {
		if goWords[s] || strings.ToLower(s) == s || allCaps.MatchString(s) {
			// A keyword; a lower-case word (a command, a key, a term);
			// an upper-case word (an environment variable, a one-letter
			// quantity such as K or W, a placeholder).
			return ""
		}
		if ix.names[s] || ix.used[s] || ix.deps[strings.ToLower(s)] {
			return "" // declared, used from another module, or the name of a dependency (OpenTelemetry)
		}
		return "not declared anywhere"
	}
	q, rest := parts[0], parts[1:]
	t := ""
	switch {
	case ix.pkgs[q] != nil && ix.pkgs[q][rest[0]]:
		if len(rest) == 1 {
			return ""
		}
		t, rest = rest[0], rest[1:] // pkg.Type.Method
	case ix.types[q] != nil && !(ix.fields[q] && !ix.hasMember(q, rest[0], map[string]bool{})):
		t = q // Type.Method (a field named like a type falls to the default: Stats.Backlog.Stalls)
	case ix.pkgs[q] != nil && !ix.external[q]:
		return fmt.Sprintf("package %s declares no %s", q, rest[0])
	case ix.external[q] || goWords[q]:
		return "" // another module's or the standard library's package
	default:
		// A variable: each member must be a field or method somewhere
		// (of one of the repository's types, or used on another module's
		// values), not merely a name declared somewhere: a local or a
		// parameter named like it does not make Star.holds resolve.
		for _, m := range rest {
			if !ix.isMember(m) && !ix.used[m] {
				return fmt.Sprintf("no field or method %s anywhere", m)
			}
		}
		return ""
	}
	for _, m := range rest {
		if !ix.hasMember(t, m, map[string]bool{}) {
			return fmt.Sprintf("no type %s has a method or field %s", t, m)
		}
		t = m // Type.Field.Method: the field's type is not tracked; check the name alone
		if ix.types[t] == nil {
			for _, m := range rest[1:] {
				if !ix.names[m] {
					return fmt.Sprintf("no field or method %s anywhere", m)
				}
			}
			return ""
		}
	}
	return ""
}

// finding is one identifier a doc names that resolves to nothing.
type finding struct {
	where, what, why string
}

func (f finding) String() string { return fmt.Sprintf("%s: %s: %s", f.where, f.what, f.why) }

var (
	backquoted = regexp.MustCompile("`([^`\n]+)`")
	docLink    = regexp.MustCompile(`\[(\*?[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\]`)
	pathLike   = regexp.MustCompile(`\S*/\S*`)
	quoted     = regexp.MustCompile(`"[^"]*"`)
	flagLike   = regexp.MustCompile(`(^|[\s(\[])-[-\w.=]+`)
	namespaced = regexp.MustCompile(`\w+:\w+`) // s3:ListBucket, an IAM action
	allCaps    = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
	proseToken = regexp.MustCompile(`\(\*[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?\)\.[A-Za-z_][A-Za-z0-9_]*|[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\(?`)
)

// scanGoDoc checks one package doc comment's text, whose first line is
// line first of file. In a nested module (an adapter documenting another
// project's API), unqualified MixedCaps words are not checked.
func (ix *index) scanGoDoc(file string, first int, text string, nested bool) []finding {
	var out []finding
	for i, line := range strings.Split(text, "\n") {
		where := fmt.Sprintf("%s:%d", file, first+i)
		check := func(s string) {
			if why := ix.resolve(s); why != "" {
				out = append(out, finding{where, s, why})
			}
		}
		for _, p := range ix.checkPaths(line) {
			out = append(out, finding{where, p, "no such file or directory in the repository"})
		}
		if strings.HasPrefix(line, "\t") || strings.HasPrefix(line, " \t") {
			line = flagLike.ReplaceAllString(line, " ")
			// A preformatted block (a layout, a diagram, an example):
			// only names qualified by a package of the repository.
			for _, m := range qualifiedName.FindAllStringSubmatch(line, -1) {
				if ix.pkgs[m[1]] != nil && !ix.external[m[1]] {
					check(m[0])
				}
			}
			continue
		}
		for _, m := range backquoted.FindAllStringSubmatch(line, -1) {
			check(m[1])
		}
		line = backquoted.ReplaceAllString(line, " ")
		line = quoted.ReplaceAllString(line, " ")
		line = flagLike.ReplaceAllString(line, " ")
		line = namespaced.ReplaceAllString(line, " ")
		for _, m := range docLink.FindAllStringSubmatch(line, -1) {
			check(strings.TrimPrefix(m[1], "*"))
		}
		line = docLink.ReplaceAllString(line, " ")
		line = pathLike.ReplaceAllString(line, " ")
		for _, tok := range proseToken.FindAllString(line, -1) {
			call := strings.HasSuffix(tok, "(")
			tok = strings.TrimSuffix(tok, "(")
			if strings.HasPrefix(tok, "(*") {
				check(tok)
				continue
			}
			parts := strings.Split(tok, ".")
			q := parts[0]
			switch {
			case len(parts) > 1 && (ix.pkgs[q] != nil || ix.types[q] != nil):
				check(tok) // pkg.Foo, Type.Method
			case len(parts) == 1 && call && q[0] >= 'A' && q[0] <= 'Z':
				check(tok) // Fence(epoch, from)
			case len(parts) == 1 && !nested && mixedCaps.MatchString(tok):
				if stem, ok := strings.CutSuffix(tok, "s"); ok && ix.resolve(stem) == "" {
					continue // a plural in prose: CheckTails
				}
				check(tok) // WriteFlight, maybeSettle
			}
		}
	}
	return out
}

// scanMarkdown checks a Markdown file's inline code spans, and the
// qualified names of its fenced go blocks.
func (ix *index) scanMarkdown(file string, data []byte) []finding {
	var out []finding
	fence, goBlock := false, false
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		where := fmt.Sprintf("%s:%d", file, n)
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "```") {
			if fence {
				fence, goBlock = false, false
			} else {
				fence, goBlock = true, strings.TrimPrefix(t, "```") == "go"
			}
			continue
		}
		for _, p := range ix.checkPaths(line) {
			if fence || codeSpanHolds(line, p) {
				out = append(out, finding{where, p, "no such file or directory in the repository"})
			}
		}
		if fence {
			if goBlock {
				for _, m := range qualifiedName.FindAllStringSubmatch(line, -1) {
					if ix.pkgs[m[1]] != nil && !ix.external[m[1]] {
						if why := ix.resolve(m[0]); why != "" {
							out = append(out, finding{where, m[0], why})
						}
					}
				}
			}
			continue
		}
		for _, m := range backquoted.FindAllStringSubmatch(line, -1) {
			if why := ix.resolve(m[1]); why != "" {
				out = append(out, finding{where, m[1], why})
			}
		}
	}
	return out
}

// codeSpanHolds reports whether one of line's code spans contains p.
func codeSpanHolds(line, p string) bool {
	for _, m := range backquoted.FindAllStringSubmatch(line, -1) {
		if strings.Contains(m[1], p) {
			return true
		}
	}
	return false
}

// repoRoot is the directory of the root module's go.mod.
func repoRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module "+modulePath+"\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("doccheck: no go.mod of %s above the test's directory", modulePath)
		}
		dir = parent
	}
}

// goFiles parses every Go file of the repository (nested modules
// included, testdata and hidden directories not).
func goFiles(t *testing.T, root string, ix *index) (*token.FileSet, map[string]*ast.File, []string) {
	fset := token.NewFileSet()
	var gomods []string
	files := map[string]*ast.File{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "vendor") {
				return filepath.SkipDir
			}
			if path != root {
				ix.addPath(rel + "/")
			}
			return nil
		}
		ix.addPath(rel)
		if strings.Contains("/"+rel, "/testdata/") || strings.Contains("/"+rel, "/_") {
			return nil // not Go source of the repository
		}
		if name == "go.mod" {
			gomods = append(gomods, path)
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files[rel] = f
		return nil
	})
	if err != nil {
		t.Fatalf("doccheck: %v", err)
	}
	return fset, files, gomods
}

// addGoMod records the words of every module path a go.mod requires
// (go.opentelemetry.io/otel gives opentelemetry and otel), so prose may
// name the projects the repository depends on.
func (ix *index) addGoMod(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("doccheck: %v", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require"))
		if len(f) < 2 || !strings.Contains(f[0], ".") || !strings.HasPrefix(f[1], "v") {
			continue
		}
		for _, w := range strings.FieldsFunc(f[0], func(r rune) bool { return r == '/' || r == '.' || r == '-' }) {
			ix.deps[strings.ToLower(w)] = true
		}
	}
}

// TestDocsNameDeclaredIdentifiers fails for every identifier a package doc,
// the README or a Markdown page under docs/ writes as code that nothing in
// the repository declares.
func TestDocsNameDeclaredIdentifiers(t *testing.T) {
	root := repoRoot(t)
	ix := newIndex()
	fset, files, gomods := goFiles(t, root, ix)
	for _, m := range gomods {
		ix.addGoMod(t, m)
	}
	for _, f := range files {
		ix.addFile(f)
	}
	nested := map[string]bool{} // directories of nested modules
	for rel := range files {
		dir := filepath.Dir(rel)
		for d := dir; d != "."; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(root, d, "go.mod")); err == nil {
				nested[dir] = true
				break
			}
		}
	}
	var found []finding
	docs := 0
	for rel, f := range files {
		if f.Doc == nil || strings.HasSuffix(rel, "_test.go") {
			continue
		}
		docs++
		first := fset.Position(f.Doc.Pos()).Line
		// Text() drops the comment markers but keeps one line per line
		// only for // comments; package docs here are all // comments.
		found = append(found, ix.scanGoDoc(rel, first, rawText(f.Doc), nested[filepath.Dir(rel)])...)
	}
	if docs == 0 {
		t.Fatal("doccheck: found no package doc comment")
	}
	mds, err := markdownFiles(root)
	if err != nil {
		t.Fatalf("doccheck: %v", err)
	}
	for _, md := range []string{"README.md", "docs/design.md"} {
		if !slices.Contains(mds, md) {
			t.Errorf("doccheck: %s is missing", md)
		}
	}
	found = append(found, ix.scanMarkdownFiles(t, root, mds)...)
	sort.Slice(found, func(i, j int) bool { return found[i].where < found[j].where })
	for _, f := range found {
		t.Errorf("%v", f)
	}
}

// markdownFiles lists, relative to root and sorted, the Markdown files the
// check reads: the README and every .md file under docs/ (subdirectories
// included), so a page split out of the README is checked like the README.
func markdownFiles(root string) ([]string, error) {
	mds := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(d.Name(), ".md") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		mds = append(mds, filepath.ToSlash(rel))
		return nil
	})
	sort.Strings(mds)
	return mds, err
}

// scanMarkdownFiles reads each of the Markdown files mds (relative to
// root) and returns what scanMarkdown finds in them; a file it cannot read
// is an error of t.
func (ix *index) scanMarkdownFiles(t testing.TB, root string, mds []string) []finding {
	var found []finding
	for _, md := range mds {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(md)))
		if err != nil {
			t.Errorf("doccheck: %v", err)
			continue
		}
		found = append(found, ix.scanMarkdown(md, data)...)
	}
	return found
}

// TestEveryDocsPageIsChecked plants a bogus name in a new page of docs/
// (and one in a subdirectory) of a small repository and requires the check
// to read those pages and flag the names; a page that is not Markdown is
// not read.
func TestEveryDocsPageIsChecked(t *testing.T) {
	root := t.TempDir()
	pages := map[string]string{
		"README.md":               "See `WriteCopy`.\n",
		"docs/design.md":          "See `WriteCopy`.\n",
		"docs/operations.md":      "Intro.\n\nCall `NoSuchThing` first.\n",
		"docs/deep/benchmarks.md": "Run `go test ./chain` and `chain.NoSuchBench`.\n",
		"docs/notes.txt":          "`NotMarkdown` is not read.\n",
	}
	for name, text := range pages {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mds, err := markdownFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	wantFiles := []string{"README.md", "docs/deep/benchmarks.md", "docs/design.md", "docs/operations.md"}
	if !slices.Equal(mds, wantFiles) {
		t.Fatalf("markdownFiles = %q, want %q", mds, wantFiles)
	}
	f, err := parser.ParseFile(token.NewFileSet(), "chain.go", "package chain\n\nfunc WriteCopy() {}\n", parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	ix := newIndex()
	ix.addFile(f)
	ix.addPath("chain/")
	got := ix.scanMarkdownFiles(t, root, mds)
	want := []finding{
		{"docs/deep/benchmarks.md:1", "chain.NoSuchBench", "package chain declares no NoSuchBench"},
		{"docs/operations.md:3", "NoSuchThing", "not declared anywhere"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("findings = %v, want %v", got, want)
	}
}

// rawText is the comment group's text with one output line per source line
// (CommentGroup.Text drops blank lines at the ends, and would shift the
// line numbers reported).
func rawText(g *ast.CommentGroup) string {
	var b strings.Builder
	for _, c := range g.List {
		s := c.Text
		switch {
		case strings.HasPrefix(s, "//"):
			b.WriteString(strings.TrimPrefix(s, "//"))
			b.WriteByte('\n')
		default:
			s = strings.TrimSuffix(strings.TrimPrefix(s, "/*"), "*/")
			b.WriteString(s)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// TestCheckerShapes runs the checker on a small repository of one file: it
// must flag a name nothing declares in every code shape, and skip every
// shape that is not an identifier.
func TestCheckerShapes(t *testing.T) {
	const src = `package chain

import "errors"

type Flight struct{ Nonce uint64 }

type Set struct{ Flight }

func WriteCopy(f Flight) error { return errors.New("chain: x") }

func (f Flight) Key() string { return "NoSuchKey" }

type Star struct{ Lead Flight }

type Options struct{ Star string }

func hold() bool { holds := true; return holds }
`
	f, err := parser.ParseFile(token.NewFileSet(), "chain.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	ix := newIndex()
	ix.addFile(f)
	for _, p := range []string{"chain/", "chain/chain.go", "loglet/", "loglet/star.go", "internal/", "internal/sim/"} {
		ix.addPath(p)
	}

	flagged := []struct{ doc, name string }{
		{"WriteFlight writes one flight.", "WriteFlight"},
		{"The caller calls chain.WriteFlight for each slot.", "chain.WriteFlight"},
		{"Flight.Size is the size.", "Flight.Size"},
		{"It calls Fence(epoch, from).", "Fence"},
		{"See [chain.Fence].", "chain.Fence"},
		{"See `maybeSettle`.", "maybeSettle"},
		{"(*Flight).Size is gone.", "(*Flight).Size"},
		{"\tx := chain.Walk(f) // a preformatted block", "chain.Walk"},
		{"The shell (loglet/lane.go) drives it.", "loglet/lane.go"},
		{"The shell (lane.go) drives it.", "lane.go"},
		{"\tgo test ./internal/leader -run X", "internal/leader"},
		{"Its settings are chain/set.Config.", "chain/set.Config"},
		{"Its settings are chain.Config.", "chain.Config"},
		// Star is a type and a field: a member Star lacks is looked for
		// among the types' members, not among locals (holds).
		{"Star.holds decides.", "Star.holds"},
	}
	for _, c := range flagged {
		got := ix.scanGoDoc("doc.go", 1, c.doc, false)
		if len(got) != 1 || got[0].what != c.name {
			t.Errorf("scanGoDoc(%q) = %v, want one finding for %s", c.doc, got, c.name)
		}
	}
	clean := []string{
		"WriteCopy writes a copy; chain.WriteCopy, Flight.Key, Flight.Nonce and Set.Key resolve.",
		"Star.Lead and Star.Lead.Key resolve, and so does cfg.Star.Lead.",
		"Copies are WriteCopys in prose (a plural).",
		"An S3 answer \"NoSuchBucket\" is quoted, s3:ListBucket is namespaced, (-sim.seed=5) a flag.",
		"The file chain.go, the path chains/<star>/<class>, errors.Is and raft.RawNode are not ours.",
		"`go test ./...`, `--dir`, `star.go`, `K`, `FLIGHTLOG_DIR`, `nil`, `x == y`, `NoSuchKey`.",
		"\tgo test ./internal/sim -run '^TestSim$' -sim.core.seed=7",
		"The files loglet/star.go, chain/ and internal/sim/... exist; chain.Flight (chain/chain.go) too.",
		"Keys: chains/<star>/<class>/<epoch>, refs/x/y, https://example.com/chain/x, github.com/flightlog/flightlog/chain.",
	}
	for _, doc := range clean {
		if got := ix.scanGoDoc("doc.go", 1, doc, false); len(got) != 0 {
			t.Errorf("scanGoDoc(%q) = %v, want nothing", doc, got)
		}
	}
	if got := ix.scanGoDoc("doc.go", 1, "An adapter names WatermillThing.", true); len(got) != 0 {
		t.Errorf("a nested module's mixed-case word was flagged: %v", got)
	}

	md := "Prose WriteFlight is not code.\n`WriteFlight` is.\n`WriteCopys` is no plural in code.\n" +
		"```sh\nchain.WriteFlight\n```\n```go\nchain.WriteFlight(x)\n```\n"
	got := ix.scanMarkdown("x.md", []byte(md))
	want := []finding{
		{"x.md:2", "WriteFlight", "not declared anywhere"},
		{"x.md:3", "WriteCopys", "not declared anywhere"},
		{"x.md:8", "chain.WriteFlight", "package chain declares no WriteFlight"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("scanMarkdown = %v, want %v", got, want)
	}
}
