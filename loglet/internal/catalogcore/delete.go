package catalogcore

// Delete removes a name's record: it commits the record's removal (expecting
// the version read) with its deleted marker; a failed commit re-reads, and
// the record gone or another incarnation's means it applied. Once applied
// it retires the incarnation (no append is admitted to it from then on),
// waits until what was admitted before has its outcome, and finishes the
// delete (FinishDelete) from the marker. A name with no record cleans up
// after an earlier delete that applied but reported failure, and is
// NotFound. A record that does not decode is deleted without a marker
// (nothing names its data).
type Delete struct {
	op
	name    string
	rec     Record
	corrupt bool
	err     error // the commit's
	marker  Version
	sub     *FinishDelete
	// end2 is the outcome once the trailing requests (forget, warn) are
	// done; afterWarn: the delete goes on (finishes) after its warning.
	end2      Outcome
	afterWarn bool
}

// NewDelete starts a delete of name.
func NewDelete(name string) *Delete {
	d := &Delete{name: name}
	d.ask(ReadRecord{Name: name})
	return d
}

// Step implements Op.
func (d *Delete) Step(res Result) error {
	if d.req == nil {
		return errOver
	}
	if d.sub != nil {
		if err := d.sub.Step(res); err != nil {
			return err
		}
		if next := d.sub.Next(); next != nil {
			d.req = next
			return nil
		}
		out := d.sub.Outcome()
		d.sub = nil
		if out.Status == Failed {
			d.warnThen("reclaiming a deleted stream's data failed; the retention pass retries", out.Err, d.deleted())
			return nil
		}
		d.end(d.deleted())
		return nil
	}
	switch req := d.req.(type) {
	case ReadRecord:
		r, ok := res.(RecordRead)
		if !ok {
			return mismatch(req, res)
		}
		if d.rec.Name != "" { // the re-read after a failed commit
			d.verified(r)
			return nil
		}
		switch {
		case r.NotFound:
			// Perhaps the retry of a delete that applied and reported
			// failure: finish what its marker says.
			d.end2 = Outcome{Status: NotFound}
			d.ask(ForgetName{Name: d.name})
		case r.Corrupt:
			d.rec, d.corrupt = r.Record, true
			d.rec.Name = d.name
			d.ask(CommitDelete{Record: d.rec})
		case r.Err != nil:
			d.end(Outcome{Status: Failed, Err: r.Err})
		default:
			d.rec = r.Record
			d.ask(CommitDelete{Record: d.rec, Marker: true})
		}
	case CommitDelete:
		r, ok := res.(CommitDone)
		if !ok {
			return mismatch(req, res)
		}
		switch {
		case r.Err == nil:
			d.marker = r.MarkerVersion
			d.applied()
		case d.corrupt:
			d.err = r.Err
			d.end2 = Outcome{Status: Failed, Err: r.Err}
			d.ask(ForgetName{Name: d.name})
		default:
			d.err = r.Err
			d.ask(ReadRecord{Name: d.name})
		}
	case ForgetName:
		if _, ok := res.(Done); !ok {
			return mismatch(req, res)
		}
		if d.end2.Status == NotFound {
			d.ask(FinishDeletesOf{Name: d.name})
			return nil
		}
		d.end(d.end2)
	case FinishDeletesOf:
		if _, ok := res.(Done); !ok {
			return mismatch(req, res)
		}
		d.end(d.end2)
	case Warn:
		if _, ok := res.(Done); !ok {
			return mismatch(req, res)
		}
		if d.afterWarn {
			d.afterWarn = false
			d.finish()
			return nil
		}
		d.end(d.end2)
	case Retire:
		r, ok := res.(Retired)
		if !ok {
			return mismatch(req, res)
		}
		if r.Served && r.Admitted > 0 {
			// Appends admitted before the delete keep their course: no
			// ack for the incarnation follows the delete's return.
			d.ask(AwaitReleased{Record: d.rec, Seq: r.Admitted})
			return nil
		}
		d.finish()
	case AwaitReleased:
		r, ok := res.(Awaited)
		if !ok {
			return mismatch(req, res)
		}
		if r.Err != nil {
			d.warnThen("stream deleted; appends admitted before the delete still had no outcome when the context ended", r.Err, Outcome{})
			return nil
		}
		d.finish()
	case ReadMarker:
		r, ok := res.(MarkerRead)
		if !ok {
			return mismatch(req, res)
		}
		if r.Err != nil {
			d.warnThen("stream deleted; reading its marker failed: the retention pass reclaims its data", r.Err, d.deleted())
			return nil
		}
		d.marker = r.Version
		d.sub = NewFinishDelete(d.rec, d.marker)
		d.req = d.sub.Next()
	default:
		return mismatch(d.req, res)
	}
	return nil
}

// verified resolves a failed commit by the record re-read.
func (d *Delete) verified(r RecordRead) {
	if r.NotFound || r.Err == nil && !r.Corrupt && r.Record.ID() != d.rec.ID() {
		d.applied() // gone, or another incarnation's: it applied
		return
	}
	// Not known to have applied: the next lookup reads the record again.
	d.end2 = Outcome{Status: Failed, Err: d.err}
	if r.Err != nil && !r.NotFound {
		d.end2.Cause = r.Err
	}
	d.ask(ForgetName{Name: d.name})
}

// applied goes on once the commit applied.
func (d *Delete) applied() {
	if d.corrupt {
		d.end2 = d.deleted()
		d.ask(ForgetName{Name: d.name})
		return
	}
	d.ask(Retire{Record: d.rec})
}

// finish finishes the delete from its marker, read first if the commit did
// not report its version.
func (d *Delete) finish() {
	if d.marker == NoVersion {
		d.ask(ReadMarker{Record: d.rec})
		return
	}
	d.sub = NewFinishDelete(d.rec, d.marker)
	d.req = d.sub.Next()
}

func (d *Delete) deleted() Outcome { return Outcome{Status: Deleted, Record: d.rec} }

// warnThen logs a failure, then ends with out (or finishes, if out is the
// zero Outcome).
func (d *Delete) warnThen(msg string, err error, out Outcome) {
	d.end2, d.afterWarn = out, out.Status == Pending
	d.ask(Warn{Msg: msg, Err: err})
}

// FinishDelete finishes a deleted incarnation from its marker: it retires
// the incarnation here (if not already), reclaims every ref of it, and
// deletes the marker once nothing more can come (this process serves the
// chain and it is drained, checked before the reclaim so every ref the
// absorb will write is there by then). Otherwise the marker stays for the
// next pass, or for the leader of the stream's star.
type FinishDelete struct {
	op
	rec     Record
	marker  Version
	drained bool
}

// NewFinishDelete starts the cleanup of rec's incarnation, whose marker is
// at version marker.
func NewFinishDelete(rec Record, marker Version) *FinishDelete {
	f := &FinishDelete{rec: rec, marker: marker}
	f.ask(Retire{Record: rec})
	return f
}

// Step implements Op.
func (f *FinishDelete) Step(res Result) error {
	if f.req == nil {
		return errOver
	}
	switch req := f.req.(type) {
	case Retire:
		r, ok := res.(Retired)
		if !ok {
			return mismatch(req, res)
		}
		if r.Served {
			f.ask(CheckDrained{Record: f.rec})
			return nil
		}
		f.ask(Reclaim{Record: f.rec})
	case CheckDrained:
		r, ok := res.(DrainChecked)
		if !ok {
			return mismatch(req, res)
		}
		f.drained = r.Drained
		f.ask(Reclaim{Record: f.rec})
	case Reclaim:
		r, ok := res.(Reclaimed)
		if !ok {
			return mismatch(req, res)
		}
		switch {
		case r.Err != nil:
			f.end(Outcome{Status: Failed, Record: f.rec, Err: r.Err})
		case !f.drained:
			f.end(Outcome{Status: Finished, Record: f.rec})
		default:
			f.ask(DeleteMarker{Record: f.rec, Version: f.marker})
		}
	case DeleteMarker:
		r, ok := res.(MarkerDeleted)
		if !ok {
			return mismatch(req, res)
		}
		if r.Err != nil && !r.NotFound && !r.Conflict {
			f.end(Outcome{Status: Failed, Record: f.rec, Err: r.Err})
			return nil
		}
		f.end(Outcome{Status: Finished, Record: f.rec, Drained: true})
	default:
		return mismatch(f.req, res)
	}
	return nil
}
