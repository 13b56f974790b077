// Package depcheck holds one test: the loglet's pure cores (every package
// under loglet/internal whose name ends in "core": chaincore, settlecore,
// catalogcore, starcore) depend on no package that does I/O or holds a
// store client.
//
// A core decides; it never calls a store, a clock or a network. Its
// executor (loglet/internal/work) does the I/O the core asks for. The test
// keeps it so by listing each core's dependencies with the go command
// (go list -deps) and failing on any of:
//
//   - flightlog's store and I/O packages: metastore, objstore, chain,
//     absorb and settle themselves (a core imports their pure halves,
//     metastore/metaval, objstore/objval, chain/chainval,
//     absorb/absorbval and settle/settleval, which they re-export), any
//     backend under metastore/ or objstore/, and the runtime (loglet,
//     loglet/internal/work);
//   - the standard library's network, process and database packages (net
//     and everything under it, os/exec, os/signal, database/sql, plugin);
//   - the store clients flightlog's backends use (go.etcd.io, the AWS SDK,
//     gRPC).
//
// The standard library's os is not refused among the dependencies: fmt
// imports it (for Printf to standard output), so every package that
// formats an error depends on it. A core must not import os itself, nor
// sync or sync/atomic (a core holds no lock and is driven by one caller),
// context (a core never waits), or a source of randomness (math/rand,
// math/rand/v2, crypto/rand: a core's decisions replay exactly): the test
// checks each core's direct imports for these.
package depcheck
