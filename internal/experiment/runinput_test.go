package experiment

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
)

// TestRunInputKeepsHungLSOThreshold: what the runner records in
// check-input.json comes back from RunInput as the checker's input, the
// hung-lso threshold of hanging-transaction (half its timeout) included,
// so `chaos check --dir` judges a hung LSO as the run did.
func TestRunInputKeepsHungLSOThreshold(t *testing.T) {
	dir := t.TempDir()
	rec := RecordedCheck{
		Experiment:     "hanging-transaction",
		Expect:         check.Expectation{Name: "exactly-once, hung-lso", MustBePositive: []string{check.HungLSO}},
		Topic:          "orders",
		HungLSOAfterMS: 1500,
	}
	if err := writeCheckInput(dir, rec); err != nil {
		t.Fatal(err)
	}
	in, got, err := RunInput(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Experiment != rec.Experiment || got.Topic != rec.Topic {
		t.Fatalf("recorded check %+v, want %+v", got, rec)
	}
	if in.HungLSOAfter != 1500*time.Millisecond {
		t.Errorf("hung-lso threshold %v, want 1.5s", in.HungLSOAfter)
	}
	if in.Expect.Name != rec.Expect.Name {
		t.Errorf("expectation %q, want %q", in.Expect.Name, rec.Expect.Name)
	}

	// A run recorded before the threshold was: the checker's default.
	other := t.TempDir()
	rec.HungLSOAfterMS = 0
	if err := writeCheckInput(other, rec); err != nil {
		t.Fatal(err)
	}
	if in, _, err = RunInput(other); err != nil || in.HungLSOAfter != 0 {
		t.Errorf("threshold %v (err %v) without one recorded, want 0 (the checker's default)", in.HungLSOAfter, err)
	}
	if _, _, err := RunInput(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("directory without check-input.json: %v", err)
	}
}
