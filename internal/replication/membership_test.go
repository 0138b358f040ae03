package replication

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/eventually"
	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/storage"
)

// TestReassignStepsMoveVoters moves a group from 1,2,3 to the two
// non-leaders and 4 with ReassignStep, taking the leader off: broker 4
// joins without bootstrapping, is added as a non-voter, catches up and is
// promoted; the leader hands over, and its successor, deciding from the
// Raft configuration alone, resumes and removes broker 1. Broker 4 then
// holds every committed record.
func TestReassignStepsMoveVoters(t *testing.T) {
	muxes := newMuxes(t, 4)
	reps := make([]*Replica, 4)
	all := []metadata.BrokerID{1, 2, 3}
	for i := range 3 {
		reps[i] = openTestReplica(t, muxes[i], t.TempDir(), metadata.BrokerID(i+1), all, nil)
	}
	leader := func() *Replica { return reps[readyLeader(t, reps, -1)] }
	l := leader()
	for i := range 20 {
		if _, err := produceValues(t, l, AcksAll, storage.NoProducer, "v", string(rune('a'+i))); err != nil {
			t.Fatal(err)
		}
	}
	reps[3] = openTestReplica(t, muxes[3], t.TempDir(), 4, []metadata.BrokerID{1, 2, 3, 4}, nil, func(c *Config) { c.Join = true })
	if v, _ := reps[3].Membership(); len(v) != 0 {
		t.Fatalf("a joining replica bootstrapped itself with voters %v", v)
	}
	leaving := l.cfg.LocalID
	var target []metadata.BrokerID
	for _, id := range all {
		if id != leaving {
			target = append(target, id)
		}
	}
	target = append(target, 4)
	tracked := append(slices.Clone(target), leaving)
	var kinds []StepKind
	eventually.True(t, 60*time.Second, "the reassignment to finish", func() bool {
		l := leader()
		l.SetReplicas(tracked)
		step, err := l.ReassignStep(target, 5*time.Second)
		if err != nil {
			t.Logf("step: %v", err)
			return false
		}
		l.SetReplicas(tracked)
		if len(kinds) == 0 || kinds[len(kinds)-1] != step.Kind {
			kinds = append(kinds, step.Kind)
		}
		return step.Kind == StepDone
	})
	for _, want := range []StepKind{StepAddLearner, StepPromote, StepTransfer, StepRemove, StepDone} {
		if !slices.Contains(kinds, want) {
			t.Errorf("steps %v lack %s", kinds, want)
		}
	}
	l = leader()
	if l.cfg.LocalID == leaving {
		t.Fatalf("broker %d, leaving, still leads", leaving)
	}
	if v, lr := l.Membership(); !sameIDs(v, target) || len(lr) != 0 {
		t.Fatalf("voters %v non-voters %v, want %v", v, lr, target)
	}
	if _, err := produceValues(t, l, AcksAll, storage.NoProducer, "after"); err != nil {
		t.Fatal(err)
	}
	want := valuesAt(t, l)
	eventually.True(t, 30*time.Second, "broker 4 to hold the leader's log", func() bool {
		return slices.Equal(valuesAt(t, reps[3]), want)
	})
}

func sameIDs(a, b []metadata.BrokerID) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// TestReassignStepsThrottledLearner: a learner joining a group that holds
// about 1 MiB, throttled to 256 KiB/s, catches up through the throttle (by
// AppendEntries; and by InstallSnapshot when the leader's log is compacted
// below it) and is then promoted. The leader's transport throttles it, and
// only it, until its promotion, and reports what it received. The promotion
// cannot come before (bytes - burst) / rate: that many bytes could not
// pass the bucket sooner (causality, not a speed figure).
func TestReassignStepsThrottledLearner(t *testing.T) {
	for _, c := range []struct {
		name     string
		snapshot bool
	}{{"append-entries", false}, {"install-snapshot", true}} {
		t.Run(c.name, func(t *testing.T) {
			const rate = 256 << 10
			muxes := newMuxes(t, 4)
			reps := make([]*Replica, 4)
			all := []metadata.BrokerID{1, 2, 3}
			opts := func(cfg *Config) {
				if c.snapshot {
					cfg.Raft.TrailingLogs = 1 // a snapshot leaves (almost) no log behind
				}
			}
			for i := range 3 {
				reps[i] = openTestReplica(t, muxes[i], t.TempDir(), metadata.BrokerID(i+1), all, nil, opts)
			}
			l := reps[readyLeader(t, reps, -1)]
			value := strings.Repeat("x", 1<<10)
			data := 0
			for b := range 16 {
				values := make([]string, 64)
				for i := range values {
					values[i] = fmt.Sprintf("%02d-%02d-%s", b, i, value)
					data += len(values[i])
				}
				if _, err := produceValues(t, l, AcksAll, storage.NoProducer, values...); err != nil {
					t.Fatal(err)
				}
			}
			if c.snapshot {
				if err := l.raft.Snapshot().Error(); err != nil {
					t.Fatal(err)
				}
			}
			reps[3] = openTestReplica(t, muxes[3], t.TempDir(), 4, []metadata.BrokerID{1, 2, 3, 4}, nil,
				opts, func(c *Config) { c.Join = true })
			target := []metadata.BrokerID{1, 2, 3, 4}
			adding := []metadata.BrokerID{4}
			trans := l.cfg.Transport
			start := time.Now()
			var (
				kinds      []StepKind
				throttled  bool // seen throttled during the catch-up
				promotedAt time.Duration
			)
			eventually.True(t, 60*time.Second, "broker 4 to be promoted", func() bool {
				for _, r := range reps {
					r.SetReplicas(target)
					r.SetThrottle(adding, rate)
				}
				step, err := l.ReassignStep(target, 5*time.Second)
				if err != nil {
					t.Fatalf("step: %v", err) // one leader all along: no step may fail
				}
				if len(kinds) == 0 || kinds[len(kinds)-1] != step.Kind {
					kinds = append(kinds, step.Kind)
				}
				if step.Kind == StepCatchUp || step.Kind == StepAddLearner {
					if got := trans.Throttle("4"); got != rate {
						t.Fatalf("during the catch-up broker 4's throttle is %d, want %d", got, rate)
					}
					if trans.Throttle("2")+trans.Throttle("3") != 0 {
						t.Fatalf("voters throttled: 2=%d 3=%d", trans.Throttle("2"), trans.Throttle("3"))
					}
					for _, f := range l.Status().Followers {
						if f.Broker == 4 && f.Throttle == rate {
							throttled = true
						}
					}
				}
				if step.Kind == StepPromote {
					promotedAt = time.Since(start)
					return true
				}
				return false
			})
			if !slices.Contains(kinds, StepAddLearner) || !throttled {
				t.Fatalf("steps %v (throttle in the status: %v)", kinds, throttled)
			}
			if got := trans.Throttle("4"); got != 0 {
				t.Fatalf("promoted, broker 4 is still throttled to %d", got)
			}
			received := trans.BytesReceived("4")
			least := time.Duration(float64(data-int(rate)) / rate * float64(time.Second)) // the burst is one second of rate
			t.Logf("%s: %d bytes of values, %d bytes received by broker 4, promoted after %v (at least %v at %d B/s)", c.name, data, received, promotedAt, least, rate)
			if received < uint64(data) {
				t.Fatalf("broker 4 received %d bytes, less than the %d bytes of values it holds", received, data)
			}
			if promotedAt < least {
				t.Fatalf("promoted after %v: %d bytes cannot pass %d B/s (burst %d) in less than %v", promotedAt, data, rate, rate, least)
			}
			want := valuesAt(t, l)
			eventually.True(t, 30*time.Second, "broker 4 to hold the leader's log", func() bool {
				return slices.Equal(valuesAt(t, reps[3]), want)
			})
		})
	}
}
