package invariants

// Planted bugs. Each names the invariant it breaks; loglet/internal/sim's
// planted tests switch one on at a time and require the checker to catch it.
var (
	// ReleaseOutOfOrder acks a flight as soon as it reaches W copies,
	// without waiting for earlier slots (breaks invariant 1: acks release
	// strictly in slot order).
	ReleaseOutOfOrder Switch

	// AbsorbOverwritesRefs writes span refs as plain puts instead of
	// creates, and never checks which refs a replayed round already wrote
	// (breaks: a span ref is created only if absent, never overwritten).
	AbsorbOverwritesRefs Switch

	// MintIgnoresSeal mints even when the checkpoint carries another
	// owner's seal, overwriting it (breaks the binding seal: an epoch is
	// minted only by the process whose seal the checkpoint carries; the old
	// Reseal did this).
	MintIgnoresSeal Switch

	// RecreateReusesKeys gives every incarnation of a name the same
	// incarnation id, so a re-created stream's keys are its predecessor's
	// (breaks: no record of an old incarnation is ever readable through a
	// new one).
	RecreateReusesKeys Switch

	// DedupeOff admits every batch with a producer identity as if its
	// producer were new (breaks exactly once across retries: a retry of a
	// committed batch is never committed again, and is answered with the
	// original range).
	DedupeOff Switch
)

// ResetPlanted switches every planted bug off.
func ResetPlanted() {
	if Enabled {
		ReleaseOutOfOrder.Set(false)
		AbsorbOverwritesRefs.Set(false)
		MintIgnoresSeal.Set(false)
		RecreateReusesKeys.Set(false)
		DedupeOff.Set(false)
	}
}
