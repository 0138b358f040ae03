package experiment

import (
	"context"
	"fmt"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/consumer"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/producer"
	"github.com/tapes-dev/tapes/internal/schema"
	"github.com/tapes-dev/tapes/internal/sink"
)

func init() {
	register(&Experiment{
		Name: "schema-replay",
		About: `Old records must stay readable. orders holds 300 records of schema version 1, then 300 of version 2
(a field renamed, one added), then one record of version 3, which no consumer knows yet (written
by the experiment, as a newer producer would). A new group replays the log from the start into an
idempotent sink: it decodes versions 1 and 2 and applies every one of them, and sends the version
3 record, with the reason, to the dead-letter topic orders.dlq instead of crashing or skipping it
silently; its history says so. Expect every record applied or dead-lettered, nothing lost, no
duplicate effect.`,
		Expect:   nothingLost("every version processed, nothing lost"),
		Duration: 10 * time.Second,
		Run:      schemaReplay,
		Verdict:  schemaReplayVerdict,
	})
}

// nothingLost is check.Safe under the name of what an experiment shows:
// every acknowledged record processed once, nothing lost.
func nothingLost(name string) check.Expectation {
	x := check.Safe
	x.Name = name
	return x
}

// schemaV3ID is the event id of the version 3 record.
const schemaV3ID = "schema-replay-v3-1"

func schemaReplay(ctx context.Context, e *Env) error {
	if err := e.CreateTopic(ctx, "orders", 1, 3, map[string]string{"min.insync.replicas": "2"}); err != nil {
		return err
	}
	for _, v := range []string{"1", "2"} {
		if err := produceAll(ctx, e, "producer-v"+v, 300, "--schema-version", v); err != nil {
			return err
		}
	}
	off, err := e.writeV3(ctx)
	if err != nil {
		return err
	}
	e.Note(fmt.Sprintf("a version 3 record (%s) written at offset %d: no consumer knows version 3", schemaV3ID, off))
	e.Set("schema versions in the log", "1 (300 records), 2 (300 records), 3 (1 record)")
	if err := e.StartConsumer("consumer-replay", consumerArgs(e, "replay", "--from", "earliest", "--sink", e.Sink(), "--idempotent-sink")...); err != nil {
		return err
	}
	if err := e.WaitCommitted(ctx, "replay", "orders"); err != nil {
		return err
	}
	return e.Stop("consumer-replay")
}

// writeV3 writes one version 3 record to orders with the observer's
// client, acks=all, and returns its offset.
func (e *Env) writeV3(ctx context.Context) (int64, error) {
	res := make(chan *producer.Result, 1)
	cfg := producer.DefaultConfig("orders")
	cfg.Idempotent = true
	cfg.OnBatch = func(r *producer.Result) { res <- r }
	p, err := producer.New(ctx, e.Client, cfg)
	if err != nil {
		return 0, err
	}
	err = p.Send(ctx, &producer.Record{Key: []byte("key-0"), Value: []byte(`{"order":"` + schemaV3ID + `","entity":"key-0","amount":{"cents":1250,"currency":"EUR"}}`),
		Headers: []*tapesv1.Header{{Key: producer.EventIDHeader, Value: []byte(schemaV3ID)}, {Key: producer.SchemaVersionHeader, Value: []byte("3")},
			{Key: producer.EntityHeader, Value: []byte("key-0")}}})
	if cerr := p.Close(ctx); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("writing the version 3 record: %w", err)
	}
	r := <-res
	if r.Err != nil {
		return 0, fmt.Errorf("writing the version 3 record: %w", r.Err)
	}
	return r.Offset(0), nil
}

// readAll reads partition p of topic from its log start to its high
// watermark, headers included.
func (e *Env) readAll(ctx context.Context, topic string, p int32) ([]*tapesv1.Record, error) {
	lo, err := e.Client.ListOffsets(ctx, topic, p, client.EarliestOffset)
	if err != nil {
		return nil, err
	}
	hi, err := e.Client.ListOffsets(ctx, topic, p, client.LatestOffset)
	if err != nil {
		return nil, err
	}
	var out []*tapesv1.Record
	for off := lo.GetOffset(); off < hi.GetOffset(); {
		resp, err := e.Client.Fetch(ctx, &tapesv1.FetchRequest{Topic: topic, Partition: p, Offset: off, MaxBytes: 1 << 20})
		if err != nil {
			return nil, fmt.Errorf("read %s-%d at %d: %w", topic, p, off, err)
		}
		next := client.NextOffset(resp, off)
		for _, r := range resp.GetRecords() {
			if r.GetOffset() >= off && r.GetOffset() < hi.GetOffset() {
				out = append(out, r)
			}
		}
		if next == off {
			return nil, fmt.Errorf("read %s-%d: nothing at %d below the high watermark %d", topic, p, off, hi.GetOffset())
		}
		off = next
	}
	return out, nil
}

func headerOf(r *tapesv1.Record, key string) string {
	for _, h := range r.GetHeaders() {
		if h.GetKey() == key {
			return string(h.GetValue())
		}
	}
	return ""
}

// schemaReplayVerdict checks that every record of orders was applied or
// dead-lettered: the version 3 one in orders.dlq with its reason and no
// effect, the history line saying so, every other one applied.
func schemaReplayVerdict(e *Env, _ *check.Result) []string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var why []string
	log, err := e.readAll(ctx, "orders", 0)
	if err != nil {
		return []string{err.Error()}
	}
	counts, err := sink.EffectsPerEvent(ctx, e.Sink())
	if err != nil {
		return []string{err.Error()}
	}
	dlq, err := e.readAll(ctx, "orders.dlq", 0)
	if err != nil {
		return []string{"reading the dead-letter topic orders.dlq: " + err.Error()}
	}
	dead := map[string]string{}
	for _, r := range dlq {
		dead[headerOf(r, producer.EventIDHeader)] = headerOf(r, schema.DeadLetterReasonHeader)
		e.Note(fmt.Sprintf("orders.dlq offset %d: %s from %s, reason: %s", r.GetOffset(), headerOf(r, producer.EventIDHeader),
			headerOf(r, schema.DeadLetterSourceHeader), headerOf(r, schema.DeadLetterReasonHeader)))
	}
	perVersion := map[string]int{}
	missing := 0
	for _, r := range log {
		id, v := headerOf(r, producer.EventIDHeader), headerOf(r, producer.SchemaVersionHeader)
		_, isDead := dead[id]
		switch {
		case counts[id] == 1 && !isDead:
			perVersion[v]++
		case counts[id] == 0 && isDead:
			perVersion["dead letter (v"+v+")"]++
		default:
			missing++
			if missing <= 5 {
				why = append(why, fmt.Sprintf("orders offset %d (%s, version %s): %d effects, dead-lettered %v", r.GetOffset(), id, v, counts[id], isDead))
			}
		}
	}
	summary := fmt.Sprintf("%d records in orders: applied %d of version 1 and %d of version 2; dead-lettered %d; neither (or both) %d",
		len(log), perVersion["1"], perVersion["2"], perVersion["dead letter (v3)"], missing)
	e.Note(summary)
	e.Set("outcome", summary)
	if reason, ok := dead[schemaV3ID]; !ok || reason == "" {
		why = append(why, "the version 3 record is not in orders.dlq with a reason")
	}
	if perVersion["1"] != 300 || perVersion["2"] != 300 || len(dlq) != 1 {
		why = append(why, fmt.Sprintf("want 300 records of each known version applied and one dead letter: %s, %d dead letters", summary, len(dlq)))
	}
	h, err := consumer.ReadHistory(e.History("consumer-replay"))
	if err != nil {
		return append(why, err.Error())
	}
	said := false
	for _, l := range h {
		if l.Type == consumer.HistoryRecord && l.EventID != nil && *l.EventID == schemaV3ID {
			said = l.DeadLetter == "orders.dlq" && l.Reason != ""
		}
	}
	if !said {
		why = append(why, "consumer-replay's history does not say the version 3 record went to orders.dlq")
	}
	return why
}
