package systest

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
	"github.com/tapes-dev/tapes/internal/experiment"
)

// runExperiment runs a built-in experiment with the binaries under test and
// its default seed.
func runExperiment(t *testing.T, name string, d time.Duration) *experiment.Outcome {
	t.Helper()
	return runExperimentIn(t, name, d, filepath.Join(t.TempDir(), name), false)
}

// runExperimentIn runs it with its output in out, on hosts of their own
// when onHosts (experiment.Options.Netns).
func runExperimentIn(t *testing.T, name string, d time.Duration, out string, onHosts bool) *experiment.Outcome {
	t.Helper()
	x, ok := experiment.Lookup(name)
	if !ok {
		t.Fatalf("no experiment %s", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	o, err := experiment.Run(ctx, x, experiment.Options{Seed: 1, Duration: d, Out: out, Stdout: testWriter{t}, Netns: onHosts,
		Bins: experiment.Binaries{Brokerd: filepath.Join(binDir, "brokerd"), Producerd: filepath.Join(binDir, "producerd"), Consumerd: filepath.Join(binDir, "consumerd")}})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	t.Logf("%s: counts %v; report %s", name, o.Result.Counts, o.Report)
	if !o.Valid {
		for i, a := range o.Result.Anomalies {
			if i < 10 {
				t.Log(a.String())
			}
		}
		t.Fatalf("%s: expectation %q not met: %v", name, x.Expect.Name, o.Why)
	}
	return o
}

// testWriter sends an experiment's progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}

// TestExperimentAcks1LosesAcknowledgedWrites: with its default seed,
// acks1-leader-isolation must lose at least one acknowledged write (its
// expectation is lost-write > 0, so a run that loses none fails rather than
// passing silently), and the checker names the records and their offsets.
//
// `chaos check --dir` on the run's directory, once its cluster is gone,
// checks it again from the run's own files (the histories and
// check-input.json: the expectation and the full read) and finds the same
// counts, and the experiment's expectation met (exit 0).
func TestExperimentAcks1LosesAcknowledgedWrites(t *testing.T) {
	out := filepath.Join(t.TempDir(), "acks1")
	o := runExperimentIn(t, "acks1-leader-isolation", 0, out, false)
	if len(o.Result.Anomalies) == 0 || len(o.Result.Anomalies[0].Offsets) == 0 || len(o.Result.Anomalies[0].EventIDs) == 0 {
		t.Fatalf("lost writes not named with their offsets: %+v", o.Result.Anomalies)
	}
	cmd := exec.Command(filepath.Join(binDir, "chaos"), "check", "--dir", out, "--json")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("chaos check --dir %s: %v\n%s", out, err, stderr.String())
	}
	var again check.Result
	if err := json.Unmarshal(b, &again); err != nil {
		t.Fatalf("chaos check --json: %v\n%s", err, b)
	}
	if !maps.Equal(again.Counts, o.Result.Counts) || again.LogRecords != o.Result.LogRecords {
		t.Fatalf("chaos check --dir: counts %v, %d records read in full; the run's %v, %d", again.Counts, again.LogRecords, o.Result.Counts, o.Result.LogRecords)
	}
}

// TestExperimentAcksAllLosesNothing: the same faults with acks=all and
// min.insync.replicas=2: the safe profile, zero anomalies.
func TestExperimentAcksAllLosesNothing(t *testing.T) {
	o := runExperiment(t, "acksall-leader-isolation", 0)
	if o.Result.Acked == 0 {
		t.Fatal("nothing was acknowledged: the run proves nothing")
	}
}

// TestExperimentNemesisSafeProfile: about 60 s of random kills, pauses and
// partitions of brokers and consumers under the safe profile: zero
// anomalies, and work was really done.
func TestExperimentNemesisSafeProfile(t *testing.T) {
	o := runExperiment(t, "nemesis", 45*time.Second)
	if o.Result.Acked == 0 || o.Result.Processed == 0 {
		t.Fatalf("acked %d, processed %d: the run proves nothing", o.Result.Acked, o.Result.Processed)
	}
}

// TestExperimentHotKeySalting: a short hot-key-salting run. Its verdict
// checks the lesson: unsalted, key-0 is on one partition whose lag is far
// above the others'; salted, it spreads and some of its effects are out of
// key order; resequenced, none is.
func TestExperimentHotKeySalting(t *testing.T) {
	o := runExperiment(t, "hot-key-salting", 6*time.Second)
	if o.Result.Acked == 0 {
		t.Fatal("nothing was acknowledged: the run proves nothing")
	}
}
