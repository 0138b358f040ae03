package systest

import (
	"testing"
	"time"
)

// TestExperimentEOSReadProcessWrite: the short form of
// eos-read-process-write (SIGKILLs of the processor for 8 s): the output
// read read_committed has every input exactly once (checker, exactly-once,
// and the verdict's read-back of every acknowledged input), and the
// read_uncommitted read shows aborted attempts.
func TestExperimentEOSReadProcessWrite(t *testing.T) {
	o := runExperiment(t, "eos-read-process-write", 8*time.Second)
	if o.Result.Txn == nil || o.Result.Txn.Committed == 0 || o.Result.Txn.Aborted == 0 {
		t.Fatalf("transactions %+v: want committed and aborted ones", o.Result.Txn)
	}
}

// TestExperimentEOSExternalEffect: the short form of eos-external-effect:
// the output exactly once, the plain SMS receiver with duplicates, the
// idempotent one (keyed by event_id) without (the verdict checks each).
func TestExperimentEOSExternalEffect(t *testing.T) {
	o := runExperiment(t, "eos-external-effect", 8*time.Second)
	if o.Result.Txn == nil || o.Result.Txn.ExternalDuplicates == 0 {
		t.Fatalf("transactions %+v: want external duplicates (of the plain receiver)", o.Result.Txn)
	}
}
