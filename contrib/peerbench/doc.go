// Package peerbench measures flightlog beside what a Go service would
// otherwise embed for a durable log on one machine, in one process and one
// run, with the same records and the same producers: NATS JetStream (an
// embedded nats-server with a file-storage stream), once with durability at
// the ack (the server's SyncAlways: every write synced before its ack) and
// once with its default (writes synced every two minutes). flightlog runs as
// its embedded default, the local directory object store and bbolt that
// open.Dir opens, with Standard and Express streams. A raw baseline in the
// same run says what one fsync costs on the disk under test.
//
// On the real S3 protocol (an S3-compatible server named by
// FLIGHTLOG_S3_ENDPOINT, as scripts/test.sh starts it), flightlog's
// Standard class is measured against a naive writer that makes one
// conditional PutObject per append through the same client.
//
// It is a module of its own so that the core does not depend on
// nats-server. Everything here is a benchmark; its tests only check that
// each side round-trips records. The figures and the commands that
// produce them are in docs/benchmarks.md.
package peerbench
