package replication

import (
	"slices"
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
