package starcore

import "fmt"

// Ready is what the core has for the shell after a call: requests to
// execute (each steps one Event back), logs to emit, and the opening's or
// the close's result once it is decided.
type Ready struct {
	Requests []Request
	Logs     []Log
	// Opened is the opening's result: Err nil when every chain serves and
	// this process holds the first; otherwise the failure, reported after
	// every chain started was abandoned.
	Opened *Result
	// Closed is the close's (or the crash's) result: errors.Join of each
	// chain's close error, in class order, then the host's release errors.
	Closed *Result
}

// Empty reports whether rd holds nothing.
func (rd Ready) Empty() bool {
	return len(rd.Requests) == 0 && len(rd.Logs) == 0 && rd.Opened == nil && rd.Closed == nil
}

// Result is how an opening or a close ended.
type Result struct{ Err error }

// Log is a line for the shell's logger, at info level: a message and its
// key/value pairs.
type Log struct {
	Msg string
	KV  []any
}

// Request is one call the shell makes for the core; each steps one Event
// back.
type Request interface{ request() }

// ReadEpoch asks for class's epoch record: steps EpochRead.
type ReadEpoch struct{ Class Class }

// ReadCheckpoint asks for class's absorb checkpoint: steps CheckpointRead.
type ReadCheckpoint struct{ Class Class }

// StartChain asks the shell to start class's lane, whose chain core runs
// the chain's own opening (a first mint or a takeover), and to wait for
// its result: steps ChainOpened. Attempt counts the takeovers of this
// chain in this opening, from 1. Depose (a retake: Attempt > 1) says the
// chain's opening takes the chain from whoever holds it, live owner or
// not (Config.RefuseLiveOwner does not apply): the rival that took it
// during this opening does not hold the star's first chain (the hold
// check just found it this process's), so it cannot serve the star and
// gives up when it checks; refusing it would leave the chain to nobody.
type StartChain struct {
	Class   Class
	Attempt int
	Depose  bool
}

// Abandon asks the shell to stop class's lane the way a dying process
// does (no flush, no seal): steps Abandoned.
type Abandon struct{ Class Class }

// CloseChain asks the shell to close class's lane cleanly (flush, absorb,
// seal), within the close's bound: steps ChainClosed.
type CloseChain struct{ Class Class }

// ReleaseHost asks the shell to release what the host opened for the star
// (Config.Closers, such as open.Dir's bbolt file), in reverse order: steps HostReleased.
type ReleaseHost struct{}

func (ReadEpoch) request()      {}
func (ReadCheckpoint) request() {}
func (StartChain) request()     {}
func (Abandon) request()        {}
func (CloseChain) request()     {}
func (ReleaseHost) request()    {}

// Event is the result of one Request.
type Event interface{ event() }

// EpochRecord is what the core reads of a chain's epoch record.
type EpochRecord struct {
	Epoch uint64
	Owner string
	// Sealed: the record carries a seal; SealEpoch is the epoch it seals
	// (a clean seal of the current epoch has SealEpoch == Epoch).
	Sealed    bool
	SealEpoch uint64
}

func (r EpochRecord) describe(missing bool) string {
	if missing {
		return "missing"
	}
	s := fmt.Sprintf("epoch %d of %q", r.Epoch, r.Owner)
	if r.Sealed {
		s += fmt.Sprintf(" sealed at %d", r.SealEpoch)
	}
	return s
}

// LiveOwner reports whether rec, a chain's current epoch record, has a
// live owner other than owner: it names another owner and carries no
// clean seal of its epoch. That owner is running, or crashed without a
// clean Close; the metastore cannot tell which, so both count as live.
// (The chain core's own check, chaincore.LiveOwner, decides alike.)
func LiveOwner(rec EpochRecord, owner string) bool {
	return rec.Owner != owner && !(rec.Sealed && rec.SealEpoch == rec.Epoch)
}

// EpochRead is ReadEpoch's result: Missing if the chain has no epoch
// record yet; Err if it could not be read.
type EpochRead struct {
	Class   Class
	Record  EpochRecord
	Missing bool
	Err     error
}

// CheckpointRead is ReadCheckpoint's result: the owner whose seal the
// checkpoint carries, for which epoch.
type CheckpointRead struct {
	Class      Class
	Owner      string
	OwnerEpoch uint64
	Err        error
}

// Outcome is how a chain's opening ended.
type Outcome uint8

// The outcomes of a chain's opening.
const (
	OutcomeOpened    Outcome = iota // the chain serves, led by this process at Epoch
	OutcomeLost                     // a rival minted (or sealed) the chain first
	OutcomeLiveOwner                // the chain has a live owner, and the opening refused it
	OutcomeFailed                   // anything else (the metastore down, the opening abandoned)
)

var outcomeNames = [...]string{"opened", "lost", "live-owner", "failed"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// ChainOpened is StartChain's result.
type ChainOpened struct {
	Class   Class
	Outcome Outcome
	Epoch   uint64 // the epoch this process leads (OutcomeOpened)
	Err     error  // why not (every other outcome)
}

// Abandoned is Abandon's result: the lane is stopped.
type Abandoned struct{ Class Class }

// ChainClosed is CloseChain's result.
type ChainClosed struct {
	Class Class
	Err   error
}

// HostReleased is ReleaseHost's result.
type HostReleased struct{ Errs []error }

func (EpochRead) event()      {}
func (CheckpointRead) event() {}
func (ChainOpened) event()    {}
func (Abandoned) event()      {}
func (ChainClosed) event()    {}
func (HostReleased) event()   {}

// Describe renders a request for traces.
func Describe(r Request) string {
	switch r := r.(type) {
	case ReadEpoch:
		return fmt.Sprintf("read-epoch %s", r.Class)
	case ReadCheckpoint:
		return fmt.Sprintf("read-checkpoint %s", r.Class)
	case StartChain:
		if r.Depose {
			return fmt.Sprintf("start %s attempt=%d depose", r.Class, r.Attempt)
		}
		return fmt.Sprintf("start %s attempt=%d", r.Class, r.Attempt)
	case Abandon:
		return fmt.Sprintf("abandon %s", r.Class)
	case CloseChain:
		return fmt.Sprintf("close %s", r.Class)
	case ReleaseHost:
		return "release-host"
	}
	return fmt.Sprintf("%T", r)
}

func describeEvent(ev Event) string {
	switch ev := ev.(type) {
	case EpochRead:
		return fmt.Sprintf("epoch-read %s", ev.Class)
	case CheckpointRead:
		return fmt.Sprintf("checkpoint-read %s", ev.Class)
	case ChainOpened:
		return fmt.Sprintf("chain-opened %s %s", ev.Class, ev.Outcome)
	case Abandoned:
		return fmt.Sprintf("abandoned %s", ev.Class)
	case ChainClosed:
		return fmt.Sprintf("chain-closed %s", ev.Class)
	case HostReleased:
		return "host-released"
	}
	return fmt.Sprintf("%T", ev)
}
