// Package doccheck holds one test: every identifier a package doc comment,
// the README or a Markdown page under docs/ (design.md and the pages split
// out of the README) writes as code must be declared somewhere in the
// repository. It keeps the docs from naming functions, types, fields or
// methods that were renamed or removed.
//
// What counts as "written as code":
//
//   - in Markdown, an inline code span holding a name, a qualified name
//     (pkg.Name, Type.Method), a call (Name(args)) or a method expression
//     ((*Type).Method); and, in a fenced go block, a name qualified by a
//     package of this repository;
//   - in a package doc comment, a Go doc link, a backquoted span, a name
//     qualified by a package or a type of this repository (chain.Fence,
//     Batch.MatchSeqNum), a call of a capitalized name (Fence(epoch, from)),
//     and a mixed-case word (WriteFlight, maybeSettle, PutIfAbsent), which
//     English prose does not produce. In a preformatted block only names
//     qualified by a package of this repository count; in a nested module's
//     docs (an adapter describing another project's API) mixed-case words
//     do not.
//
// Shapes that are not identifiers are skipped by shape, never by name: a
// span with a space outside parentheses (a shell command or a phrase), a
// path (a slash), a file name (a dot and a file extension), a flag (a
// leading dash), a word in double quotes (a value), a namespaced word
// (s3:ListBucket), an all-lower-case word (a command, a key, a term), an
// all-upper-case word (an environment variable, a quantity such as K),
// Go's keywords and predeclared identifiers, a plural of a name in prose,
// and, in prose, a name qualified by something that is neither a package
// nor a type of this repository (errors.Is, raft.RawNode: other modules'
// names are not checked).
//
// Paths are checked too: a path whose first segment is a top-level
// directory of the repository (loglet/lane.go, ./chain/...) must
// exist, and so must some file of a Go file name a doc mentions (lane.go).
//
// Identifiers are resolved by name across every Go file of the repository
// (test files included), never by package path, so the check survives
// packages moving: a qualified name needs some package of that name to
// declare it; Type.Method needs some type of that name to have such a
// method or field (directly or through an embedded type). A name the code
// uses from another module (a selector, a composite-literal key, an
// identifier-shaped string literal such as an S3 error code) resolves too,
// and so does a word of a required module's path (OpenTelemetry).
package doccheck
