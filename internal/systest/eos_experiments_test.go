package systest

import (
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
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

// TestExperimentZombieFencing: the short form of zombie-fencing (the
// successor commits for 4 s while the zombie is paused): the successor's
// epoch is above the zombie's, the resumed zombie is refused as fenced
// and exits 1, and read_committed sees every committed record of the
// successor and none of the zombie's, which read_uncommitted shows aborted
// (the verdict checks each, the checker exactly-once).
func TestExperimentZombieFencing(t *testing.T) {
	o := runExperiment(t, "zombie-fencing", 4*time.Second)
	if x := o.Result.Txn; x == nil || x.Committed == 0 || x.AbortedSeenUncommitted == 0 || o.Result.Counts[check.ZombieCommit] != 0 {
		t.Fatalf("transactions %+v, counts %v: want committed ones, aborted writes seen read_uncommitted, no zombie commit", x, o.Result.Counts)
	}
}

// TestExperimentHangingTransaction: the short form of hanging-transaction
// (12 s, so a 4 s transaction timeout), and issue 13's end-to-end test of
// "a transaction left open is aborted by the timeout and the LSO moves on":
// a SIGKILLed producer's open transaction holds a read_committed reader at
// its first offset until the coordinator's timeout aborts it, then the LSO
// moves on and the reader gets the committed records above it (the
// verdict: the stretch is at that offset, ended by the LSO moving, no
// sooner than the timeout after the transaction began; reads above it
// after the move).
func TestExperimentHangingTransaction(t *testing.T) {
	o := runExperiment(t, "hanging-transaction", 12*time.Second)
	h := o.Result.Txn.LongestLSOHang
	if h == nil || !h.Moved || h.Caught || o.Result.Counts[check.HungLSO] == 0 {
		t.Fatalf("longest LSO stretch %+v, counts %v: want one that ended with the LSO moving, counted as hung-lso", h, o.Result.Counts)
	}
	t.Logf("LSO hung %.1f s at %d (lag up to %d records), transaction timeout 4s", h.Seconds, h.LSO, h.MaxHW-h.LSO)
}
