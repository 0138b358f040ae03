package experiment

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
	"github.com/tapes-dev/tapes/internal/producer"
	"github.com/tapes-dev/tapes/internal/report"
)

func init() {
	register(&Experiment{
		Name: "leader-kill",
		About: `The leader of orders-0 is SIGKILLed 10 times (and restarted) while an idempotent producer writes
with acks=all. Prints the unavailability window of each kill, from the SIGKILL to the next
acknowledged acks=all write, with median and max (target: under 1 s with the default election
timeouts; about 9 s for Kafka's KRaft defaults). Expect zero anomalies.`,
		Expect:   check.Safe,
		Duration: 10 * time.Second, // unused: the schedule is 10 kills
		Run:      leaderKills,
		Verdict:  leaderKillsVerdict,
	})
}

func leaderKills(ctx context.Context, e *Env) error {
	if err := e.CreateTopic(ctx, "orders", 1, 3, map[string]string{"min.insync.replicas": "2"}); err != nil {
		return err
	}
	if err := e.StartProducer("producer-1", "--topic", "orders", "--acks", "all", "--idempotent", "--rate", "500", "--linger", "1", "--duration", "30m"); err != nil {
		return err
	}
	if err := e.Sleep(ctx, 3*time.Second); err != nil {
		return err
	}
	for i := 0; i < 10; i++ {
		leader, err := e.Leader(ctx, "orders", 0)
		if err != nil {
			return err
		}
		name := BrokerName(leader)
		id, err := e.Fault(fmt.Sprintf("kill %s (leader of orders-0)", name), func() error { return e.C.Kill(name) })
		if err != nil {
			return err
		}
		if err := e.Sleep(ctx, 2*time.Second); err != nil {
			return err
		}
		if err := e.EndFault(id, "restart "+name, func() error { return e.C.Restart(name) }); err != nil {
			return err
		}
		// Rejoin the ISR and, after the preferred-leader delay, lead again.
		if err := e.Sleep(ctx, 5*time.Second); err != nil {
			return err
		}
	}
	return e.Stop("producer-1")
}

func leaderKillsVerdict(e *Env, _ *check.Result) []string {
	events, err := report.ReadEvents(filepath.Join(e.Out, "events.jsonl"))
	if err != nil {
		return []string{err.Error()}
	}
	prod, err := producer.ReadHistoryFile(e.History("producer-1"))
	if err != nil {
		return []string{err.Error()}
	}
	ws := report.Unavailability(events, prod)
	if len(ws) == 0 {
		return []string{"no kill recorded"}
	}
	sorted := slices.Clone(ws)
	slices.Sort(sorted)
	var list []string
	for _, w := range ws {
		list = append(list, fmt.Sprintf("%.2f", w.Seconds()))
	}
	summary := fmt.Sprintf("failover window over %d leader kills: median %.2f s, max %.2f s (each: %v s)",
		len(ws), report.Median(ws).Seconds(), sorted[len(sorted)-1].Seconds(), list)
	e.Printf("%s", summary)
	e.Set("failover", summary)
	return nil
}
