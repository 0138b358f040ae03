package experiment

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
	"github.com/tapes-dev/tapes/internal/consumer"
	"github.com/tapes-dev/tapes/internal/producer"
	"github.com/tapes-dev/tapes/internal/sink"
)

func init() {
	register(&Experiment{
		Name: "retention-outruns-consumer",
		About: `A consumer slower than retention. orders keeps records 4 s (retention.ms=4000, segment.bytes=4096);
a producer writes 100 records/s for --duration (default 800 records) while consumer-slow processes
25/s into an idempotent sink, reading at most 20 records ahead, and a second, fast group
(consumer-archive) mirrors orders into orders-archive (default retention). Retention deletes what
consumer-slow never read: it reports the exact offsets lost (its "gap" history lines) and goes on
at the log start. Of the three ways out (restore from the archive, rebuild from the source, report
the gap) the first is run: a restore group reads orders-archive into the same idempotent sink,
which applies exactly the records of the gaps, every other one being a duplicate. Expect gaps,
the restore applying exactly their records, and nothing never processed at the end.`,
		Expect:   nothingLost("gap restored from the archive"),
		Duration: 8 * time.Second,
		Run:      retentionOutruns,
		Verdict:  retentionOutrunsVerdict,
	})
}

// beforeRestore is the file in Out with the sink's stats before the
// restore: Run writes it, the verdict reads it.
const beforeRestore = "sink-before-restore.json"

func retentionOutruns(ctx context.Context, e *Env) error {
	if err := e.CreateTopic(ctx, "orders", 1, 3, map[string]string{"segment.bytes": "4096", "retention.ms": "4000", "min.insync.replicas": "2"}); err != nil {
		return err
	}
	e.Set("orders", "retention.ms=4000, segment.bytes=4096")
	rate := 100
	n := int(e.Duration.Seconds()) * rate
	e.Set("producer", fmt.Sprintf("%d records at %d/s", n, rate))
	e.Set("consumer-slow", "25 records/s (--process-time 40ms), 20 records read ahead at most (--max-buffered-records 20)")
	if err := e.StartConsumer("consumer-archive", consumerArgs(e, "archive", "--mirror-to", "orders-archive")...); err != nil {
		return err
	}
	if err := e.StartConsumer("consumer-slow", consumerArgs(e, "slow", "--sink", e.Sink(), "--idempotent-sink", "--process-time", "40ms", "--records-per-poll", "10",
		"--max-partition-fetch-bytes", "2048", "--max-buffered-records", "20")...); err != nil {
		return err
	}
	if err := e.Sleep(ctx, 3*time.Second); err != nil { // both groups own orders-0
		return err
	}
	if err := e.StartProducer("producer-1", "--topic", "orders", "--count", fmt.Sprint(n), "--idempotent", "--rate", fmt.Sprint(rate), "--value-size", "100"); err != nil {
		return err
	}
	if err := e.waitExit(ctx, "producer-1", 2*time.Minute); err != nil {
		return err
	}
	for _, g := range []string{"archive", "slow"} {
		if err := e.WaitCommitted(ctx, g, "orders"); err != nil {
			return err
		}
	}
	for _, c := range []string{"consumer-archive", "consumer-slow"} {
		if err := e.Stop(c); err != nil {
			return err
		}
	}
	before, err := sink.ComputeStats(ctx, e.Sink(), []string{e.History("producer-1")})
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(before, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(e.Out, beforeRestore), append(b, '\n'), 0o644); err != nil {
		return err
	}
	e.Note(fmt.Sprintf("before the restore: %d of %d acknowledged records never processed by consumer-slow", before.NeverProcessed, before.Acked))
	e.Note("way out 1: restore from the archive (a restore group reads orders-archive into the same idempotent sink)")
	// Not consumer-*: its history is of orders-archive, whose offsets are
	// not those of orders.
	if err := e.StartConsumer("restore-1", "--group", "restore", "--topic", "orders-archive", "--from", "earliest", "--session-timeout", "3s",
		"--heartbeat-interval", "500ms", "--sink", e.Sink(), "--idempotent-sink"); err != nil {
		return err
	}
	if err := e.WaitCommitted(ctx, "restore", "orders-archive"); err != nil {
		return err
	}
	return e.Stop("restore-1")
}

// retentionOutrunsVerdict prints the exact lost range from consumer-slow's
// gap lines and the three ways out, and checks that the archive lost
// nothing and the restore applied exactly the records of the gaps.
func retentionOutrunsVerdict(e *Env, _ *check.Result) []string {
	var before sink.Stats
	b, err := os.ReadFile(filepath.Join(e.Out, beforeRestore))
	if err == nil {
		err = json.Unmarshal(b, &before)
	}
	if err != nil {
		return []string{"the sink's stats from before the restore: " + err.Error()}
	}
	var why []string
	gaps := map[string][][2]int64{}
	for _, c := range []string{"consumer-slow", "consumer-archive"} {
		h, err := consumer.ReadHistory(e.History(c))
		if err != nil {
			return []string{err.Error()}
		}
		for _, l := range h {
			if l.Type == consumer.HistoryGap {
				gaps[c] = append(gaps[c], [2]int64{*l.From, *l.To})
			}
		}
	}
	if len(gaps["consumer-archive"]) > 0 {
		why = append(why, fmt.Sprintf("the archive group was outrun by retention too (gaps %v): the archive is incomplete", gaps["consumer-archive"]))
	}
	lost := gaps["consumer-slow"]
	if len(lost) == 0 {
		return append(why, "consumer-slow reported no gap: retention did not outrun it (a loaded machine? try a longer --duration)")
	}
	acked, err := producer.ReadHistoryFile(e.History("producer-1"))
	if err != nil {
		return append(why, err.Error())
	}
	var ranges []string
	var inGaps int64
	for _, g := range lost {
		ranges = append(ranges, fmt.Sprintf("%d..%d (%d records)", g[0], g[1]-1, g[1]-g[0]))
	}
	for _, l := range acked {
		for _, g := range lost {
			if l.Status == producer.StatusOK && l.Partition == 0 && l.Offset >= g[0] && l.Offset < g[1] {
				inGaps++
			}
		}
	}
	lostLine := fmt.Sprintf("consumer-slow lost orders-0 offsets %s to retention: %d acknowledged records it never read", strings.Join(ranges, ", "), inGaps)
	e.Note(lostLine)
	e.Set("lost range", lostLine)
	e.Set("ways out", "1. restore from an archive topic mirrored by a second group (run here); "+
		"2. rebuild from the source of the records (the producer's system of record), re-sending the lost range; "+
		"3. report the gap (its offsets, from the history) to whoever owns the data, and accept it")
	after, err := sink.ComputeStats(context.Background(), e.Sink(), []string{e.History("producer-1")})
	if err != nil {
		return append(why, err.Error())
	}
	restored := after.Effects - before.Effects
	restoreLine := fmt.Sprintf("restore from orders-archive: %d effects applied (the gap holds %d acknowledged records); never processed %d before, %d after",
		restored, inGaps, before.NeverProcessed, after.NeverProcessed)
	e.Note(restoreLine)
	e.Set("restore", restoreLine)
	if before.NeverProcessed != inGaps {
		why = append(why, fmt.Sprintf("before the restore %d records were never processed, but the gaps hold %d", before.NeverProcessed, inGaps))
	}
	if restored != inGaps {
		why = append(why, fmt.Sprintf("the restore applied %d records, the gaps hold %d", restored, inGaps))
	}
	return why
}
