package experiment

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
	"github.com/tapes-dev/tapes/internal/consumer"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/producer"
	"github.com/tapes-dev/tapes/internal/sink"
)

func init() {
	register(&Experiment{
		Name: "hot-key-salting",
		About: `A producer sends 80% of its records to one key, key-0, on a 6-partition topic read by 3 consumers
that each spend 5 ms per record. Unsalted, key-0 is one partition: that partition and its consumer
are saturated while the others idle (the report gives each partition's produce rate and largest
consumer lag). Salted (producerd --salt-hot-key 6), key-0's records get the keys key-0#0 ... #5 and
spread over several partitions and consumers, but the sink now applies some of key-0's records
after later ones: expect out-of-key-order > 0 for the hot key, the cost of salting. Salted again,
read by one consumerd --resequence-salted that holds each record back until the records before
it (header key_seq) have had their effect: expect out-of-key-order = 0, at the price of one
consumer for the whole key again. Nothing is lost in any variant.`,
		Expect:   check.Expectation{Name: "no loss", MustBeZero: []string{check.LostWrite, check.Duplicate, check.InconsistentOffsets}},
		Duration: 10 * time.Second,
		Run:      hotKeySalting,
		Verdict:  hotKeySaltingVerdict,
	})
}

// saltVariant is one phase of hot-key-salting.
type saltVariant struct {
	Name       string `json:"name"`
	Salts      int    `json:"salts"`      // --salt-hot-key (0: none)
	Resequence bool   `json:"resequence"` // consumerd --resequence-salted
	Consumers  int    `json:"consumers"`
}

var saltVariants = []saltVariant{
	{Name: "unsalted", Consumers: 3},
	{Name: "salted", Salts: 6, Consumers: 3},
	{Name: "resequenced", Salts: 6, Resequence: true, Consumers: 1},
}

const (
	saltPartitions = 6
	saltRate       = 300 // records per second
	saltHotShare   = "0.8"
)

// saltMeasure is what one variant measured while it ran: the largest
// consumer lag (high watermark minus the group's committed offset) of
// each partition, sampled every 500 ms while the producer wrote. It is
// written to DIR/hot-key-salting.json for the verdict and the reader.
type saltMeasure struct {
	Variant saltVariant     `json:"variant"`
	MaxLag  map[int32]int64 `json:"max_lag"`
	Seconds float64         `json:"producer_seconds"`
}

func saltSink(e *Env, v saltVariant) string    { return filepath.Join(e.Out, "sink-"+v.Name+".db") }
func saltProducer(v saltVariant) string        { return "producer-" + v.Name }
func saltMeasures(e *Env) string               { return filepath.Join(e.Out, "hot-key-salting.json") }
func saltConsumer(v saltVariant, i int) string { return fmt.Sprintf("consumer-%s-%d", v.Name, i) }

func hotKeySalting(ctx context.Context, e *Env) error {
	if err := e.CreateTopic(ctx, "orders", saltPartitions, 3, map[string]string{"min.insync.replicas": "2"}); err != nil {
		return err
	}
	e.Set("rate", fmt.Sprintf("%d records/s for %v per variant, hot-key share %s, 10 keys, 5 ms per record", saltRate, e.Duration, saltHotShare))
	var measures []saltMeasure
	for _, v := range saltVariants {
		m, err := saltRun(ctx, e, v)
		if err != nil {
			return fmt.Errorf("%s: %w", v.Name, err)
		}
		measures = append(measures, m)
	}
	b, err := json.MarshalIndent(measures, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(saltMeasures(e), append(b, '\n'), 0o644)
}

// saltRun runs one variant: its group starts at the log end (an admin
// commit of the high watermarks before any member joins, so it reads
// exactly this variant's records whenever its members get their
// partitions), its producer writes for the run's duration while the lag
// is sampled, and its consumers are stopped once they caught up.
func saltRun(ctx context.Context, e *Env, v saltVariant) (saltMeasure, error) {
	m := saltMeasure{Variant: v, MaxLag: map[int32]int64{}}
	group := "salt-" + v.Name
	e.Note(fmt.Sprintf("%s: %d consumer(s), --salt-hot-key %d, resequence %v", v.Name, v.Consumers, v.Salts, v.Resequence))
	if err := e.commitLogEnd(ctx, group, "orders"); err != nil {
		return m, err
	}
	var names []string
	for i := 1; i <= v.Consumers; i++ {
		args := consumerArgs(e, group, "--sink", saltSink(e, v), "--idempotent-sink", "--records-per-poll", "50", "--process-time", "5ms")
		if v.Resequence {
			args = append(args, "--resequence-salted")
		}
		names = append(names, saltConsumer(v, i))
		if err := e.StartConsumer(names[i-1], args...); err != nil {
			return m, err
		}
	}
	args := []string{"--topic", "orders", "--idempotent", "--rate", strconv.Itoa(saltRate), "--duration", e.Duration.String(),
		"--key-space", "10", "--hot-key-share", saltHotShare, "--seed", strconv.FormatUint(e.Rand.Uint64()|1, 10)}
	if v.Salts > 0 {
		args = append(args, "--salt-hot-key", strconv.Itoa(v.Salts))
	}
	start := time.Now()
	if err := e.StartProducer(saltProducer(v), args...); err != nil {
		return m, err
	}
	for {
		st, err := e.C.ProcessStatus(saltProducer(v))
		if err != nil {
			return m, err
		}
		if st.State == "exited" {
			e.Printf("%s exited: %s", saltProducer(v), st.LastExit)
			break
		}
		if time.Since(start) > e.Duration+2*time.Minute {
			return m, fmt.Errorf("%s still %s after %v", saltProducer(v), st.State, time.Since(start))
		}
		e.sampleLag(ctx, group, "orders", m.MaxLag)
		if err := e.Sleep(ctx, 500*time.Millisecond); err != nil {
			return m, err
		}
	}
	m.Seconds = time.Since(start).Seconds()
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	err := e.WaitCommitted(wctx, group, "orders")
	cancel()
	if err != nil {
		return m, err
	}
	for _, n := range names {
		if err := e.Stop(n); err != nil {
			return m, err
		}
	}
	return m, nil
}

// commitLogEnd commits the high watermark of every partition of topic for
// group, which must have no members (an admin commit).
func (e *Env) commitLogEnd(ctx context.Context, group, topic string) error {
	md, err := e.Client.Metadata(ctx, []string{topic}, true)
	if err != nil {
		return err
	}
	if len(md.Topics) != 1 {
		return fmt.Errorf("topic %s: no metadata", topic)
	}
	req := &tapesv1.OffsetCommitRequest{GroupId: group, GenerationId: -1}
	for _, p := range md.Topics[0].Partitions {
		req.Offsets = append(req.Offsets, &tapesv1.OffsetCommitPartition{Topic: topic, Partition: p.Partition, Offset: p.HighWatermark})
	}
	return e.Client.OffsetCommit(ctx, req)
}

// sampleLag raises maxLag[p] to partition p's lag now (high watermark
// minus group's committed offset); a failed read is skipped.
func (e *Env) sampleLag(ctx context.Context, group, topic string, maxLag map[int32]int64) {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	md, err := e.Client.Metadata(sctx, []string{topic}, true)
	if err != nil || len(md.Topics) != 1 {
		return
	}
	offs, err := e.Client.OffsetFetch(sctx, group, nil)
	if err != nil {
		return
	}
	committed := map[int32]int64{}
	for _, o := range offs {
		if o.Topic == topic {
			committed[o.Partition] = o.Offset
		}
	}
	for _, p := range md.Topics[0].Partitions {
		if c, ok := committed[p.Partition]; ok && c >= 0 {
			maxLag[p.Partition] = max(maxLag[p.Partition], p.HighWatermark-c)
		}
	}
}

// saltFigures are one variant's figures, from its histories, sink and
// measures.
type saltFigures struct {
	perPartition   map[int32]int64 // records acknowledged per partition
	hotPartitions  []int32         // the partitions key-0 reached
	outOfKeyOrder  int64           // in the variant's sink
	hotOutOfOrder  int64           // of which key-0's (from the sink's ids, capped: at least this many)
	neverProcessed int64
	processed      []int // record lines per consumer, in order
}

func saltFiguresOf(e *Env, m saltMeasure) (saltFigures, error) {
	f := saltFigures{perPartition: map[int32]int64{}}
	hist := e.History(saltProducer(m.Variant))
	lines, err := producer.ReadHistoryFile(hist)
	if err != nil {
		return f, err
	}
	hot := map[int32]bool{}
	hotIDs := map[string]bool{}
	for _, l := range lines {
		if l.Status != producer.StatusOK {
			continue
		}
		f.perPartition[l.Partition]++
		if l.Key != nil && (*l.Key == "key-0" || strings.HasPrefix(*l.Key, "key-0#")) {
			hot[l.Partition] = true
			hotIDs[l.EventID] = true
		}
	}
	for p := range hot {
		f.hotPartitions = append(f.hotPartitions, p)
	}
	slices.Sort(f.hotPartitions)
	st, err := sink.ComputeStats(context.Background(), saltSink(e, m.Variant), []string{hist})
	if err != nil {
		return f, err
	}
	f.outOfKeyOrder, f.neverProcessed = st.OutOfKeyOrder, st.NeverProcessed
	for i := 1; i <= m.Variant.Consumers; i++ {
		h, err := consumer.ReadHistory(e.History(saltConsumer(m.Variant, i)))
		if err != nil {
			return f, err
		}
		n := 0
		for _, l := range h {
			if l.Type == consumer.HistoryRecord {
				n++
			}
		}
		f.processed = append(f.processed, n)
	}
	for _, id := range st.OutOfKeyOrderIDs {
		if hotIDs[id] {
			f.hotOutOfOrder++
		}
	}
	return f, nil
}

// describeSalt is one variant's line of the report: each partition's
// produce rate and largest lag, the hot key's partitions and the order.
func describeSalt(m saltMeasure, f saltFigures) string {
	var parts []string
	for p := range int32(saltPartitions) {
		parts = append(parts, fmt.Sprintf("p%d %.0f/s lag<=%d", p, float64(f.perPartition[p])/m.Seconds, m.MaxLag[p]))
	}
	return fmt.Sprintf("key-0 on partitions %v; %s; records per consumer %v; out of key order %d, never processed %d",
		f.hotPartitions, strings.Join(parts, ", "), f.processed, f.outOfKeyOrder, f.neverProcessed)
}

func hotKeySaltingVerdict(e *Env, _ *check.Result) []string {
	b, err := os.ReadFile(saltMeasures(e))
	if err != nil {
		return []string{err.Error()}
	}
	var measures []saltMeasure
	if err := json.Unmarshal(b, &measures); err != nil {
		return []string{fmt.Sprintf("%s: %v", saltMeasures(e), err)}
	}
	var why []string
	for _, m := range measures {
		v := m.Variant
		f, err := saltFiguresOf(e, m)
		if err != nil {
			return []string{fmt.Sprintf("%s: %v", v.Name, err)}
		}
		line := describeSalt(m, f)
		e.Set(v.Name, line)
		e.Printf("%s: %s", v.Name, line)
		if f.neverProcessed != 0 {
			why = append(why, fmt.Sprintf("%s: %d acknowledged records never processed", v.Name, f.neverProcessed))
		}
		switch {
		case v.Salts == 0:
			if len(f.hotPartitions) != 1 {
				why = append(why, fmt.Sprintf("unsalted: key-0 on partitions %v, want one", f.hotPartitions))
				break
			}
			if f.outOfKeyOrder != 0 {
				why = append(why, fmt.Sprintf("unsalted: %d effects out of key order, want 0", f.outOfKeyOrder))
			}
			hot, rest := m.MaxLag[f.hotPartitions[0]], int64(0)
			for p, l := range m.MaxLag {
				if p != f.hotPartitions[0] {
					rest = max(rest, l)
				}
			}
			if hot <= 2*rest {
				why = append(why, fmt.Sprintf("unsalted: the hot partition %d's largest lag %d is not above twice any other's (%d): its consumer was not saturated", f.hotPartitions[0], hot, rest))
			}
		case !v.Resequence:
			if len(f.hotPartitions) < 2 {
				why = append(why, fmt.Sprintf("salted: key-0 on partitions %v, want it spread", f.hotPartitions))
			}
			if f.hotOutOfOrder == 0 {
				why = append(why, fmt.Sprintf("salted: no effect of key-0 out of key order (%d in all): salting's cost did not show", f.outOfKeyOrder))
			}
		default:
			if f.outOfKeyOrder != 0 {
				why = append(why, fmt.Sprintf("resequenced: %d effects out of key order, want 0", f.outOfKeyOrder))
			}
		}
	}
	if len(measures) != len(saltVariants) {
		why = append(why, fmt.Sprintf("%d variants measured, want %d", len(measures), len(saltVariants)))
	}
	return why
}
