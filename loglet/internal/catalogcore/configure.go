package catalogcore

// Configure changes one incarnation's per-stream options (its retention):
// it reads the record and writes it with the new options (the shell holds
// them: the core never reads them), expecting the version read, so a
// concurrent trim, configure or delete is never overwritten. The
// incarnation is inc, or, if inc is "", the one the first read finds: a
// retry after a conflict that finds another incarnation (the name deleted
// and created again) is NotFound, so a change never lands on an
// incarnation its caller did not read. A conflict with the same
// incarnation (a trim moved the record) re-reads and writes again, up to
// MaxConfigureAttempts commits: the new options are absolute values, so
// writing them on a newer record is the same change. Without write it
// only reads: Configured with the record as it is.
type Configure struct {
	op
	name, inc string
	pinned    bool // inc is the incarnation to change (given, or read first)
	write     bool
	rec       Record
	attempts  int
}

// NewConfigure starts a configure of name's incarnation inc ("": the one
// read first); write false only reads the record.
func NewConfigure(name, inc string, write bool) *Configure {
	c := &Configure{name: name, inc: inc, pinned: inc != "", write: write}
	c.ask(ReadRecord{Name: name})
	return c
}

// Step implements Op.
func (c *Configure) Step(res Result) error {
	if c.req == nil {
		return errOver
	}
	switch req := c.req.(type) {
	case ReadRecord:
		r, ok := res.(RecordRead)
		if !ok {
			return mismatch(req, res)
		}
		switch {
		case r.NotFound:
			c.end(Outcome{Status: NotFound, Attempts: c.attempts})
		case r.Corrupt:
			c.end(Outcome{Status: Corrupt, Err: r.Err, Attempts: c.attempts})
		case r.Err != nil:
			c.end(Outcome{Status: Failed, Err: r.Err, Attempts: c.attempts})
		case c.pinned && r.Record.Incarnation != c.inc:
			c.end(Outcome{Status: NotFound, Record: r.Record, Err: errRecreated, Attempts: c.attempts})
		case !c.write:
			c.end(Outcome{Status: Configured, Record: r.Record})
		default:
			c.inc, c.pinned = r.Record.Incarnation, true
			c.rec = r.Record
			c.attempts++
			c.ask(PutConfig{Record: r.Record})
		}
	case PutConfig:
		r, ok := res.(ConfigPut)
		if !ok {
			return mismatch(req, res)
		}
		switch {
		case r.Err == nil:
			rec := c.rec
			rec.Version = r.Version
			c.end(Outcome{Status: Configured, Record: rec, Wrote: true, Attempts: c.attempts})
		case r.Conflict && c.attempts < MaxConfigureAttempts:
			c.ask(ReadRecord{Name: c.name})
		default:
			// Not known to have applied: a retry finds out (writing the
			// same options again is the same change).
			c.end(Outcome{Status: Failed, Err: r.Err, Attempts: c.attempts, Exhausted: r.Conflict})
		}
	default:
		return mismatch(c.req, res)
	}
	return nil
}
