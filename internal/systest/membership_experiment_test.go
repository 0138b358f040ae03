package systest

import "testing"

// TestExperimentMembership: a short membership run (two reassignments, one
// with the partition's leader killed mid-way and one with a broker cut off,
// then a broker drained) under an idempotent acks=all producer: every
// reassignment completes and the checker finds zero anomalies.
func TestExperimentMembership(t *testing.T) {
	o := runExperiment(t, "membership", 1)
	if o.Result.Acked == 0 {
		t.Fatal("nothing was acknowledged: the run proves nothing")
	}
}
