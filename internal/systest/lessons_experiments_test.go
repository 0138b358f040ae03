package systest

import (
	"testing"
	"time"
)

// TestExperimentDedupeWindow: a replay from the start into a sink whose
// dedupe window (8 s here) is shorter than the replay horizon applies
// exactly the records older than the window twice; a 5,000-id window
// covering the replay applies none twice, and a 200-id window every
// replayed record (the experiment's verdict checks each, record by
// record).
func TestExperimentDedupeWindow(t *testing.T) {
	o := runExperiment(t, "dedupe-window", 8*time.Second)
	if o.Result.Acked != 600 {
		t.Fatalf("acked %d records, want 600", o.Result.Acked)
	}
}

// TestExperimentSchemaReplay: a replay over version 1, version 2 and one
// version 3 record applies every known one, dead-letters the version 3
// one with its reason, and loses nothing.
func TestExperimentSchemaReplay(t *testing.T) {
	runExperiment(t, "schema-replay", 0)
}

// TestExperimentRetentionOutrunsConsumer: retention deletes records the
// slow consumer never read; its gap is reported exactly and restored from
// the archive group's mirror: nothing never processed at the end.
func TestExperimentRetentionOutrunsConsumer(t *testing.T) {
	runExperiment(t, "retention-outruns-consumer", 0)
}
