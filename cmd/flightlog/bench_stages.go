package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/internal/stages"
	"github.com/flightlog/flightlog/loglet"
)

// stageFigures is where the acked batches' time went, per stage, as
// internal/stages defines it (the write-path benchmark's cut-over,
// claim-put, wth-copy, order-wait, to-producer and own-cost), in µs.
type stageFigures struct {
	// FlushDeadline is the deadline the cut-over and the ideal release
	// are measured against: the class's, defaults applied.
	FlushDeadline string `json:"flush_deadline"`
	// Batches is the acked batches counted; Skipped, those whose trace
	// missed a stage (acked by a fence without the W-th copy seen).
	Batches int `json:"batches"`
	Skipped int `json:"skipped,omitempty"`
	// CutOver: the claim past the oldest pooled batch's submission plus
	// the flush deadline (0 for a flight cut by size or before it).
	CutOver latency `json:"cut_over"`
	// ClaimPut: the claim to the first PUT (the render).
	ClaimPut latency `json:"claim_put"`
	// WthCopy: the first PUT to the W-th copy confirmed.
	WthCopy latency `json:"wth_copy"`
	// OrderWait: the W-th copy to the release (earlier slots).
	OrderWait latency `json:"order_wait"`
	// ToProducer: the release to the producer seeing its ack.
	ToProducer latency `json:"to_producer"`
	// OwnCost: the producer seeing its ack past the ideal ordered release
	// (each flight cut exactly at its deadline or when it filled, its W-th
	// copy taking what the store took, released once it and every
	// earlier slot are durable).
	OwnCost latency `json:"own_cost"`
}

// stageCollectors gathers the producers' batches, one collector each (a
// collector is not safe for concurrent use).
type stageCollectors []stages.Collector

// add counts an acked batch f whose ack its producer p saw at seen.
func (cs stageCollectors) add(p int, f *loglet.AckFuture, seen time.Time) {
	if tr, ok := f.Trace(); ok {
		cs[p].Add(stages.Trace(tr), seen)
	}
}

// figures merges the producers' batches into the breakdown under the flush
// deadline.
func (cs stageCollectors) figures(deadline time.Duration) *stageFigures {
	var all stages.Collector
	for i := range cs {
		all.Merge(&cs[i])
	}
	b := all.Breakdown(deadline)
	var l [stages.NumStages]latency
	for _, s := range stages.All() {
		sn := b.Snapshot(s)
		l[s] = latency{us(sn.Quantile(0.5)), us(sn.Quantile(0.99)), us(sn.Quantile(0.999))}
	}
	return &stageFigures{
		FlushDeadline: deadline.String(), Batches: b.Batches, Skipped: b.Skipped,
		CutOver: l[stages.CutOver], ClaimPut: l[stages.ClaimPut], WthCopy: l[stages.WthCopy],
		OrderWait: l[stages.OrderWait], ToProducer: l[stages.ToProducer], OwnCost: l[stages.OwnCost],
	}
}

// flushDeadline is the class's flush deadline in cc, defaults applied.
func flushDeadline(cc *loglet.ClassConfig, class chain.Class) time.Duration {
	if cc.FlushDeadline > 0 {
		return cc.FlushDeadline
	}
	if class == chain.Express {
		return loglet.DefaultExpressFlushDeadline
	}
	return loglet.DefaultStandardFlushDeadline
}

// printStages prints the stage table.
func printStages(w io.Writer, st *stageFigures) {
	if st == nil {
		return
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "stage (µs; %d batches, flush deadline %s)\tp50\tp99\tp99.9\t\n", st.Batches, st.FlushDeadline)
	row := func(name string, l latency) {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t\n", name, l.P50, l.P99, l.P999)
	}
	row("cut-over (cut past the deadline)", st.CutOver)
	row("claim-put (render)", st.ClaimPut)
	row("wth-copy (first PUT to W-th copy)", st.WthCopy)
	row("order-wait (earlier slots)", st.OrderWait)
	row("to-producer (release to ack seen)", st.ToProducer)
	row("own-cost (ack past ideal release)", st.OwnCost)
	tw.Flush()
	if st.Skipped > 0 {
		fmt.Fprintf(w, "  (%d acked batches not counted: acked by a fence without their W-th copy seen)\n", st.Skipped)
	}
	fmt.Fprintln(w)
}
