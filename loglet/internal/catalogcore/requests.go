package catalogcore

import "fmt"

// Request is what an operation asks the shell to do: one call.
type Request interface {
	fmt.Stringer
	request()
}

// Result is the answer to a Request.
type Result interface {
	fmt.Stringer
	result()
}

// LookupCache asks whether the cache serves Name. Answer: CacheLooked.
type LookupCache struct{ Name string }

// ReadRecord asks for Name's stream record. Answer: RecordRead.
type ReadRecord struct{ Name string }

// CacheRecord asks the cache to serve Record, unless its chain core
// retired the incarnation, replacing only what the operation last saw:
// Expect, the cache's token for the name (CacheLooked.Token, Cached.Other).
// Answer: Cached.
type CacheRecord struct {
	Record Record
	Expect string
}

// MintRecord asks for a new record of Name on this star: a fresh
// incarnation and nonce, the default options. Answer: Minted.
type MintRecord struct{ Name string }

// CommitCreate asks to write Record and its name-index entry together,
// both expecting no key. Answer: CommitDone.
type CommitCreate struct{ Record Record }

// CommitDelete asks to delete Record (expecting Record.Version) and its
// name-index entry, and, if Marker, to write its deleted marker (expecting
// none), together. Answer: CommitDone (MarkerVersion set when known).
type CommitDelete struct {
	Record Record
	Marker bool
}

// ForgetName asks the cache to drop whatever incarnation of Name it holds:
// the next lookup reads the record. Answer: Done.
type ForgetName struct{ Name string }

// FinishDeletesOf asks to run the cleanup of every deleted marker of Name
// (each a FinishDelete). Answer: Done.
type FinishDeletesOf struct{ Name string }

// Retire asks to end Record's incarnation here: its chain core refuses
// admission to it from now on, the cache drops it, its trim point is
// forgotten. Answer: Retired.
type Retire struct{ Record Record }

// AwaitReleased asks to wait until every batch of Record's incarnation
// admitted below Seq has its outcome. Answer: Awaited.
type AwaitReleased struct {
	Record Record
	Seq    uint64
}

// CheckDrained asks whether the chain core will write no more refs of
// Record's incarnation (and this process serves the chain). Answer:
// DrainChecked.
type CheckDrained struct{ Record Record }

// ReadMarker asks for Record's deleted marker (its version). Answer:
// MarkerRead.
type ReadMarker struct{ Record Record }

// Reclaim asks to delete every ref of Record's incarnation and the settled
// objects they point at. Answer: Reclaimed.
type Reclaim struct{ Record Record }

// DeleteMarker asks to delete Record's deleted marker, expecting Version.
// Answer: MarkerDeleted.
type DeleteMarker struct {
	Record  Record
	Version Version
}

// PutTrim asks to write Record with its trim point raised to Seq,
// expecting Record.Version. Answer: TrimPut.
type PutTrim struct {
	Record Record
	Seq    uint64
}

// PutConfig asks to write Record with the configure's new options (the
// shell holds them), expecting Record.Version, with the star's catalogue
// generation. Answer: ConfigPut.
type PutConfig struct{ Record Record }

// CommitOffsetReq asks to write Offset's group offset as Next, expecting
// Offset.Version, in one commit that checks the stream record is still at
// Offset.RecordVersion (the shell mints the nonce it writes). Answer:
// OffsetCommitted.
type CommitOffsetReq struct {
	Offset Offset
	Next   uint64
}

// ReadOffset asks for the offset of Offset's group on Offset's
// incarnation. Answer: OffsetRead.
type ReadOffset struct{ Offset Offset }

// Warn asks the shell to log a failure the operation lives with. Answer:
// Done.
type Warn struct {
	Msg string
	Err error
}

func (LookupCache) request()     {}
func (ReadRecord) request()      {}
func (CacheRecord) request()     {}
func (MintRecord) request()      {}
func (CommitCreate) request()    {}
func (CommitDelete) request()    {}
func (ForgetName) request()      {}
func (FinishDeletesOf) request() {}
func (Retire) request()          {}
func (AwaitReleased) request()   {}
func (CheckDrained) request()    {}
func (ReadMarker) request()      {}
func (Reclaim) request()         {}
func (DeleteMarker) request()    {}
func (PutTrim) request()         {}
func (PutConfig) request()       {}
func (CommitOffsetReq) request() {}
func (ReadOffset) request()      {}
func (Warn) request()            {}

func (r LookupCache) String() string { return "lookup-cache " + r.Name }
func (r ReadRecord) String() string  { return "read-record " + r.Name }
func (r CacheRecord) String() string {
	if r.Expect != "" {
		return "cache " + r.Record.String() + " expect=" + r.Expect
	}
	return "cache " + r.Record.String()
}
func (r MintRecord) String() string      { return "mint " + r.Name }
func (r CommitCreate) String() string    { return "commit-create " + r.Record.String() }
func (r ForgetName) String() string      { return "forget " + r.Name }
func (r FinishDeletesOf) String() string { return "finish-deletes-of " + r.Name }
func (r Retire) String() string          { return "retire " + r.Record.ID() }
func (r CheckDrained) String() string    { return "check-drained " + r.Record.ID() }
func (r ReadMarker) String() string      { return "read-marker " + r.Record.ID() }
func (r Reclaim) String() string         { return "reclaim " + r.Record.ID() }
func (r ReadOffset) String() string      { return "read-offset " + r.Offset.String() }
func (r Warn) String() string            { return fmt.Sprintf("warn %q err=%q", r.Msg, errString(r.Err)) }
func (r CommitDelete) String() string {
	return fmt.Sprintf("commit-delete %s marker=%v", r.Record.String(), r.Marker)
}
func (r AwaitReleased) String() string {
	return fmt.Sprintf("await-released %s below=%d", r.Record.ID(), r.Seq)
}
func (r DeleteMarker) String() string {
	return fmt.Sprintf("delete-marker %s v=%s", r.Record.ID(), r.Version)
}
func (r PutTrim) String() string {
	return fmt.Sprintf("put-trim %s seq=%d", r.Record.String(), r.Seq)
}
func (r PutConfig) String() string { return "put-config " + r.Record.String() }
func (r CommitOffsetReq) String() string {
	return fmt.Sprintf("commit-offset %s next=%d", r.Offset.String(), r.Next)
}

// CacheLooked answers LookupCache: Record is the incarnation served, if
// Hit. Token is the cache's token for the name: opaque to the core, it
// changes whenever what the cache holds for the name may have changed (an
// entry cached, replaced or dropped).
type CacheLooked struct {
	Hit    bool
	Record Record
	Token  string
}

// RecordRead answers ReadRecord. NotFound: no record. Corrupt: the record
// does not decode (Err says why; Record has its Name and Version). Err
// alone: the read failed.
type RecordRead struct {
	Record   Record
	NotFound bool
	Corrupt  bool
	Err      error
}

// Cached answers CacheRecord: Retired means the cache refused the record,
// its incarnation retired by a delete; Other (the cache's token now) that
// it kept what it holds: the cache moved since the operation last looked.
type Cached struct {
	Retired bool
	Other   string
}

// Minted answers MintRecord: the record, or Err (options this star
// refuses: an invalid name, a class it does not run).
type Minted struct {
	Record Record
	Err    error
}

// CommitDone answers CommitCreate and CommitDelete. Conflict: an expected
// version did not hold (Err says more). MarkerVersion: a delete's marker's
// version, when the commit reported it.
type CommitDone struct {
	Err           error
	Conflict      bool
	MarkerVersion Version
}

// Done answers ForgetName, FinishDeletesOf and Warn.
type Done struct{}

// Retired answers Retire: Served means this process serves the
// incarnation's chain, and Admitted is the tail admission had reached.
type Retired struct {
	Served   bool
	Admitted uint64
}

// Awaited answers AwaitReleased (Err: the wait ended first).
type Awaited struct{ Err error }

// DrainChecked answers CheckDrained.
type DrainChecked struct{ Drained bool }

// MarkerRead answers ReadMarker.
type MarkerRead struct {
	Version Version
	Err     error
}

// Reclaimed answers Reclaim.
type Reclaimed struct{ Err error }

// MarkerDeleted answers DeleteMarker. NotFound or Conflict: someone else
// deleted (or rewrote) it: nothing left to do.
type MarkerDeleted struct {
	Err                error
	NotFound, Conflict bool
}

// TrimPut answers PutTrim.
type TrimPut struct {
	Err      error
	Conflict bool
}

// ConfigPut answers PutConfig: the record's new Version, or Err
// (Conflict: the expected version did not hold).
type ConfigPut struct {
	Version  Version
	Err      error
	Conflict bool
}

// OffsetCommitted answers CommitOffsetReq: the offset's new Version, or Err
// (Conflict: an expected version did not hold). Nonce is the one the
// commit wrote, whether or not it reports success.
type OffsetCommitted struct {
	Version  Version
	Nonce    string
	Err      error
	Conflict bool
}

// OffsetRead answers ReadOffset: Found, its Next, Nonce and Version; or
// Err (Corrupt: the value does not decode).
type OffsetRead struct {
	Found   bool
	Next    uint64
	Nonce   string
	Version Version
	Err     error
	Corrupt bool
}

func (CacheLooked) result()     {}
func (RecordRead) result()      {}
func (Cached) result()          {}
func (Minted) result()          {}
func (CommitDone) result()      {}
func (Done) result()            {}
func (Retired) result()         {}
func (Awaited) result()         {}
func (DrainChecked) result()    {}
func (MarkerRead) result()      {}
func (Reclaimed) result()       {}
func (MarkerDeleted) result()   {}
func (TrimPut) result()         {}
func (ConfigPut) result()       {}
func (OffsetCommitted) result() {}
func (OffsetRead) result()      {}

func (r CacheLooked) String() string {
	if r.Hit {
		return "cache hit " + r.Record.ID()
	}
	if r.Token != "" {
		return "cache miss token=" + r.Token
	}
	return "cache miss"
}
func (r RecordRead) String() string {
	switch {
	case r.NotFound:
		return "record not found"
	case r.Corrupt:
		return fmt.Sprintf("record corrupt err=%q", errString(r.Err))
	case r.Err != nil:
		return fmt.Sprintf("record read failed err=%q", errString(r.Err))
	}
	return "record " + r.Record.String()
}
func (r Cached) String() string {
	if r.Other != "" {
		return "cache moved: token " + r.Other
	}
	return fmt.Sprintf("cached retired=%v", r.Retired)
}
func (r Minted) String() string {
	if r.Err != nil {
		return fmt.Sprintf("mint refused err=%q", r.Err.Error())
	}
	return "minted " + r.Record.String()
}
func (Done) String() string           { return "done" }
func (r Awaited) String() string      { return fmt.Sprintf("awaited err=%q", errString(r.Err)) }
func (r DrainChecked) String() string { return fmt.Sprintf("drained=%v", r.Drained) }
func (r Reclaimed) String() string    { return fmt.Sprintf("reclaimed err=%q", errString(r.Err)) }
func (r Retired) String() string {
	return fmt.Sprintf("retired served=%v admitted=%d", r.Served, r.Admitted)
}
func (r CommitDone) String() string {
	return fmt.Sprintf("committed err=%q conflict=%v marker=%s", errString(r.Err), r.Conflict, r.MarkerVersion)
}
func (r MarkerRead) String() string {
	return fmt.Sprintf("marker v=%s err=%q", r.Version, errString(r.Err))
}
func (r MarkerDeleted) String() string {
	return fmt.Sprintf("marker-deleted err=%q not-found=%v conflict=%v", errString(r.Err), r.NotFound, r.Conflict)
}
func (r TrimPut) String() string {
	return fmt.Sprintf("trim-put err=%q conflict=%v", errString(r.Err), r.Conflict)
}
func (r ConfigPut) String() string {
	return fmt.Sprintf("config-put v=%s err=%q conflict=%v", r.Version, errString(r.Err), r.Conflict)
}
func (r OffsetCommitted) String() string {
	return fmt.Sprintf("offset-committed v=%s nonce=%s err=%q conflict=%v", r.Version, r.Nonce, errString(r.Err), r.Conflict)
}
func (r OffsetRead) String() string {
	return fmt.Sprintf("offset-read found=%v next=%d nonce=%s v=%s err=%q corrupt=%v", r.Found, r.Next, r.Nonce, r.Version, errString(r.Err), r.Corrupt)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
