package experiment

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
)

// Files of a run directory (chaos run --out) that `chaos check --dir`
// reads back.
const (
	// EventsFile is written first by every run: its presence is what
	// makes a directory a run directory.
	EventsFile = "events.jsonl"
	// CheckInputFile records what the checker got beyond the histories:
	// the experiment, its expectation and the full read (RecordedCheck).
	CheckInputFile = "check-input.json"
	sinkFile       = "sink.db"
)

// RecordedCheck is check-input.json: what a run's checker read besides the
// history files, so that the run can be checked again, the same way, after
// its cluster is gone.
type RecordedCheck struct {
	Experiment string            `json:"experiment"`
	Expect     check.Expectation `json:"expect"`
	// Topic is the topic read in full ("" when the run did no full read:
	// it created several topics, or none).
	Topic string `json:"topic,omitempty"`
	// HungLSOAfterMS is the checker's hung-lso threshold in milliseconds
	// (0: check.DefaultHungLSOAfter).
	HungLSOAfterMS int64                       `json:"hung_lso_after_ms,omitempty"`
	LogStart       map[int32]int64             `json:"log_start,omitempty"`
	Log            map[int32][]check.LogRecord `json:"log,omitempty"`
}

// IsRunDir reports whether dir is the output directory of a run.
func IsRunDir(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, EventsFile))
	return err == nil
}

// RunInput returns the checker's input of the run in dir: its histories
// (producer-*.jsonl, consumer-*.jsonl, txn-*.jsonl), its sink when there
// is one, and what check-input.json recorded (the expectation and the full
// read; rec is nil for a run without that file).
func RunInput(dir string) (in check.Input, rec *RecordedCheck, err error) {
	in.ProducerHistories, _ = filepath.Glob(filepath.Join(dir, "producer-*.jsonl"))
	in.ConsumerHistories, _ = filepath.Glob(filepath.Join(dir, "consumer-*.jsonl"))
	in.TxnHistories, _ = filepath.Glob(filepath.Join(dir, "txn-*.jsonl"))
	if _, err := os.Stat(filepath.Join(dir, sinkFile)); err == nil {
		in.SinkDB = filepath.Join(dir, sinkFile)
	}
	b, err := os.ReadFile(filepath.Join(dir, CheckInputFile))
	if errors.Is(err, os.ErrNotExist) {
		return in, nil, nil
	}
	if err != nil {
		return in, nil, err
	}
	rec = &RecordedCheck{}
	if err := json.Unmarshal(b, rec); err != nil {
		return in, nil, fmt.Errorf("%s: %w", filepath.Join(dir, CheckInputFile), err)
	}
	in.Expect, in.Log, in.LogStart = rec.Expect, rec.Log, rec.LogStart
	in.HungLSOAfter = time.Duration(rec.HungLSOAfterMS) * time.Millisecond
	return in, rec, nil
}

// writeCheckInput writes rec as dir's check-input.json.
func writeCheckInput(dir string, rec RecordedCheck) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, CheckInputFile), append(b, '\n'), 0o644)
}
