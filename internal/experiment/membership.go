package experiment

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/netfault"
)

func init() {
	register(&Experiment{
		Name: "membership",
		About: `Four brokers; orders has 2 partitions of RF 3 (min.insync.replicas=2) and an idempotent acks=all
producer. Round after round for --duration, one partition is reassigned (one replica swapped for the
broker that holds none: the new one joins as a non-voter, catches up, is promoted, the leaving one is
removed, the leader moved off it first) while, in turn, the partition's leader or the controller
quorum's leader is SIGKILLed and restarted, or a broker is cut off from the others and healed, in the
middle of the move; last, one broker is drained
(every replica it holds moved to the others, as cluster brokers remove does before stopping it).
Every reassignment must complete; expect zero anomalies (the fault class where Jepsen found Redpanda
losing acknowledged writes).`,
		Expect:   check.Safe,
		Duration: 40 * time.Second,
		Brokers:  4,
		Run:      membership,
	})
}

func membership(ctx context.Context, e *Env) error {
	if err := e.CreateTopic(ctx, "orders", 2, 3, map[string]string{"min.insync.replicas": "2"}); err != nil {
		return err
	}
	if err := e.StartProducer("producer-1", "--topic", "orders", "--acks", "all", "--idempotent", "--rate", "300", "--linger", "1", "--duration", "30m"); err != nil {
		return err
	}
	if err := e.Sleep(ctx, 3*time.Second); err != nil {
		return err
	}
	end := time.Now().Add(e.Duration)
	for round := 0; round < 3 || time.Now().Before(end); round++ {
		p := int32(round % 2)
		replicas, err := e.replicas(ctx, "orders", p)
		if err != nil {
			return err
		}
		var spare int32
		for id := int32(1); id <= 4; id++ {
			if !slices.Contains(replicas, id) {
				spare = id
			}
		}
		target := slices.Clone(replicas)
		target[e.Rand.IntN(len(target))] = spare
		if err := e.reassign(ctx, "orders", p, replicas, target); err != nil {
			return err
		}
		if err := e.membershipFault(ctx, round, p); err != nil {
			return err
		}
		if err := e.waitReassigned(ctx, "orders", p, target, 2*time.Minute); err != nil {
			return err
		}
		if err := e.Sleep(ctx, 2*time.Second); err != nil {
			return err
		}
	}
	// Drain broker 4: every replica it holds goes to a broker without one.
	for p := int32(0); p < 2; p++ {
		replicas, err := e.replicas(ctx, "orders", p)
		if err != nil {
			return err
		}
		i := slices.Index(replicas, 4)
		if i < 0 {
			continue
		}
		target := slices.Clone(replicas)
		for id := int32(1); id <= 3; id++ {
			if !slices.Contains(replicas, id) {
				target[i] = id
			}
		}
		if err := e.reassign(ctx, "orders", p, replicas, target); err != nil {
			return err
		}
		if err := e.waitReassigned(ctx, "orders", p, target, 2*time.Minute); err != nil {
			return err
		}
	}
	e.Note("broker-4 drained: it holds no replica of orders")
	if err := e.Sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	return e.Stop("producer-1")
}

// membershipFault applies round's fault while topic orders' partition p
// moves, and undoes it: the partition's leader killed (and restarted), a
// broker cut off from the others (and healed), or the controller quorum's
// leader killed (and restarted), in turn.
func (e *Env) membershipFault(ctx context.Context, round int, p int32) error {
	var (
		name, what string
		apply      func() error
		undo       func() error
		hold       = 2 * time.Second
	)
	switch round % 3 {
	case 0, 2:
		var leader int32
		if round%3 == 0 {
			id, err := e.Leader(ctx, "orders", p)
			if err != nil {
				return err
			}
			leader, what = id, fmt.Sprintf("leader of orders-%d", p)
		} else {
			md, err := e.Client.Brokers(ctx)
			if err != nil {
				return err
			}
			leader, what = md.GetControllerId(), "controller quorum leader"
		}
		name = BrokerName(leader)
		what = fmt.Sprintf("kill %s (%s) mid-reassignment", name, what)
		apply = func() error { return e.C.Kill(name) }
		undo = func() error { return e.C.Restart(name) }
	case 1:
		brokers := e.Brokers()
		name = brokers[e.Rand.IntN(len(brokers))]
		others := Others(brokers, name)
		what, hold = fmt.Sprintf("cut %s off from the other brokers mid-reassignment", name), 3*time.Second
		apply = func() error { return e.Cut(name, others, netfault.Blackhole) }
		undo = func() error { return e.Cut(name, others, netfault.Pass) }
	}
	id, err := e.Fault(what, apply)
	if err != nil {
		return err
	}
	if err := e.Sleep(ctx, hold); err != nil {
		return err
	}
	verb := "restart "
	if round%3 == 1 {
		verb = "heal "
	}
	return e.EndFault(id, verb+name, undo)
}

// replicas returns the replica set of topic/p from fresh metadata.
func (e *Env) replicas(ctx context.Context, topic string, p int32) ([]int32, error) {
	md, err := e.Client.Metadata(ctx, []string{topic}, false)
	if err != nil {
		return nil, err
	}
	for _, tm := range md.GetTopics() {
		for _, pm := range tm.GetPartitions() {
			if tm.GetName() == topic && pm.GetPartition() == p {
				return pm.GetReplicas(), nil
			}
		}
	}
	return nil, fmt.Errorf("%s-%d not in the metadata", topic, p)
}

// reassign records target for topic/p and notes it on the timeline.
func (e *Env) reassign(ctx context.Context, topic string, p int32, from, target []int32) error {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := e.Client.ReassignPartition(rctx, topic, p, target); err != nil {
		return fmt.Errorf("reassign %s-%d to %v: %w", topic, p, target, err)
	}
	e.Note(fmt.Sprintf("reassign %s-%d from %s to %s", topic, p, ids(from), ids(target)))
	return nil
}

// waitReassigned waits until topic/p's replicas are target with no
// reassignment in progress, or fails after d.
func (e *Env) waitReassigned(ctx context.Context, topic string, p int32, target []int32, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		md, err := e.Client.Metadata(ctx, []string{topic}, false)
		if err == nil {
			for _, pm := range md.GetTopics()[0].GetPartitions() {
				if pm.GetPartition() == p && slices.Equal(pm.GetReplicas(), target) && len(pm.GetAddingReplicas())+len(pm.GetRemovingReplicas()) == 0 {
					e.Note(fmt.Sprintf("%s-%d reassigned to %s (ISR %s)", topic, p, ids(target), ids(pm.GetIsr())))
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("reassignment of %s-%d to %s not complete after %v", topic, p, ids(target), d)
		}
		if err := e.Sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
}

func ids(v []int32) string {
	out := make([]metadata.BrokerID, len(v))
	for i, id := range v {
		out[i] = metadata.BrokerID(id)
	}
	return metadata.JoinIDs(out)
}
