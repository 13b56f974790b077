package catalogcore

import "errors"

// op is what every operation shares: the pending request and the outcome.
type op struct {
	req Request
	out Outcome
}

func (o *op) Next() Request    { return o.req }
func (o *op) Outcome() Outcome { return o.out }

func (o *op) ask(r Request) { o.req = r }

func (o *op) end(out Outcome) {
	o.req = nil
	o.out = out
}

// Lookup finds the incarnation of a name this star serves: the cache's, or
// the record read on a miss once the cache accepts it. With create (an
// append under Config.CreateOnAppend) a name with no record, or whose
// record's incarnation was retired meanwhile, is created afresh and looked
// up again (without create: it is looked up at most twice). The record
// read is cached only if the cache did not move since the lookup looked
// (its token): another lookup may have cached another incarnation
// meanwhile, or a delete dropped one, and the record read may be older
// than that; it reads again (the record now is newer) and offers that, up
// to MaxLookupRereads. So the cache never goes back to an incarnation older
// than one it served.
type Lookup struct {
	op
	name, star string
	create     bool
	sub        *Create
	// expect is the cache's token for the name as last seen, rereads the
	// reads since the first.
	expect  string
	rereads int
}

// NewLookup starts a lookup of name on star (the star this process leads).
func NewLookup(name, star string, create bool) *Lookup {
	l := &Lookup{name: name, star: star, create: create}
	l.ask(LookupCache{Name: name})
	return l
}

// Step implements Op.
func (l *Lookup) Step(res Result) error {
	if l.req == nil {
		return errOver
	}
	if l.sub != nil {
		if err := l.sub.Step(res); err != nil {
			return err
		}
		l.afterCreate()
		return nil
	}
	switch req := l.req.(type) {
	case LookupCache:
		r, ok := res.(CacheLooked)
		if !ok {
			return mismatch(req, res)
		}
		if r.Hit {
			l.end(Outcome{Status: Served, Record: r.Record})
			return nil
		}
		l.expect = r.Token
		l.ask(ReadRecord{Name: l.name})
	case ReadRecord:
		r, ok := res.(RecordRead)
		if !ok {
			return mismatch(req, res)
		}
		switch {
		case r.NotFound && l.create:
			l.startCreate()
		case r.NotFound:
			l.end(Outcome{Status: NotFound})
		case r.Corrupt:
			l.end(Outcome{Status: Corrupt, Err: r.Err})
		case r.Err != nil:
			l.end(Outcome{Status: Failed, Err: r.Err})
		case r.Record.Star != l.star:
			l.end(Outcome{Status: NotLeader, Record: r.Record})
		default:
			// The record may be deleted by now: the cache refuses an
			// incarnation a delete retired.
			l.ask(CacheRecord{Record: r.Record, Expect: l.expect})
		}
	case CacheRecord:
		r, ok := res.(Cached)
		if !ok {
			return mismatch(req, res)
		}
		switch {
		case r.Other != "" && l.rereads >= MaxLookupRereads:
			l.end(Outcome{Status: Failed, Err: errChurn})
		case r.Other != "":
			// The cache moved since this lookup looked (another lookup
			// cached an incarnation, or a delete dropped one): what
			// this one read may be older. Read again: the record now is
			// newer than whatever moved the cache.
			l.expect = r.Other
			l.rereads++
			l.ask(ReadRecord{Name: l.name})
		case !r.Retired:
			l.end(Outcome{Status: Served, Record: req.Record})
		case l.create:
			// As if the read had come after the delete: create afresh.
			l.startCreate()
		default:
			l.end(Outcome{Status: NotFound, Record: req.Record, Err: errRetired})
		}
	default:
		return mismatch(l.req, res)
	}
	return nil
}

// errChurn: a lookup that kept finding other incarnations cached.
var errChurn = errors.New("catalogcore: the stream's record kept changing under the lookup")

// errRetired says why a record read was not served.
var errRetired = errors.New("this incarnation was deleted")

func (l *Lookup) startCreate() {
	l.sub = NewCreate(l.name, l.star)
	l.req = l.sub.Next()
}

// afterCreate: a create that won or lost to another's is looked up again,
// without create; any other end of it is the lookup's.
func (l *Lookup) afterCreate() {
	if next := l.sub.Next(); next != nil {
		l.req = next
		return
	}
	out := l.sub.Outcome()
	l.sub = nil
	if out.Status == Created || out.Status == Exists {
		l.create = false
		l.ask(LookupCache{Name: l.name})
		return
	}
	l.end(out)
}

// Create writes a new incarnation of a name: a fresh record (MintRecord),
// committed expecting no record. A failed commit re-reads the record: its
// own (incarnation and nonce) means the commit applied; another's means the
// name is taken (Exists); none after a conflict means the name was created
// and deleted meanwhile, and it tries again with a fresh record, up to
// MaxCreateAttempts (never committing a record it may have written once:
// that incarnation may be deleted by now). A record on this star is offered
// to the cache, replacing what the cache held when the create began (its
// token): if the cache moved since, another incarnation cached may be
// newer, and the create re-reads to learn whether the record is still
// its own.
type Create struct {
	op
	name, star string
	rec        Record
	err        error // the commit's
	conflict   bool
	attempts   int
	// expect is the cache's token for the name as last seen (first: before
	// the commit); created: the record is committed; rereads: the reads
	// since, to learn whether it is still the record.
	expect  string
	created bool
	rereads int
}

// NewCreate starts a create of name; star is the star this process leads.
func NewCreate(name, star string) *Create {
	c := &Create{name: name, star: star}
	c.ask(LookupCache{Name: name})
	return c
}

// Step implements Op.
func (c *Create) Step(res Result) error {
	if c.req == nil {
		return errOver
	}
	switch req := c.req.(type) {
	case LookupCache:
		r, ok := res.(CacheLooked)
		if !ok {
			return mismatch(req, res)
		}
		c.expect = r.Token
		c.ask(MintRecord{Name: c.name})
	case MintRecord:
		r, ok := res.(Minted)
		if !ok {
			return mismatch(req, res)
		}
		if r.Err != nil {
			c.end(Outcome{Status: Failed, Err: r.Err, Attempts: c.attempts})
			return nil
		}
		if r.Record.Name != c.name {
			return errors.New("catalogcore: minted a record of another name")
		}
		c.rec = r.Record
		c.attempts++
		c.ask(CommitCreate{Record: c.rec})
	case CommitCreate:
		r, ok := res.(CommitDone)
		if !ok {
			return mismatch(req, res)
		}
		if r.Err == nil {
			c.committed()
			return nil
		}
		// The conflict may be our own ambiguous write: re-read.
		c.err, c.conflict = r.Err, r.Conflict
		c.ask(ReadRecord{Name: c.name})
	case ReadRecord:
		r, ok := res.(RecordRead)
		if !ok {
			return mismatch(req, res)
		}
		if c.created {
			// The cache moved since the create looked: is the record
			// still ours (then it replaces what the cache holds now)?
			if r.Err == nil && !r.NotFound && !r.Corrupt && r.Record.ID() == c.rec.ID() {
				c.ask(CacheRecord{Record: c.rec, Expect: c.expect})
				return nil
			}
			c.end(Outcome{Status: Created, Record: c.rec, Attempts: c.attempts})
			return nil
		}
		switch {
		case r.Err != nil && !r.NotFound && !r.Corrupt:
			// Not known whether the name was free: never report it
			// taken on a guess.
			c.end(Outcome{Status: Failed, Err: c.err, Cause: r.Err, Attempts: c.attempts})
		case !r.NotFound && !r.Corrupt && r.Record.Incarnation == c.rec.Incarnation && r.Record.Nonce == c.rec.Nonce:
			c.rec.Version = r.Record.Version
			c.committed() // ours: the failure applied
		case !c.conflict:
			c.end(Outcome{Status: Failed, Err: c.err, Attempts: c.attempts})
		case r.NotFound && c.attempts < MaxCreateAttempts:
			// Taken, then free again: created and deleted meanwhile.
			c.ask(MintRecord{Name: c.name})
		default:
			c.end(Outcome{Status: Exists, Record: r.Record, Attempts: c.attempts})
		}
	case CacheRecord:
		r, ok := res.(Cached)
		if !ok {
			return mismatch(req, res)
		}
		if r.Other != "" && c.rereads < MaxLookupRereads {
			// A lookup cached an incarnation (or a delete dropped one)
			// since the create looked: it may be newer than ours.
			c.expect = r.Other
			c.rereads++
			c.ask(ReadRecord{Name: c.name})
			return nil
		}
		// Refused only if a delete of this very incarnation ran
		// meanwhile: created, then deleted. Created all the same.
		c.end(Outcome{Status: Created, Record: c.rec, Attempts: c.attempts})
	default:
		return mismatch(c.req, res)
	}
	return nil
}

// committed: the record is in; a record of this star is offered to the
// cache, replacing what it held when the create looked (older than ours:
// the name had no record when ours committed).
func (c *Create) committed() {
	c.created = true
	if c.rec.Star == c.star {
		c.ask(CacheRecord{Record: c.rec, Expect: c.expect})
		return
	}
	c.end(Outcome{Status: Created, Record: c.rec, Attempts: c.attempts})
}
