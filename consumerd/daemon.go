package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/tapes-dev/tapes/internal/check"
	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/consumer"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/producer"
	"github.com/tapes-dev/tapes/internal/schema"
	"github.com/tapes-dev/tapes/internal/sink"
)

// daemon is one running consumerd.
type daemon struct {
	o    *options
	log  *slog.Logger
	out  io.Writer
	cl   *client.Client
	cons *consumer.Consumer
	sink *sink.Sink
	hist *consumer.HistoryWriter
	// txnHist is --txn-history (nil without).
	txnHist *check.TxnHistoryWriter
	// reseq is --resequence-salted (nil without): the poll goroutine only
	// (the loop, and the listener methods Poll calls).
	reseq *resequencer
	// dlq takes the records that do not decode; mirror (nil without
	// --mirror-to) a copy of every record. The loop's goroutine uses both.
	dlq, mirror copier

	// stopReq is closed by the control endpoint's Stop; finished when the
	// loop has left the group and flushed everything.
	stopReq  chan struct{}
	stopOnce sync.Once
	finished chan struct{}

	mu sync.Mutex
	// Counters and state for Status (the loop writes, the control
	// endpoint reads).
	processed, skipped, commits, commitsFailed, rebalances int64
	deadLettered                                           int64
	committed                                              map[int32]int64
	stopping                                               bool
	final                                                  *tapesv1.ConsumerStatusResponse
}

func newDaemon(o *options, cl *client.Client, logger *slog.Logger, out io.Writer) (*daemon, error) {
	d := &daemon{o: o, log: logger, out: out, cl: cl, stopReq: make(chan struct{}), finished: make(chan struct{}), committed: map[int32]int64{}}
	if o.resequenceSalted {
		d.reseq = newResequencer()
	}
	var err error
	if o.historyPath != "" {
		if d.hist, err = consumer.CreateHistory(o.historyPath); err != nil {
			return nil, err
		}
	}
	if o.txnHistoryPath != "" {
		if d.txnHist, err = check.CreateTxnHistory(o.txnHistoryPath); err != nil {
			d.hist.Close()
			return nil, err
		}
	}
	if o.sinkPath != "" {
		if d.sink, err = sink.Open(o.sinkPath, sink.Options{Idempotent: o.idempotentSink, Window: o.window}); err != nil {
			d.hist.Close()
			return nil, fmt.Errorf("--sink %s: %w", o.sinkPath, err)
		}
	}
	d.dlq = newForwarder(cl, logger, o.deadLetterTopic, o.topic, false)
	if o.mirrorTo != "" {
		d.mirror = newForwarder(cl, logger, o.mirrorTo, o.topic, true)
	}
	d.cons, err = consumer.New(consumer.Config{Client: cl, Group: o.group, Topic: o.topic, ClientID: o.name, Assignor: o.assignor,
		SessionTimeout: o.sessionTimeout, HeartbeatInterval: o.heartbeatInterval, MaxPollInterval: o.maxPollInterval,
		From: o.from, FetchMaxBytes: o.fetchMaxBytes, MaxBuffered: o.maxBuffered, IsolationLevel: o.isolation, Listener: d, Logger: logger})
	if err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

func (d *daemon) close() {
	if d.sink != nil {
		d.sink.Close()
	}
	d.hist.Close()
	d.txnHist.Close()
}

// run serves the control endpoint and runs the loop until ctx ends, Stop
// is requested, or a crash.
func (d *daemon) run(ctx context.Context) error {
	defer d.close()
	if d.o.controlListen != "" {
		lis, err := net.Listen("tcp", d.o.controlListen)
		if err != nil {
			d.cons.Abandon()
			return usagef("--control-listen %s: %v", d.o.controlListen, err)
		}
		srv := grpc.NewServer()
		tapesv1.RegisterConsumerControlServiceServer(srv, &controlServer{d: d})
		go srv.Serve(lis)
		defer func() {
			// Let a StopConsumer call in flight get its answer.
			done := make(chan struct{})
			go func() { srv.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-time.After(2 * time.Second):
				srv.Stop()
			}
		}()
		fmt.Fprintf(d.out, "%s: control endpoint %s\n", d.o.name, lis.Addr())
		d.log.Info("control endpoint", "address", lis.Addr().String())
	}
	d.log.Info("consuming", "group", d.o.group, "topic", d.o.topic, "assignor", d.o.assignor, "commit", d.o.commit,
		"records_per_poll", d.o.recordsPerPoll, "isolation_level", d.o.isolation.String(), "eos", d.o.eos, "output_topic", d.o.outputTopic, "transactional_id", d.o.transactionalID, "sink", d.o.sinkPath, "idempotent_sink", d.o.idempotentSink,
		"window", d.o.window.String(), "dead_letter_topic", d.o.deadLetterTopic, "mirror_to", d.o.mirrorTo)
	err := d.waitForTopic(ctx)
	if err == nil && d.o.eos {
		err = d.eosLoop(ctx)
	} else if err == nil {
		err = d.loop(ctx)
	}
	d.mu.Lock()
	d.stopping = true
	d.mu.Unlock()
	cctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if cerr := d.cons.Close(cctx); cerr != nil {
		d.log.Warn("leaving the group", "err", cerr)
	}
	for _, f := range []copier{d.dlq, d.mirror} {
		if f == nil {
			continue
		}
		if ferr := f.Close(cctx); ferr != nil {
			d.log.Warn("closing a producer", "err", ferr)
		}
	}
	st := d.status()
	st.State = "stopped"
	d.mu.Lock()
	d.final = st
	d.mu.Unlock()
	fmt.Fprintf(d.out, "%s: stopped: processed %d records, %d commits (%d failed), %d rebalances\n", d.o.name, st.Processed, st.Commits, st.CommitsFailed, st.Rebalances)
	d.mu.Lock()
	dead := d.deadLettered
	d.mu.Unlock()
	if dead > 0 {
		fmt.Fprintf(d.out, "%s: %d records could not be decoded and went to %s\n", d.o.name, dead, d.o.deadLetterTopic)
	}
	if d.mirror != nil {
		fmt.Fprintf(d.out, "%s: %d records copied to %s\n", d.o.name, d.mirror.Sent(), d.o.mirrorTo)
	}
	close(d.finished)
	return err
}

// waitForTopic returns once --topic exists, or at once with an error when
// it does not and --exit-on-error is set, or when the cluster cannot be
// asked (no broker answers, with --exit-on-error). Otherwise it warns at
// once, then every warnEvery, and asks again with backoff until the topic
// appears or ctx ends or Stop is requested (nil: the loop then stops).
// Called from run, before the loop, so that the group is not joined (and
// rebalanced in vain) for a topic that does not exist.
func (d *daemon) waitForTopic(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-d.stopReq:
			cancel()
		case <-ctx.Done():
		}
	}()
	bo := client.NewBackoff(100*time.Millisecond, 5*time.Second)
	limit := client.RateLimit{Every: warnEvery}
	for {
		_, err := d.cl.Partitions(ctx, d.o.topic)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return nil
		case !kerr.Is(err, kerr.UnknownTopicOrPartition):
			return fmt.Errorf("--topic %s: %w", d.o.topic, err)
		case d.o.exitOnError:
			return fmt.Errorf("--topic %s does not exist: %w", d.o.topic, err)
		}
		if limit.Due(time.Now()) {
			d.log.Warn("topic does not exist; waiting for it to be created", "topic", d.o.topic, "err", err,
				"create_it_with", "cluster topics create "+d.o.topic+" --partitions N --replication-factor R")
		}
		if bo.Wait(ctx) != nil {
			return nil
		}
	}
}

// poll returns the next poll's records, or stop (with the error that
// ends the loop, nil for ctx's end, Stop or Close).
func (d *daemon) poll(ctx context.Context) (recs []consumer.Record, stop bool, err error) {
	select {
	case <-ctx.Done():
		return nil, true, nil
	case <-d.stopReq:
		return nil, true, nil
	default:
	}
	recs, err = d.cons.Poll(ctx, d.o.recordsPerPoll, 200*time.Millisecond)
	if errors.Is(err, context.Canceled) || errors.Is(err, consumer.ErrClosed) {
		return nil, true, nil
	}
	return recs, err != nil, err
}

// loop is the application's poll loop.
func (d *daemon) loop(ctx context.Context) error {
	lastAuto := time.Now()
	lastProgress := time.Now()
	for {
		if d.o.commit == "auto" && time.Since(lastAuto) >= d.o.autoCommitInterval {
			// The Java client commits, at poll, the positions of what the
			// previous polls returned.
			lastAuto = time.Now()
			d.commit(ctx, d.cons.Positions())
		}
		recs, stop, err := d.poll(ctx)
		if stop {
			return err
		}
		if time.Since(lastProgress) >= 5*time.Second {
			lastProgress = time.Now()
			member, gen := d.cons.Membership()
			d.mu.Lock()
			n := d.processed
			d.mu.Unlock()
			fmt.Fprintf(d.out, "%s: processed %d, generation %d, member %s, partitions %v\n", d.o.name, n, gen, member, partitionsOf(d.cons.Assigned()))
		}
		if len(recs) == 0 {
			continue
		}
		if d.o.commit == "before" {
			d.commit(ctx, d.cons.Positions())
		}
		_, gen := d.cons.Membership()
		for _, r := range recs {
			if d.o.processTime > 0 {
				time.Sleep(d.o.processTime)
			}
			ready := []consumer.Record{r}
			if d.reseq != nil {
				// Read in order; the effects follow in key_seq order.
				if err := d.record(gen, r, deadLetterReason(r)); err != nil {
					return err
				}
				ready = d.reseq.offer(r)
			}
			for _, r := range ready {
				reason, err := d.apply(ctx, gen, r)
				if err != nil {
					return err
				}
				if d.reseq == nil {
					if err := d.record(gen, r, reason); err != nil {
						return err
					}
				}
				d.mu.Lock()
				d.processed++
				n := d.processed
				d.mu.Unlock()
				if d.o.crashAfter > 0 && n >= d.o.crashAfter {
					d.crash(fmt.Sprintf("--crash-after-records %d reached", d.o.crashAfter))
				}
			}
		}
		// The copies (dead letters, mirror) are acknowledged before any
		// commit covers their offsets.
		for _, f := range []copier{d.dlq, d.mirror} {
			if f != nil {
				if err := f.Flush(); err != nil {
					return err
				}
			}
		}
		if d.o.commit == "after" {
			d.commit(ctx, d.cons.Positions())
		}
	}
}

// headersOf returns the record's event id, entity (its logical key: the
// entity header, else its Kafka key; a salted key's records share it) and
// schema version.
func headersOf(r consumer.Record) (eventID, entity, version string) {
	for _, h := range r.Headers {
		switch h.Key {
		case producer.EventIDHeader:
			eventID = string(h.Value)
		case producer.EntityHeader:
			entity = string(h.Value)
		case producer.SchemaVersionHeader:
			version = string(h.Value)
		}
	}
	if entity == "" && r.Key != nil {
		entity = string(r.Key)
	}
	return eventID, entity, version
}

// deadLetterReason is why r cannot have an effect ("" when its value
// decodes as its schema version says).
func deadLetterReason(r consumer.Record) string {
	_, _, version := headersOf(r)
	if _, err := schema.Decode(version, r.Value); err != nil {
		return err.Error()
	}
	return ""
}

// apply copies one record to --mirror-to, decodes it, and applies its
// effect to the sink (or sends it to the dead-letter topic). It returns the
// dead-letter reason, "" when the record had its effect.
func (d *daemon) apply(ctx context.Context, gen int32, r consumer.Record) (string, error) {
	if d.mirror != nil {
		if err := d.mirror.Send(ctx, r.Key, r.Value, r.Headers); err != nil {
			return "", err
		}
	}
	eventID, entity, version := headersOf(r)
	order, derr := schema.Decode(version, r.Value)
	if derr != nil {
		if err := d.deadLetter(ctx, r, derr.Error()); err != nil {
			return "", err
		}
		return derr.Error(), nil
	}
	if entity == "" {
		entity = order.Entity
	}
	if d.sink == nil {
		return "", nil
	}
	applied, err := d.sink.Apply(ctx, sink.Effect{Consumer: d.o.name, Generation: gen, Topic: r.Topic, Partition: r.Partition,
		Offset: r.Offset, EventID: eventID, Key: entity, Value: r.Value})
	if err != nil {
		return "", fmt.Errorf("sink: %w", err)
	}
	if !applied {
		d.mu.Lock()
		d.skipped++
		d.mu.Unlock()
	}
	return "", nil
}

// record writes one record's history line; reason is its dead-letter
// reason, if it went to the dead-letter topic.
func (d *daemon) record(gen int32, r consumer.Record, reason string) error {
	eventID, _, _ := headersOf(r)
	var key *string
	if r.Key != nil {
		k := string(r.Key)
		key = &k
	}
	p, off, v := r.Partition, r.Offset, string(r.Value)
	line := consumer.HistoryLine{Type: consumer.HistoryRecord, Consumer: d.o.name, Generation: gen, Topic: r.Topic,
		Partition: &p, Offset: &off, EventID: &eventID, Key: key, Value: &v}
	if reason != "" {
		line.DeadLetter, line.Reason = d.o.deadLetterTopic, reason
	}
	return d.hist.Write(line)
}

// deadLetter sends r to the dead-letter topic with the reason (Flush, at
// the end of the poll, waits for its acknowledgement).
func (d *daemon) deadLetter(ctx context.Context, r consumer.Record, reason string) error {
	headers := append(slices.Clone(r.Headers),
		&tapesv1.Header{Key: schema.DeadLetterReasonHeader, Value: []byte(reason)},
		&tapesv1.Header{Key: schema.DeadLetterSourceHeader, Value: []byte(fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset))})
	if err := d.dlq.Send(ctx, r.Key, r.Value, headers); err != nil {
		return fmt.Errorf("dead letter: %w", err)
	}
	d.mu.Lock()
	d.deadLettered++
	d.mu.Unlock()
	d.log.Warn("record sent to the dead-letter topic", "topic", d.o.deadLetterTopic, "partition", r.Partition, "offset", r.Offset, "reason", reason)
	return nil
}

// commit commits offsets and records the attempt.
func (d *daemon) commit(ctx context.Context, offsets map[consumer.TopicPartition]int64) {
	if len(offsets) == 0 {
		return
	}
	if d.reseq != nil {
		offsets = d.reseq.capCommit(offsets)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := d.cons.Commit(cctx, offsets)
	cancel()
	_, gen := d.cons.Membership()
	if err != nil {
		d.log.Warn("commit failed", "offsets", fmt.Sprint(offsets), "err", err)
	}
	d.recordCommit(gen, offsets, err)
}

// recordCommit counts a commit (plain or in a transaction) and writes its
// history line; err is why it failed.
func (d *daemon) recordCommit(gen int32, offsets map[consumer.TopicPartition]int64, err error) {
	line := consumer.HistoryLine{Type: consumer.HistoryCommit, Consumer: d.o.name, Generation: gen, Topic: d.o.topic, Offsets: consumer.Offsets{}, Status: "ok"}
	for tp, o := range offsets {
		line.Offsets[tp.Partition] = o
	}
	d.mu.Lock()
	d.commits++
	if err != nil {
		d.commitsFailed++
		line.Status, line.Error = "error", errName(err)
	} else {
		for tp, o := range offsets {
			d.committed[tp.Partition] = o
		}
	}
	d.mu.Unlock()
	if herr := d.hist.Write(line); herr != nil {
		d.log.Error("history", "err", herr)
	}
}

// crash exits at once: no commit, no LeaveGroup. The history is written
// line by line, so nothing processed is missing from it.
func (d *daemon) crash(why string) {
	d.log.Warn("crashing on purpose", "why", why)
	fmt.Fprintf(d.out, "%s: crashed (%s)\n", d.o.name, why)
	os.Exit(exitCrashed)
}

// requestStop asks the loop to stop cleanly.
func (d *daemon) requestStop() { d.stopOnce.Do(func() { close(d.stopReq) }) }

// Revoked commits what was processed of the partitions going away (all
// records Poll returned were processed before Poll was called again).
func (d *daemon) Revoked(ctx context.Context, gen int32, tps []consumer.TopicPartition) {
	d.mu.Lock()
	d.rebalances++
	d.mu.Unlock()
	if !d.o.eos { // --eos: each poll's transaction committed its offsets
		pos := d.cons.Positions()
		offsets := map[consumer.TopicPartition]int64{}
		for _, tp := range tps {
			if o, ok := pos[tp]; ok {
				offsets[tp] = o
			}
		}
		d.commit(ctx, offsets)
	}
	d.dropHeld(tps)
	d.assignmentLine(consumer.HistoryRevoked, gen, tps, nil)
	d.log.Info("partitions revoked", "generation", gen, "partitions", fmt.Sprint(partitionsOf(tps)))
}

func (d *daemon) Assigned(_ context.Context, gen int32, tps []consumer.TopicPartition) {
	d.assignmentLine(consumer.HistoryAssigned, gen, tps, nil)
	d.log.Info("partitions assigned", "generation", gen, "partitions", fmt.Sprint(partitionsOf(tps)), "now_owned", fmt.Sprint(partitionsOf(d.cons.Assigned())))
}

func (d *daemon) Lost(_ context.Context, gen int32, tps []consumer.TopicPartition, why error) {
	d.mu.Lock()
	d.rebalances++
	d.mu.Unlock()
	d.dropHeld(tps)
	d.assignmentLine(consumer.HistoryLost, gen, tps, why)
	d.log.Warn("partitions lost (fenced): not committing them", "generation", gen, "partitions", fmt.Sprint(partitionsOf(tps)), "why", why)
}

// dropHeld forgets the records --resequence-salted holds back of
// partitions going away.
func (d *daemon) dropHeld(tps []consumer.TopicPartition) {
	if d.reseq == nil {
		return
	}
	if n := d.reseq.drop(tps); n > 0 {
		d.log.Warn("partitions going away: their records held back for key order are dropped (their next owner reads them again)", "records", n, "partitions", fmt.Sprint(partitionsOf(tps)))
	}
}

func (d *daemon) Gap(tp consumer.TopicPartition, from, to, resumeAt int64) {
	_, gen := d.cons.Membership()
	p := tp.Partition
	if err := d.hist.Write(consumer.HistoryLine{Type: consumer.HistoryGap, Consumer: d.o.name, Generation: gen, Topic: tp.Topic,
		Partition: &p, From: &from, To: &to, ResumeAt: &resumeAt}); err != nil {
		d.log.Error("history", "err", err)
	}
	fmt.Fprintf(d.out, "%s: %s-%d: offsets %d..%d were deleted by retention (or delete-records) before this group read them; continuing at %d\n",
		d.o.name, tp.Topic, tp.Partition, from, to-1, resumeAt)
	d.log.Warn("offsets lost to retention or delete-records", "partition", tp.Partition, "from", from, "to", to, "resume_at", resumeAt)
}

func (d *daemon) assignmentLine(typ string, gen int32, tps []consumer.TopicPartition, why error) {
	line := consumer.HistoryLine{Type: typ, Consumer: d.o.name, Generation: gen, Topic: d.o.topic, Partitions: partitionsOf(tps)}
	if line.Partitions == nil {
		line.Partitions = []int32{}
	}
	if why != nil {
		line.Error = why.Error()
	}
	if err := d.hist.Write(line); err != nil {
		d.log.Error("history", "err", err)
	}
}

func partitionsOf(tps []consumer.TopicPartition) []int32 {
	var out []int32
	for _, tp := range tps {
		out = append(out, tp.Partition)
	}
	return out
}

// status is the daemon's current status.
func (d *daemon) status() *tapesv1.ConsumerStatusResponse {
	member, gen := d.cons.Membership()
	state, paused := d.cons.State()
	d.mu.Lock()
	defer d.mu.Unlock()
	if state == "stable" {
		state = "running"
	}
	if paused {
		state = "paused"
	}
	if d.stopping {
		state = "stopping"
	}
	st := &tapesv1.ConsumerStatusResponse{Name: d.o.name, Group: d.o.group, Topic: d.o.topic, MemberId: member, Generation: gen,
		State: state, Assignor: d.o.assignor, Commit: d.o.commit, IdempotentSink: d.o.idempotentSink,
		Processed: d.processed, SkippedDuplicates: d.skipped, Commits: d.commits, CommitsFailed: d.commitsFailed,
		Rebalances: d.rebalances, RecordsPerPoll: int32(d.o.recordsPerPoll), IsolationLevel: d.o.isolation.String(),
		OutputTopic: d.o.outputTopic, TransactionalId: d.o.transactionalID}
	for _, p := range d.cons.AssignedSnapshot() {
		c, ok := d.committed[p.Partition]
		if !ok {
			c = -1
		}
		st.Partitions = append(st.Partitions, &tapesv1.ConsumerPartition{Partition: p.Partition, Position: p.Position, Committed: c})
	}
	return st
}
