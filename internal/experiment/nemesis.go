package experiment

import (
	"context"
	"fmt"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
	"github.com/tapes-dev/tapes/internal/netfault"
)

func init() {
	register(&Experiment{
		Name: "nemesis",
		About: `For --duration, random faults hit brokers and clients: SIGKILL then restart, SIGSTOP for a few
seconds, a broker cut off from the others, a consumer cut off from the cluster, a consumer
killed and restarted. The workload uses the safe profile: acks=all, min.insync.replicas=2, an
idempotent producer, commit after processing and the idempotent sink. Expect zero anomalies:
nothing acknowledged is lost or duplicated, no consumer skips or goes back, no effect is
applied twice, nothing is left unprocessed.`,
		Expect:   check.Safe,
		Duration: time.Minute,
		Run:      nemesis,
	})
}

func nemesis(ctx context.Context, e *Env) error {
	if err := e.CreateTopic(ctx, "orders", 3, 3, map[string]string{"min.insync.replicas": "2"}); err != nil {
		return err
	}
	e.Set("profile", "acks=all, min.insync.replicas=2, idempotent producer, commit after, idempotent sink")
	if err := e.StartProducer("producer-1", "--topic", "orders", "--acks", "all", "--idempotent", "--rate", "300",
		"--duration", (e.Duration + 10*time.Minute).String(), "--delivery-timeout", "2m"); err != nil {
		return err
	}
	consumers := []string{"consumer-1", "consumer-2"}
	args := consumerArgs(e, "app", "--commit", "after", "--sink", e.Sink(), "--idempotent-sink", "--records-per-poll", "50")
	for _, c := range consumers {
		if err := e.StartConsumer(c, args...); err != nil {
			return err
		}
	}
	if err := e.Sleep(ctx, 3*time.Second); err != nil {
		return err
	}
	end := time.Now().Add(e.Duration)
	for time.Now().Before(end) {
		if err := e.randomFault(ctx, consumers); err != nil {
			return err
		}
		if err := e.Sleep(ctx, time.Duration(1000+e.Rand.IntN(2000))*time.Millisecond); err != nil {
			return err
		}
	}
	e.Note("nemesis over: everything healed; letting the consumers catch up")
	if err := e.Stop("producer-1"); err != nil {
		return err
	}
	if err := e.WaitCommitted(ctx, "app", "orders"); err != nil {
		return err
	}
	for _, c := range consumers {
		if err := e.Stop(c); err != nil {
			return err
		}
	}
	return nil
}

// randomFault applies one fault chosen with the run's seed, holds it for
// a few seconds and undoes it.
func (e *Env) randomFault(ctx context.Context, consumers []string) error {
	brokers := e.Brokers()
	b := brokers[e.Rand.IntN(len(brokers))]
	c := consumers[e.Rand.IntN(len(consumers))]
	hold := time.Duration(2000+e.Rand.IntN(3000)) * time.Millisecond
	var what, undoWhat string
	var apply, undo func() error
	switch e.Rand.IntN(5) {
	case 0:
		what, undoWhat = "kill "+b, "restart "+b
		apply, undo = func() error { return e.C.Kill(b) }, func() error { return e.C.Restart(b) }
	case 1:
		what, undoWhat = "pause "+b, "resume "+b
		apply, undo = func() error { return e.C.Pause(b) }, func() error { return e.C.Resume(b) }
	case 2:
		others := Others(brokers, b)
		what, undoWhat = fmt.Sprintf("isolate %s from %v", b, others), "heal "+b
		apply, undo = func() error { return e.Cut(b, others, netfault.Blackhole) }, func() error { return e.Cut(b, others, netfault.Pass) }
	case 3:
		what, undoWhat = "cut "+c+" from every broker", "heal "+c
		apply, undo = func() error { return e.Cut(c, brokers, netfault.Blackhole) }, func() error { return e.Cut(c, brokers, netfault.Pass) }
	default:
		what, undoWhat = "kill "+c, "restart "+c
		apply, undo = func() error { return e.C.Kill(c) }, func() error { return e.C.Restart(c) }
	}
	id, err := e.Fault(what, apply)
	if err != nil {
		return err
	}
	if err := e.Sleep(ctx, hold); err != nil {
		return err
	}
	return e.EndFault(id, undoWhat, undo)
}
