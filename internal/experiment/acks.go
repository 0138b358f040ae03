package experiment

import (
	"context"
	"fmt"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
	"github.com/tapes-dev/tapes/internal/netfault"
	"github.com/tapes-dev/tapes/internal/producer"
)

func init() {
	register(&Experiment{
		Name: "acks1-leader-isolation",
		About: `A producer writes with acks=1 while the leader of orders-0 is cut off from the other brokers
(clients still reach it). Until its leader lease runs out it keeps acknowledging writes that no
follower has; the others elect a new leader and go on. After the heal the old leader becomes a
follower and truncates those writes: they were acknowledged, and they are gone. Expect lost-write
> 0, with the records and the offsets the old leader gave them.`,
		Expect:   check.Expectation{Name: "acks=1 loses acknowledged writes", MustBePositive: []string{check.LostWrite}},
		Duration: 20 * time.Second,
		Run:      func(ctx context.Context, e *Env) error { return leaderIsolation(ctx, e, "1") },
	})
	register(&Experiment{
		Name: "acksall-leader-isolation",
		About: `The same schedule as acks1-leader-isolation with acks=all, min.insync.replicas=2 and an idempotent
producer: the isolated leader cannot commit anything without a follower, so nothing it
acknowledges can be lost; writes fail or wait until the new leader takes them. Expect zero
anomalies: no lost, unseen or duplicated write.`,
		Expect:   check.Safe,
		Duration: 20 * time.Second,
		Run:      func(ctx context.Context, e *Env) error { return leaderIsolation(ctx, e, "all") },
	})
	register(&Experiment{
		Name: "min-insync",
		About: `orders has min.insync.replicas=3 and a follower is killed. Once it leaves the ISR, every acks=all
send is refused with NOT_ENOUGH_REPLICAS before anything is appended, while a second producer
with acks=1 is still accepted. The follower is restarted, rejoins the ISR, and acks=all sends
succeed again. Expect NOT_ENOUGH_REPLICAS refusals, acks=1 successes during the outage, acks=all
successes after it, and nothing lost.`,
		Expect:   check.Safe,
		Duration: 12 * time.Second,
		Run:      minInsync,
		Verdict:  minInsyncVerdict,
	})
}

// leaderIsolation writes to orders-0 with acks, cuts its leader off from
// the other brokers for a third of the run, heals, and writes on.
func leaderIsolation(ctx context.Context, e *Env, acks string) error {
	if err := e.CreateTopic(ctx, "orders", 1, 3, map[string]string{"min.insync.replicas": "2"}); err != nil {
		return err
	}
	args := []string{"--topic", "orders", "--acks", acks, "--rate", "500", "--duration", (e.Duration + time.Minute).String(), "--linger", "2"}
	if acks == "all" {
		args = append(args, "--idempotent")
	}
	e.Set("acks", acks)
	e.Set("min.insync.replicas", "2")
	if err := e.StartProducer("producer-1", args...); err != nil {
		return err
	}
	if err := e.Sleep(ctx, e.Duration/4); err != nil {
		return err
	}
	leader, err := e.Leader(ctx, "orders", 0)
	if err != nil {
		return err
	}
	name := BrokerName(leader)
	others := Others(e.Brokers(), name)
	what := fmt.Sprintf("isolate %s (leader of orders-0) from %v", name, others)
	id, err := e.Fault(what, func() error { return e.Cut(name, others, netfault.Blackhole) })
	if err != nil {
		return err
	}
	if err := e.Sleep(ctx, e.Duration/3); err != nil {
		return err
	}
	if err := e.EndFault(id, "heal "+name, func() error { return e.Cut(name, others, netfault.Pass) }); err != nil {
		return err
	}
	if err := e.Sleep(ctx, e.Duration-e.Duration/4-e.Duration/3); err != nil {
		return err
	}
	return e.Stop("producer-1")
}

// minInsync kills a follower of orders-0 (min.insync.replicas=3) while an
// acks=all and an acks=1 producer write, then restarts it.
func minInsync(ctx context.Context, e *Env) error {
	if err := e.CreateTopic(ctx, "orders", 1, 3, map[string]string{"min.insync.replicas": "3"}); err != nil {
		return err
	}
	e.Set("min.insync.replicas", "3")
	run := (e.Duration + time.Minute).String()
	// --retries 0: a refusal is recorded as the record's outcome instead
	// of being retried until the ISR is back.
	if err := e.StartProducer("producer-1", "--topic", "orders", "--acks", "all", "--rate", "100", "--retries", "0", "--duration", run); err != nil {
		return err
	}
	if err := e.StartProducer("producer-2", "--topic", "orders", "--acks", "1", "--rate", "100", "--duration", run); err != nil {
		return err
	}
	if err := e.Sleep(ctx, e.Duration/4); err != nil {
		return err
	}
	leader, err := e.Leader(ctx, "orders", 0)
	if err != nil {
		return err
	}
	victim := Others(e.Brokers(), BrokerName(leader))[0]
	id, err := e.Fault("kill "+victim+" (a follower of orders-0)", func() error { return e.C.Kill(victim) })
	if err != nil {
		return err
	}
	if err := e.Sleep(ctx, e.Duration/2); err != nil {
		return err
	}
	if err := e.EndFault(id, "restart "+victim, func() error { return e.C.Restart(victim) }); err != nil {
		return err
	}
	if err := e.WaitISR(ctx, "orders", 0, 3, time.Minute); err != nil {
		return err
	}
	e.Note(victim + " is back in the ISR of orders-0")
	if err := e.Sleep(ctx, e.Duration/4); err != nil { // acks=all writes succeed again
		return err
	}
	for _, p := range []string{"producer-1", "producer-2"} {
		if err := e.Stop(p); err != nil {
			return err
		}
	}
	return nil
}

func minInsyncVerdict(e *Env, _ *check.Result) []string {
	all, err := producer.ReadHistoryFile(e.History("producer-1"))
	if err != nil {
		return []string{err.Error()}
	}
	one, err := producer.ReadHistoryFile(e.History("producer-2"))
	if err != nil {
		return []string{err.Error()}
	}
	var refused int
	var lastRefusal time.Time
	for _, l := range all {
		if l.Error != nil && *l.Error == "NOT_ENOUGH_REPLICAS" {
			refused++
			if l.SentAt.After(lastRefusal) {
				lastRefusal = l.SentAt
			}
		}
	}
	var okAfter, oneDuring int
	for _, l := range all {
		if l.Status == producer.StatusOK && l.SentAt.After(lastRefusal) {
			okAfter++
		}
	}
	for _, l := range one {
		if l.Status == producer.StatusOK && !lastRefusal.IsZero() && l.SentAt.Before(lastRefusal) {
			oneDuring++
		}
	}
	e.Printf("acks=all refused with NOT_ENOUGH_REPLICAS: %d; acks=1 accepted before the last refusal: %d; acks=all accepted after it: %d", refused, oneDuring, okAfter)
	var why []string
	if refused == 0 {
		why = append(why, "no acks=all send was refused with NOT_ENOUGH_REPLICAS")
	}
	if oneDuring == 0 {
		why = append(why, "no acks=1 send succeeded during the outage")
	}
	if okAfter == 0 {
		why = append(why, "acks=all sends did not succeed again after the follower came back")
	}
	return why
}
