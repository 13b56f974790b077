package starcore

import (
	"errors"
	"fmt"
	"slices"
)

// Class is a chain's class, by the chain package's value (0 standard, 1
// express). The core keeps no import of the chain package: that one does
// I/O.
type Class uint8

// The two classes, as the chain package numbers them.
const (
	Standard Class = 0
	Express  Class = 1
)

// NumClasses is the number of classes, the size of arrays indexed by Class.
const NumClasses = 2

// String returns "standard" or "express", the chain package's names.
func (c Class) String() string {
	switch c {
	case Standard:
		return "standard"
	case Express:
		return "express"
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// ErrTakeoverLost: a rival took one of the star's chains first (its first
// chain, or a later one too often, or the first while this process opened
// the others). This process does not lead the star.
var ErrTakeoverLost = errors.New("starcore: another process took over the chain first")

// ErrLiveOwner: the opening was told to refuse a live owner and a chain's
// current epoch has one.
var ErrLiveOwner = errors.New("starcore: the chain has a live owner")

// Config configures a star's leadership core.
type Config struct {
	// Star and Owner name the star and this process (in errors; Owner is
	// also compared with the owners the epoch records and checkpoints name).
	Star, Owner string
	// Classes are the enabled classes in opening order; the first is the
	// star's lock. At least one; each at most once.
	Classes []Class
	// RefuseLiveOwner reads every chain's epoch record (all at once) before starting
	// any and fails the opening with ErrLiveOwner if one has a live owner
	// other than Owner (LiveOwner).
	RefuseLiveOwner bool
	// AllAtOnce starts every chain's opening at once whatever the records
	// say (without it, only when the live-owner check found every one
	// sealed cleanly), and serves once all opened without checking the
	// first again: the host keeps any other process from opening the star
	// at the same time (a fleet member's claim does), so the first chain's
	// lock has no rival to hold off. Safety does not rest on it: should a
	// rival open the star at the same time anyway, every ack stays safe
	// (each chain's epoch protocol), but the two may end with one chain
	// each, the star led by nobody until it is opened again.
	AllAtOnce bool
	// MaxTakeovers bounds the takeovers of one later chain in an opening
	// (the first counts): at least 1.
	MaxTakeovers int
	// LostErr and LiveErr are the sentinels the opening's errors wrap for
	// a takeover lost and a live owner refused (the facade's own, so that
	// its callers match them with errors.Is); nil: ErrTakeoverLost and
	// ErrLiveOwner.
	LostErr, LiveErr error
}

// Validate reports what is wrong with cfg.
func (cfg Config) Validate() error {
	if len(cfg.Classes) == 0 {
		return errors.New("starcore: no class enabled")
	}
	var seen [NumClasses]bool
	for _, c := range cfg.Classes {
		if int(c) >= NumClasses {
			return fmt.Errorf("starcore: unknown class %d", uint8(c))
		}
		if seen[c] {
			return fmt.Errorf("starcore: class %s listed twice", c)
		}
		seen[c] = true
	}
	if cfg.MaxTakeovers < 1 {
		return fmt.Errorf("starcore: MaxTakeovers is %d, must be at least 1", cfg.MaxTakeovers)
	}
	return nil
}

// phase is where the star's leadership is.
type phase uint8

const (
	phaseIdle      phase = iota // New: nothing asked yet
	phaseLive                   // reading the epoch records for the live-owner check
	phaseStarting               // a chain's opening is out
	phaseHold                   // checking that this process still holds the first chain
	phaseFailing                // abandoning the chains started, before reporting the failure
	phaseServing                // every chain opened; the star serves
	phaseClosing                // closing every chain at once
	phaseReleasing              // every chain closed: releasing what the host opened
	phaseDone                   // the opening failed, or the star closed
)

var phaseNames = [...]string{"idle", "live-check", "starting", "hold-check", "failing", "serving", "closing", "releasing", "done"}

func (p phase) String() string { return phaseNames[p] }

// chainState is what the core knows of one class's chain.
type chainState struct {
	started bool // a StartChain was asked (a lane exists until abandoned or closed)
	// result is the chain's opening as it came back while every chain
	// was started at once (Core.together): decided once all are in.
	result   *ChainOpened
	open     bool   // its opening succeeded: this process leads it at epoch
	epoch    uint64 // the epoch it leads
	attempts int    // takeovers asked in this opening
	out      bool   // a request for it is out
	closeErr error
}

// holdCheck is the sub-machine that checks this process still holds the
// first chain: read its epoch record and its checkpoint (asked at once,
// answered in that order).
type holdCheck struct {
	class Class
	epoch uint64
	then  holdThen // what follows a check that finds the first ours
	// retake is the later chain lost to a rival that a holdThenRetake
	// check is for, and lost its opening's error.
	retake Class
	lost   error
	// The answers, asked at once, arrive in either order: what each
	// found (a read that failed, or a record not ours) is kept until both
	// are in; the epoch record's finding then decides before the
	// checkpoint's.
	epochIn, cpIn   bool
	epochErr, cpErr error
	epochWhy, cpWhy string
	// reads counts the rounds of reads asked (holdReadRounds at most).
	reads int
}

// holdReadRounds bounds the rounds of the hold check's reads: a read that
// failed (the metastore's transient error) is asked again, with its pair,
// rather than failing an opening that may already have deposed the
// star's previous owner, which a failed opening would leave to nobody.
const holdReadRounds = 3

// holdThen is why the first chain is checked.
type holdThen uint8

const (
	// holdThenNext: before a later chain is started. A first chain's
	// opening can report success after a rival already took it over (its
	// own seal check finds out later); a later chain taken then would
	// depose the rival's, and this process's opening fail anyway.
	holdThenNext holdThen = iota
	// holdThenRetake: a later chain was lost to a rival; take it again.
	holdThenRetake
	// holdThenServe: every chain opened; the star serves.
	holdThenServe
)

// Core is a star's leadership core. It is not safe for concurrent use:
// the shell calls it from one goroutine, or under one lock.
type Core struct {
	cfg    Config
	phase  phase
	chains [NumClasses]chainState
	next   int // Config.Classes index: the live check's or the opening's next chain
	// The live check's answers (by class) and what each found: they
	// arrive in any order; once all are in, the first failure in class
	// order fails the opening.
	liveIn   [NumClasses]bool
	liveErrs [NumClasses]error
	// liveClean: the live check found the chain's record cleanly sealed
	// (its owner closed it). together: every chain was started at once,
	// their openings out together (every record clean: a planned handoff).
	liveClean [NumClasses]bool
	together  bool
	hold      holdCheck
	failed    error // the opening's failure, reported once every chain is abandoned
	// abandonOrder lists the chains started, in start order (each once).
	abandonOrder []Class
	pending      int  // requests out whose events have not come back
	crash        bool // Crash: no close, chains abandoned
	// served: the opening reported success. A later chain lost since
	// (ChainLost) is taken again through the opening's own steps (the
	// hold check, the abandon, the start), which then end in serving
	// again rather than in a second report; a failure there does not
	// fail the opening (it is over) but leaves the chain unheld.
	served bool

	out Ready
}

// New returns a core for cfg; it asks nothing until Open.
func New(cfg Config) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Classes = append([]Class(nil), cfg.Classes...)
	if cfg.LostErr == nil {
		cfg.LostErr = ErrTakeoverLost
	}
	if cfg.LiveErr == nil {
		cfg.LiveErr = ErrLiveOwner
	}
	return &Core{cfg: cfg}, nil
}

// Phase names where the leadership is, for traces and errors.
func (c *Core) Phase() string { return c.phase.String() }

// Holds reports whether class's chain opened for this process (and was
// not found taken since, closed or abandoned), and at which epoch. A
// successor may have deposed it since: the chain's own core finds out.
func (c *Core) Holds(class Class) (uint64, bool) {
	if int(class) >= NumClasses || !c.chains[class].open || c.phase == phaseDone {
		return 0, false
	}
	return c.chains[class].epoch, true
}

// Ready takes what the core has for the shell: the requests to execute,
// the logs, and the opening's or the close's result. The next call
// returns only what was decided since.
func (c *Core) Ready() Ready {
	rd := c.out
	c.out = Ready{}
	return rd
}

func (c *Core) ask(r Request) {
	c.pending++
	c.out.Requests = append(c.out.Requests, r)
}

func (c *Core) logf(msg string, kv ...any) {
	c.out.Logs = append(c.out.Logs, Log{Msg: msg, KV: kv})
}

// Open starts the opening: the live-owner check if configured, then the
// first chain. It returns an error (and asks nothing) if the core is not
// new.
func (c *Core) Open() error {
	if c.phase != phaseIdle {
		return fmt.Errorf("starcore: open star %s: the leadership is %s, not idle", c.cfg.Star, c.phase)
	}
	if c.cfg.RefuseLiveOwner {
		// Every chain is checked before any is taken, so that a refusal
		// leaves nothing taken over. (Each chain's core checks again as it
		// reads the epoch record, should one change in between.)
		// The records are read at once (one round trip on the path of
		// every handoff, not one per chain); their answers arrive in
		// class order.
		c.phase, c.next = phaseLive, 0
		for _, class := range c.cfg.Classes {
			c.ask(ReadEpoch{Class: class})
		}
		return nil
	}
	if c.cfg.AllAtOnce && len(c.cfg.Classes) > 1 {
		c.startAll("the host keeps rivals out")
		return nil
	}
	c.startNext(0)
	return nil
}

// startNext starts the opening of Config.Classes[i].
func (c *Core) startNext(i int) {
	c.phase, c.next = phaseStarting, i
	c.start(c.cfg.Classes[i])
}

func (c *Core) start(class Class) {
	ch := &c.chains[class]
	if !slices.Contains(c.abandonOrder, class) {
		c.abandonOrder = append(c.abandonOrder, class)
	}
	ch.started, ch.open, ch.out = true, false, true
	ch.attempts++
	c.ask(StartChain{Class: class, Attempt: ch.attempts, Depose: ch.attempts > 1})
}

// allClean reports whether the live check found every chain's record
// cleanly sealed: its owner closed the star (a planned handoff), so each
// chain's takeover is a seal and mint with nothing to fence.
func (c *Core) allClean() bool {
	if len(c.cfg.Classes) < 2 {
		return false
	}
	for _, class := range c.cfg.Classes {
		if !c.liveClean[class] {
			return false
		}
	}
	return true
}

// startAll starts every chain's opening at once (a clean handoff, or a
// host that keeps rivals out: one takeover's time on the path, not one per
// chain). The first is still the star's lock: the openings are decided
// together once all are in (decideTogether), the first's before the
// others', and the star serves only after the hold check of the first that
// follows them (not with AllAtOnce). After a clean check, what running them
// at once changes is only who may end up with a later chain when a rival
// opens the star at the same moment: each takeover is a seal and mint at
// the versions the check read, so a rival cannot depose an epoch this
// process just minted (its compare-and-swap fails and it has lost); a
// rival that won a later chain but lost the first closes it cleanly, and
// this process takes it again (the retake), as when a rival takes a later
// chain between this process's takeovers. Each chain's own epoch protocol
// keeps every ack safe either way.
func (c *Core) startAll(why string) {
	c.phase, c.next, c.together = phaseStarting, 0, true
	c.logf("taking every chain over at once", "star", c.cfg.Star, "chains", len(c.cfg.Classes), "why", why)
	for _, class := range c.cfg.Classes {
		c.start(class)
	}
}

// decideTogether decides the openings started at once, once every one is
// in: the first lost or failed fails the star (every chain started is
// abandoned, a later one won included); a later one that failed, or was
// lost too often, fails it too; a later one lost to a rival is taken
// again while this process holds the first (the hold check, then the
// sequential opening from that chain on); all opened: the hold check
// before serving (with AllAtOnce, none: the star serves).
func (c *Core) decideTogether() {
	for _, class := range c.cfg.Classes {
		if c.chains[class].out {
			return
		}
	}
	c.together = false
	results := make([]ChainOpened, len(c.cfg.Classes))
	for i, class := range c.cfg.Classes {
		results[i] = *c.chains[class].result
		c.chains[class].result = nil
	}
	for _, ev := range results {
		if ev.Outcome == OutcomeOpened {
			c.chains[ev.Class].open, c.chains[ev.Class].epoch = true, ev.Epoch
		}
	}
	for i, ev := range results {
		ch := &c.chains[ev.Class]
		if ev.Outcome == OutcomeOpened {
			continue
		}
		if i == 0 {
			c.failClosingWon(c.openError(ev))
			return
		}
		if !retakeable(ev) || ch.attempts >= c.cfg.MaxTakeovers {
			c.fail(c.openError(ev))
			return
		}
	}
	for i, ev := range results {
		if retakeable(ev) {
			c.next = i
			c.phase = phaseHold
			c.hold = holdCheck{class: c.first(), epoch: c.chains[c.first()].epoch, then: holdThenRetake, retake: ev.Class, lost: c.openError(ev)}
			c.askHold()
			return
		}
	}
	c.next = len(c.cfg.Classes) - 1
	if c.cfg.AllAtOnce {
		// The host keeps rivals out: nobody can have taken the first since
		// its opening returned (a deposed owner cannot mint again), so the
		// hold check, a round trip on the path of every handoff, would
		// find it ours.
		c.serve()
		return
	}
	c.phase = phaseHold
	c.hold = holdCheck{class: c.first(), epoch: c.chains[c.first()].epoch, then: holdThenServe}
	c.askHold()
}

// serve: every chain opened and this process holds the first. The
// opening reports success the first time; after a retake of a chain lost
// while serving (ChainLost), the star serves again without a report.
func (c *Core) serve() {
	c.phase = phaseServing
	if c.served {
		c.logf("took back a chain lost while serving", "star", c.cfg.Star, "class", c.cfg.Classes[c.next].String())
		return
	}
	c.served = true
	c.out.Opened = &Result{}
}

// ChainLost tells the core that class's chain, which the star serves from,
// stopped serving because a rival took it over (its chain core found a
// successor's seal or epoch): the window a rival leaves when it passed its
// hold check, started a later chain, lost the first to this process and
// then took the later chain over from it before its own last check
// failed. A later chain is taken back, deposing that rival, if this
// process still holds the first: the hold check, then the lost lane
// abandoned and the chain started again (StartChain.Depose), up to
// Config.MaxTakeovers takeovers (the lost opening counts); the star then
// serves again, with no second report. A retake that fails (the first is
// a rival's now, a read failed, the takeovers ran out) leaves the chain
// unheld and the star serving as it was. The first chain lost means a
// rival holds the star's lock: nothing is taken back (the rival takes
// the others, and a later chain lost after it is not taken back either),
// and this process leads nothing more. It returns an error
// (and changes nothing) unless the star serves from class's chain; Close
// waits for a retake to end (it returns an error meanwhile).
func (c *Core) ChainLost(class Class, why error) error {
	if !c.served || c.phase != phaseServing {
		return fmt.Errorf("starcore: star %s lost its %s chain while the leadership is %s, not serving", c.cfg.Star, class, c.phase)
	}
	i := slices.Index(c.cfg.Classes, class)
	if i < 0 || !c.chains[class].open {
		return fmt.Errorf("starcore: star %s lost its %s chain, which it does not hold", c.cfg.Star, class)
	}
	ch := &c.chains[class]
	ch.open = false
	if i == 0 {
		c.logf("lost the star's first chain to a rival; this process no longer leads the star", "star", c.cfg.Star, "class", class.String(), "err", why)
		return nil
	}
	if !c.chains[c.first()].open {
		c.logf("lost a chain to a rival while serving, after the star's first chain; nothing is taken back", "star", c.cfg.Star, "class", class.String(), "err", why)
		return nil
	}
	c.logf("lost a chain to a rival while serving; taking it back if the star's first chain is still ours", "star", c.cfg.Star, "class", class.String(), "err", why)
	ch.attempts = 1
	c.next = i
	c.phase = phaseHold
	c.hold = holdCheck{class: c.first(), epoch: c.chains[c.first()].epoch, then: holdThenRetake, retake: class,
		lost: fmt.Errorf("%w: %s: lost while serving: %v", c.cfg.LostErr, class, why)}
	c.askHold()
	return nil
}

// retakeFailed: taking back a chain lost while serving failed; the star
// serves without it (the opening is over: nothing is abandoned).
func (c *Core) retakeFailed(err error) {
	class := c.cfg.Classes[c.next]
	c.chains[class].open = false
	c.phase = phaseServing
	c.logf("could not take back a chain lost while serving; the star serves without it", "star", c.cfg.Star, "class", class.String(), "err", err)
}

// retakeable reports whether a later chain's failed opening ev is a rival's
// doing, to be taken again while this process holds the first: a rival
// minted first (lost), or the chain has a live owner although the live
// check before any chain started found none (a rival minted it since:
// without the retake, this process and the rival, which cannot hold the
// first, would both give up, each leaving a chain it minted unsealed).
func retakeable(ev ChainOpened) bool {
	return ev.Outcome == OutcomeLost || ev.Outcome == OutcomeLiveOwner
}

// nextUnopened is the index in Config.Classes of the first chain from i
// on that is not open (len(Classes) if none).
func (c *Core) nextUnopened(i int) int {
	for i < len(c.cfg.Classes) && c.chains[c.cfg.Classes[i]].open {
		i++
	}
	return i
}

// first is the star's lock: the first class opened.
func (c *Core) first() Class { return c.cfg.Classes[0] }

// Step applies ev, the result of a request, and decides what follows. An
// event the core did not ask for (or no longer waits for) is an error and
// changes nothing.
func (c *Core) Step(ev Event) error {
	if c.pending == 0 {
		return fmt.Errorf("starcore: %T with no request out (the leadership is %s)", ev, c.phase)
	}
	c.pending--
	var err error
	switch ev := ev.(type) {
	case EpochRead:
		err = c.onEpochRead(ev)
	case CheckpointRead:
		err = c.onCheckpointRead(ev)
	case ChainOpened:
		err = c.onChainOpened(ev)
	case Abandoned:
		err = c.onAbandoned(ev)
	case ChainClosed:
		err = c.onChainClosed(ev)
	case HostReleased:
		err = c.onHostReleased(ev)
	default:
		err = fmt.Errorf("starcore: unknown event %T", ev)
	}
	if err != nil {
		c.pending++ // not applied: still out
	}
	return err
}

func (c *Core) unexpected(ev Event) error {
	return fmt.Errorf("starcore: unexpected %s while the leadership is %s", describeEvent(ev), c.phase)
}

func (c *Core) onEpochRead(ev EpochRead) error {
	switch {
	case c.phase == phaseLive && int(ev.Class) < NumClasses && slices.Contains(c.cfg.Classes, ev.Class) && !c.liveIn[ev.Class]:
		// Every record was asked at once; the answers arrive in any
		// order. Once every one is in, the first failure in class order
		// decides.
		c.liveIn[ev.Class] = true
		switch {
		case ev.Err != nil:
			c.liveErrs[ev.Class] = ev.Err
		case !ev.Missing && LiveOwner(ev.Record, c.cfg.Owner):
			c.liveErrs[ev.Class] = fmt.Errorf("%w: %s/%s is at epoch %d, owned by %q and not sealed cleanly (it is running, or it crashed without a clean Close)",
				c.cfg.LiveErr, c.cfg.Star, ev.Class, ev.Record.Epoch, ev.Record.Owner)
		default:
			c.liveClean[ev.Class] = !ev.Missing && ev.Record.Sealed && ev.Record.SealEpoch == ev.Record.Epoch
		}
		for _, class := range c.cfg.Classes {
			if !c.liveIn[class] {
				return nil
			}
		}
		for _, class := range c.cfg.Classes {
			if err := c.liveErrs[class]; err != nil {
				c.fail(err)
				return nil
			}
		}
		switch {
		case c.allClean():
			c.startAll("every chain sealed cleanly")
			return nil
		case c.cfg.AllAtOnce && len(c.cfg.Classes) > 1:
			c.startAll("the host keeps rivals out")
			return nil
		}
		c.startNext(0)
		return nil
	case c.phase == phaseHold && !c.hold.epochIn && ev.Class == c.hold.class:
		c.hold.epochIn = true
		switch {
		case ev.Err != nil:
			c.hold.epochErr = ev.Err
		case ev.Missing || ev.Record.Epoch != c.hold.epoch || ev.Record.Owner != c.cfg.Owner:
			c.hold.epochWhy = fmt.Sprintf("the epoch record is %s", ev.Record.describe(ev.Missing))
		}
		c.holdDecide()
		return nil
	}
	return c.unexpected(ev)
}

func (c *Core) onCheckpointRead(ev CheckpointRead) error {
	if c.phase != phaseHold || c.hold.cpIn || ev.Class != c.hold.class {
		return c.unexpected(ev)
	}
	c.hold.cpIn = true
	switch {
	case ev.Err != nil:
		c.hold.cpErr = ev.Err
	case ev.Owner != c.cfg.Owner || ev.OwnerEpoch != c.hold.epoch:
		c.hold.cpWhy = fmt.Sprintf("the checkpoint carries %q's seal for epoch %d", ev.Owner, ev.OwnerEpoch)
	}
	c.holdDecide()
	return nil
}

// holdDecide ends the hold check once both answers are in: the epoch
// record's finding first, then the checkpoint's.
func (c *Core) holdDecide() {
	h := &c.hold
	switch {
	case !h.epochIn || !h.cpIn:
		return
	case h.epochWhy == "" && h.cpWhy == "" && (h.epochErr != nil || h.cpErr != nil) && h.reads < holdReadRounds:
		// A read failed and nothing read so far says the first is lost:
		// read both again.
		err := h.epochErr
		if err == nil {
			err = h.cpErr
		}
		c.logf("a read of the hold check failed; reading again", "star", c.cfg.Star, "class", h.class.String(), "round", h.reads, "err", err)
		h.epochIn, h.cpIn, h.epochErr, h.cpErr = false, false, nil, nil
		c.askHold()
		return
	case h.epochErr != nil:
		c.holdFailed(h.epochErr)
		return
	case h.epochWhy != "":
		c.notHeld(h.epochWhy)
		return
	case h.cpErr != nil:
		c.holdFailed(h.cpErr)
		return
	case h.cpWhy != "":
		c.notHeld(h.cpWhy)
		return
	}
	// Still ours.
	switch c.hold.then {
	case holdThenServe:
		c.serve()
		return
	case holdThenNext:
		i := c.nextUnopened(c.next + 1)
		if class := c.cfg.Classes[i]; c.chains[class].started {
			// Lost while the chains were started at once: its lane goes
			// before it is taken again.
			c.phase, c.next = phaseStarting, i
			c.chains[class].out = true
			c.ask(Abandon{Class: class})
			return
		}
		c.startNext(i)
		return
	}
	lost := c.hold.retake
	c.logf("lost a chain's takeover to a rival while holding the star's first chain; taking it again",
		"star", c.cfg.Star, "class", lost.String(), "first", c.hold.class.String(), "attempt", c.chains[lost].attempts, "err", c.hold.lost)
	c.phase = phaseStarting
	c.chains[lost].out = true
	c.ask(Abandon{Class: lost})
}

// holdFailed: the check could not read what it needs.
func (c *Core) holdFailed(err error) {
	if c.hold.then != holdThenRetake {
		c.fail(fmt.Errorf("starcore: check the %s chain is still ours: %w", c.hold.class, err))
		return
	}
	c.fail(errors.Join(c.hold.lost, err))
}

// notHeld: a rival holds the first chain now; this process leads no star.
func (c *Core) notHeld(why string) {
	c.chains[c.hold.class].open = false
	var err error
	switch {
	case c.served:
		err = fmt.Errorf("%w: %s: a rival holds the star's first chain now (%s)", c.hold.lost, c.hold.class, why)
	case c.hold.then == holdThenNext:
		err = fmt.Errorf("%w: %s: a rival took the chain over as this process opened it (%s)", c.cfg.LostErr, c.hold.class, why)
	case c.hold.then == holdThenServe:
		err = fmt.Errorf("%w: %s: a rival took the chain over while this process opened the others (%s)", c.cfg.LostErr, c.hold.class, why)
	default:
		err = c.hold.lost
	}
	if c.served {
		c.fail(err)
		return
	}
	// A later chain this process won (possibly from the rival that holds
	// the first now, after the rival's last check) is closed cleanly, not
	// left minted in this process's name unsealed: the rival, once its
	// chain core finds itself deposed, takes it back from a clean seal
	// (ChainLost) rather than fencing a live owner.
	c.failClosingWon(err)
}

func (c *Core) onChainOpened(ev ChainOpened) error {
	if c.phase != phaseStarting || int(ev.Class) >= NumClasses || !c.chains[ev.Class].out {
		return c.unexpected(ev)
	}
	ch := &c.chains[ev.Class]
	if c.together {
		ch.out, ch.result = false, &ev
		c.decideTogether()
		return nil
	}
	if ev.Class != c.cfg.Classes[c.next] {
		return c.unexpected(ev)
	}
	ch.out = false
	if ev.Outcome != OutcomeOpened {
		err := c.openError(ev)
		first := c.next == 0
		if first || !retakeable(ev) || ch.attempts >= c.cfg.MaxTakeovers {
			c.fail(err)
			return nil
		}
		// A later chain lost to a rival: take it again if this process
		// still holds the first.
		c.phase = phaseHold
		c.hold = holdCheck{class: c.first(), epoch: c.chains[c.first()].epoch, then: holdThenRetake, retake: ev.Class, lost: err}
		c.askHold()
		return nil
	}
	ch.open, ch.epoch = true, ev.Epoch
	if len(c.cfg.Classes) == 1 {
		c.serve()
		return nil
	}
	// Check the first is still ours before the next chain is started (a
	// rival may have taken it while it opened), and once every chain
	// serves (a rival may have taken it while this process opened the
	// others).
	then := holdThenServe
	if c.nextUnopened(c.next+1) < len(c.cfg.Classes) {
		then = holdThenNext
	}
	c.phase = phaseHold
	c.hold = holdCheck{class: c.first(), epoch: c.chains[c.first()].epoch, then: then}
	c.askHold()
	return nil
}

// askHold asks for the first chain's epoch record and checkpoint at once
// (one round trip, not two, on the path of every opening): both must
// still name this process. Reading them in either order proves as much as
// one after the other: a rival seals the checkpoint before it mints, and
// a seal is never undone but by the sealer's own mint, so a checkpoint
// read that still carries this process's seal shows it held the chain
// then, whenever the record was read.
func (c *Core) askHold() {
	c.hold.reads++
	c.ask(ReadEpoch{Class: c.hold.class})
	c.ask(ReadCheckpoint{Class: c.hold.class})
}

// openError turns a chain's failed opening into the star's error.
func (c *Core) openError(ev ChainOpened) error {
	switch ev.Outcome {
	case OutcomeLost:
		return fmt.Errorf("%w: %s: %v", c.cfg.LostErr, ev.Class, ev.Err)
	case OutcomeLiveOwner:
		return fmt.Errorf("%w: %s: %v", c.cfg.LiveErr, ev.Class, ev.Err)
	}
	if ev.Err == nil {
		return fmt.Errorf("starcore: open the %s chain: failed", ev.Class)
	}
	return ev.Err
}

// fail ends the opening with err once every chain started is abandoned,
// the last started first (the first chain, the star's lock, goes last).
func (c *Core) fail(err error) {
	if c.served {
		c.retakeFailed(err)
		return
	}
	c.failed = err
	c.phase = phaseFailing
	c.abandonAll()
	if c.pending == 0 {
		c.finishFailure()
	}
}

// failClosingWon fails an opening whose first chain a rival took (while
// every chain was started at once, or found by a hold check): the later chains this process won are
// closed cleanly (sealed, nothing admitted), not abandoned, so that the
// rival, which holds the first, takes them over from a clean seal rather
// than finding a live owner there; the others are abandoned, the last
// started first.
func (c *Core) failClosingWon(err error) {
	c.failed = err
	c.phase = phaseFailing
	for i := len(c.abandonOrder) - 1; i >= 0; i-- {
		class := c.abandonOrder[i]
		ch := &c.chains[class]
		switch {
		case !ch.started:
		case ch.open:
			ch.out = true
			c.ask(CloseChain{Class: class})
		default:
			ch.out = true
			c.ask(Abandon{Class: class})
		}
	}
	if c.pending == 0 {
		c.finishFailure()
	}
}

func (c *Core) abandonAll() {
	for i := len(c.abandonOrder) - 1; i >= 0; i-- {
		class := c.abandonOrder[i]
		ch := &c.chains[class]
		if ch.started {
			ch.out = true
			c.ask(Abandon{Class: class})
		}
	}
}

func (c *Core) finishFailure() {
	c.phase = phaseDone
	c.out.Opened = &Result{Err: c.failed}
}

func (c *Core) onAbandoned(ev Abandoned) error {
	ch := &c.chains[ev.Class]
	if int(ev.Class) >= NumClasses || !ch.started || !ch.out {
		return c.unexpected(ev)
	}
	ch.started, ch.open, ch.out = false, false, false
	switch c.phase {
	case phaseStarting:
		// The lost chain's lane is gone: start its takeover again.
		c.start(ev.Class)
	case phaseFailing:
		if c.pending == 0 {
			c.finishFailure()
		}
	case phaseClosing:
		if c.pending == 0 {
			c.releaseHost()
		}
	default:
		return c.unexpected(ev)
	}
	return nil
}

// Close starts the close: every chain this process started closes at once
// (a clean close: flush, absorb, seal), then what the host opened for the
// star is released. It returns an error if the star is not serving.
func (c *Core) Close() error {
	if c.phase != phaseServing {
		return fmt.Errorf("starcore: close star %s: the leadership is %s, not serving", c.cfg.Star, c.phase)
	}
	c.phase = phaseClosing
	for _, class := range c.cfg.Classes {
		if ch := &c.chains[class]; ch.started {
			ch.out = true
			c.ask(CloseChain{Class: class})
		}
	}
	if c.pending == 0 {
		c.releaseHost()
	}
	return nil
}

// Crash stops the star the way a dying process does (for tests): every
// chain started is abandoned (no flush, no seal), then what the host
// opened is released. It returns an error if the star is not serving.
func (c *Core) Crash() error {
	if c.phase != phaseServing {
		return fmt.Errorf("starcore: crash star %s: the leadership is %s, not serving", c.cfg.Star, c.phase)
	}
	c.phase, c.crash = phaseClosing, true
	for _, class := range c.cfg.Classes {
		if ch := &c.chains[class]; ch.started {
			ch.out = true
			c.ask(Abandon{Class: class})
		}
	}
	if c.pending == 0 {
		c.releaseHost()
	}
	return nil
}

func (c *Core) onChainClosed(ev ChainClosed) error {
	if int(ev.Class) >= NumClasses {
		return c.unexpected(ev)
	}
	ch := &c.chains[ev.Class]
	if c.phase == phaseFailing && ch.started && ch.out {
		// A chain won while the first was lost (failClosingWon): closed.
		// A close that failed leaves it to be taken over as after a crash.
		ch.started, ch.open, ch.out = false, false, false
		if ev.Err != nil {
			c.logf("closing a chain won while the star's first chain was lost failed", "star", c.cfg.Star, "class", ev.Class.String(), "err", ev.Err)
		}
		if c.pending == 0 {
			c.finishFailure()
		}
		return nil
	}
	if c.phase != phaseClosing || !ch.started || !ch.out || c.crash {
		return c.unexpected(ev)
	}
	ch.started, ch.open, ch.out, ch.closeErr = false, false, false, ev.Err
	if c.pending == 0 {
		c.releaseHost()
	}
	return nil
}

// releaseHost: every chain is closed; release what the host opened for
// the star (a bbolt file), after them.
func (c *Core) releaseHost() {
	c.phase = phaseReleasing
	c.ask(ReleaseHost{})
}

func (c *Core) onHostReleased(ev HostReleased) error {
	if c.phase != phaseReleasing {
		return c.unexpected(ev)
	}
	c.phase = phaseDone
	var errs []error
	if !c.crash {
		for _, class := range c.cfg.Classes {
			errs = append(errs, c.chains[class].closeErr)
		}
		errs = append(errs, ev.Errs...)
	}
	c.out.Closed = &Result{Err: errors.Join(errs...)}
	return nil
}
