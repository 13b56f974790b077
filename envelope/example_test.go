package envelope_test

import (
	"fmt"

	"github.com/flightlog/flightlog/envelope"
)

// A writer renders a flight as a transit bundle; a reader classifies the
// slot from its envelope, lists the frames from the footer and decodes one.
func Example() {
	var records []byte
	for i, body := range []string{`{"order":1}`, `{"order":2}`} {
		records = envelope.AppendRecord(records, envelope.Record{
			Timestamp: 1_760_000_000_000 + int64(i),
			Headers:   []envelope.Header{{Name: []byte("source"), Value: []byte("web")}},
			Body:      []byte(body),
		})
	}
	w := envelope.NewBundleWriter()
	if err := w.AddFrame("orders", 40, 2, 1_760_000_000_000, 1_760_000_000_001, records, envelope.CodecS2); err != nil {
		panic(err)
	}
	nonce := envelope.Nonce{7}
	obj, _ := w.Finish(3, 12, nonce)

	env, err := envelope.ParseEnvelope(obj[:envelope.EnvelopeSize])
	if err != nil {
		panic(err)
	}
	fmt.Println(env.Kind, "epoch", env.Epoch, "slot", env.Slot, "ours:", env.IsFlightOf(3, 12, nonce))
	frames, err := envelope.ParseFooter(env, obj[env.FooterOffset:env.Size])
	if err != nil {
		panic(err)
	}
	for _, f := range frames {
		recs, err := envelope.DecodeFrame(f, obj[f.Offset:f.End()])
		if err != nil {
			panic(err)
		}
		for i, r := range recs {
			fmt.Printf("%s seq %d: %s (%s=%s)\n", f.Stream, f.FirstSeq+uint64(i), r.Body, r.Headers[0].Name, r.Headers[0].Value)
		}
	}

	poison, _ := envelope.ParseEnvelope(envelope.Poison(3, 13, envelope.NewNonce()))
	fmt.Println(poison.Kind, "slot", poison.Slot, "ours:", poison.IsFlightOf(3, 13, nonce))

	obj[frames[0].Offset+2] ^= 1 // a flipped bit in the stored frame
	_, err = envelope.DecodeFrame(frames[0], obj[frames[0].Offset:frames[0].End()])
	fmt.Println("corrupt:", envelope.IsCorruption(err))
	// Output:
	// flight epoch 3 slot 12 ours: true
	// orders seq 40: {"order":1} (source=web)
	// orders seq 41: {"order":2} (source=web)
	// poison slot 13 ours: false
	// corrupt: true
}
