package experiment

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
	"github.com/tapes-dev/tapes/internal/consumer"
	"github.com/tapes-dev/tapes/internal/producer"
	"github.com/tapes-dev/tapes/internal/sink"
)

func init() {
	register(&Experiment{
		Name: "dedupe-window",
		About: `An idempotent sink that remembers event ids for a bounded window only. 300 "old" records are
processed, then, after a pause longer than the window (--duration, default 15 s), 300 "young"
ones, by three groups with their own sinks: one keeps the ids younger than the window, one the
last 5,000, one the last 200. A replay group then reads the topic from the start into each sink:
it reaches back further than the time window, so exactly the records older than the window (the
old ones) are applied twice; the 5,000-id window covers the whole replay and shows no duplicate;
and in the 200-id window every replayed record is applied twice, each re-applied one pushing a
younger id out. The report prints the replay horizon and each window side by side.`,
		Expect:   check.Expectation{Name: "no loss; duplicates exactly beyond the window", MustBeZero: []string{check.LostWrite, check.Unseen, check.Duplicate, check.InconsistentOffsets, check.PollSkip}},
		Duration: 15 * time.Second,
		Run:      dedupeWindow,
		Verdict:  dedupeWindowVerdict,
	})
}

// dedupeVariants are the sinks: the time window (--duration), a count
// window that covers the replay, and one that does not.
func dedupeVariants(e *Env) []struct{ name, window string } {
	return []struct{ name, window string }{{"time", e.Duration.String()}, {"count", "5000"}, {"short-count", "200"}}
}

func dedupeSink(e *Env, variant string) string {
	return filepath.Join(e.Out, "sink-"+variant+".db")
}

func dedupeWindow(ctx context.Context, e *Env) error {
	if err := e.CreateTopic(ctx, "orders", 1, 3, map[string]string{"min.insync.replicas": "2"}); err != nil {
		return err
	}
	variants := dedupeVariants(e)
	for _, v := range variants {
		e.Set("window ("+v.name+")", v.window)
		args := consumerArgs(e, "app-"+v.name, "--sink", dedupeSink(e, v.name), "--idempotent-sink", "--idempotent-sink-window", v.window, "--commit", "after")
		if err := e.StartConsumer("consumer-app-"+v.name, args...); err != nil {
			return err
		}
	}
	for i, phase := range []string{"old", "young"} {
		if i > 0 {
			pause := e.Duration + 5*time.Second
			e.Note(fmt.Sprintf("pause of %v, longer than the %v window", pause, e.Duration))
			if err := e.Sleep(ctx, pause); err != nil {
				return err
			}
		}
		if err := produceAll(ctx, e, "producer-"+phase, 300); err != nil {
			return err
		}
		for _, v := range variants {
			if err := e.WaitCommitted(ctx, "app-"+v.name, "orders"); err != nil {
				return err
			}
		}
		e.Note(fmt.Sprintf("the %s records are processed by both groups", phase))
	}
	for _, v := range variants {
		if err := e.Stop("consumer-app-" + v.name); err != nil {
			return err
		}
	}
	e.Note("replay: a new group reads orders from the start into each sink")
	for _, v := range variants {
		args := consumerArgs(e, "replay-"+v.name, "--sink", dedupeSink(e, v.name), "--idempotent-sink", "--idempotent-sink-window", v.window, "--from", "earliest")
		if err := e.StartConsumer("consumer-replay-"+v.name, args...); err != nil {
			return err
		}
	}
	for _, v := range variants {
		if err := e.WaitCommitted(ctx, "replay-"+v.name, "orders"); err != nil {
			return err
		}
		if err := e.Stop("consumer-replay-" + v.name); err != nil {
			return err
		}
	}
	return nil
}

// dedupeWindowVerdict compares, in each sink, the records applied twice
// with the records the replay reached older than the window: with the time
// window, a record is older when the replay processed it more than the
// window after its first effect; the count window covers the whole replay.
func dedupeWindowVerdict(e *Env, _ *check.Result) []string {
	ctx := context.Background()
	var why []string
	acked, err := ackedIDs(e.History("producer-old"), e.History("producer-young"))
	if err != nil {
		return []string{err.Error()}
	}
	for _, v := range dedupeVariants(e) {
		counts, err := sink.EffectsPerEvent(ctx, dedupeSink(e, v.name))
		if err != nil {
			return []string{err.Error()}
		}
		first, err := sink.FirstEffects(ctx, dedupeSink(e, v.name))
		if err != nil {
			return []string{err.Error()}
		}
		replayed, err := consumer.ReadHistory(e.History("consumer-replay-" + v.name))
		if err != nil {
			return []string{err.Error()}
		}
		var horizon time.Duration
		var want, got []string
		seen := map[string]bool{}
		for _, l := range replayed {
			if l.Type != consumer.HistoryRecord || l.EventID == nil || seen[*l.EventID] {
				continue
			}
			id := *l.EventID
			seen[id] = true
			age := l.At.Sub(first[id])
			horizon = max(horizon, age)
			// A count window shorter than the replay: each re-applied
			// record pushes a younger id out, so every one is applied
			// again.
			if (v.name == "time" && age > e.Duration) || v.name == "short-count" {
				want = append(want, id)
			}
			if counts[id] > 1 {
				got = append(got, id)
			}
		}
		never := 0
		for _, id := range acked {
			if counts[id] == 0 {
				never++
			}
		}
		slices.Sort(want)
		slices.Sort(got)
		line := fmt.Sprintf("replay horizon %d records, back %.1f s | %s window %s | applied twice: %d; expected: %d; never processed: %d",
			len(seen), horizon.Seconds(), v.name, v.window, len(got), len(want), never)
		e.Note(line)
		e.Set("replay vs window ("+v.name+")", line)
		if !slices.Equal(want, got) {
			why = append(why, fmt.Sprintf("%s window: %d records applied twice, %d older than the window: not the same records", v.name, len(got), len(want)))
		}
		if never > 0 {
			why = append(why, fmt.Sprintf("%s window: %d acknowledged records never processed", v.name, never))
		}
		if v.name == "time" && len(want) == 0 {
			why = append(why, "time window: the replay reached no record older than the window: it proves nothing")
		}
	}
	return why
}

// ackedIDs are the event ids the producer histories show acknowledged.
func ackedIDs(histories ...string) ([]string, error) {
	var ids []string
	for _, h := range histories {
		lines, err := producer.ReadHistoryFile(h)
		if err != nil {
			return nil, err
		}
		for _, l := range lines {
			if l.Status == producer.StatusOK {
				ids = append(ids, l.EventID)
			}
		}
	}
	return ids, nil
}
