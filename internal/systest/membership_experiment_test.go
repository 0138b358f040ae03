package systest

import "testing"

// TestExperimentMembership: a short membership run (three reassignments:
// with the partition's leader killed mid-way, with a broker cut off, with
// the controller quorum's leader killed; then a broker drained) under an
// idempotent acks=all producer: every reassignment completes and the
// checker finds zero anomalies.
func TestExperimentMembership(t *testing.T) {
	o := runExperiment(t, "membership", 1)
	if o.Result.Acked == 0 {
		t.Fatal("nothing was acknowledged: the run proves nothing")
	}
}
