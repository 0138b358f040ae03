package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/producer"
)

const perfAbout = `Sends --num-records records of --record-size random bytes (no key, no headers), throttled to
--throughput records per second (-1: as fast as possible), and prints, as kafka-producer-perf-test
does, a line every --reporting-interval:
  N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max latency.
and a final line:
  N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max latency, P ms 50th, P ms 95th, P ms 99th, P ms 99.9th.
A record's latency runs from the moment it is handed to the producer to its acknowledgement; MB
is 2^20 bytes of record values. With --partitions P the topic (default perf-test) is created with P
partitions and --replication-factor replicas when it does not exist.

Exit status: 0 every record acknowledged; 1 some failed; 2 bad command line; 3 unknown topic or a
record larger than the topic's max.message.bytes.`

type perfOpts struct {
	target
	sendOpts
	topic         string
	numRecords    int64
	recordSize    int
	throughputStr string
	throughput    float64
	partitions    int
	rf            int
	interval      time.Duration
	logLevel      string
}

func parsePerf(args []string, stderr io.Writer) (*perfOpts, error) {
	o := &perfOpts{}
	fs := newFlags("producerd perf", "producerd perf --num-records N --record-size B --throughput T|-1 [--acks 0|1|all] [--partitions P] [--idempotent] [FLAGS]", perfAbout, stderr)
	o.target.addFlags(fs)
	fs.StringVar(&o.topic, "topic", "perf-test", "topic to write to")
	fs.Int64Var(&o.numRecords, "num-records", 0, "number of records to send (required)")
	fs.IntVar(&o.recordSize, "record-size", 0, "bytes in each record's value (required)")
	fs.StringVar(&o.throughputStr, "throughput", "", "target records per second, or -1 for no limit (required)")
	o.sendOpts.addFlags(fs)
	fs.IntVar(&o.partitions, "partitions", 0, "create the topic with this many partitions if it does not exist (0: the topic must exist)")
	fs.IntVar(&o.rf, "replication-factor", 0, "replicas per partition of a topic --partitions creates (0: 3, or the broker count if smaller)")
	fs.DurationVar(&o.interval, "reporting-interval", 5*time.Second, "how often to print a progress line")
	fs.StringVar(&o.logLevel, "log-level", "warn", "log level on stderr: debug, info, warn or error")
	if err := parse(fs, args); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, req := range []string{"num-records", "record-size", "throughput"} {
		if !set[req] {
			return nil, usagef("--%s is required", req)
		}
	}
	var err error
	switch {
	case o.numRecords < 1:
		return nil, usagef("--num-records %d: want at least 1", o.numRecords)
	case o.recordSize < 1:
		return nil, usagef("--record-size %d: want at least 1 byte", o.recordSize)
	case o.partitions < 0:
		return nil, usagef("--partitions %d: want 1 or more (0: use the existing topic)", o.partitions)
	case o.rf < 0:
		return nil, usagef("--replication-factor %d: want 1 or more", o.rf)
	case o.interval <= 0:
		return nil, usagef("--reporting-interval %v: want more than 0", o.interval)
	}
	if o.throughput, err = strconv.ParseFloat(strings.TrimSpace(o.throughputStr), 64); err != nil || (o.throughput <= 0 && o.throughput != -1) {
		return nil, usagef("--throughput %q: want records per second (more than 0), or -1 for no limit", o.throughputStr)
	}
	if err := o.sendOpts.check(); err != nil {
		return nil, err
	}
	return o, nil
}

func runPerf(args []string, stdout, stderr io.Writer) error {
	o, err := parsePerf(args, stderr)
	if err != nil {
		return err
	}
	logger, err := newLogger(o.logLevel, stderr, "perf")
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cl, err := o.client(logger)
	if err != nil {
		return err
	}
	defer cl.Close()
	setup, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if o.partitions > 0 {
		if err := ensureTopic(setup, cl, o, stderr); err != nil {
			return err
		}
	}

	payload := make([]byte, o.recordSize)
	for i := range payload {
		payload[i] = byte('A' + rand.IntN(26))
	}
	var stats *producer.PerfStats // set before the first Send
	var failMu sync.Mutex
	failed := map[string]int64{}
	var firstErr error
	cfg := producer.DefaultConfig(o.topic)
	cfg.Acks, cfg.Idempotent, cfg.MaxInFlight = o.acks, o.idempotent, o.maxInFlight
	cfg.Linger, cfg.BatchBytes = o.linger, o.batchBytes
	cfg.DeliveryTimeout, cfg.RequestTimeout = o.deliveryTimeout, o.requestTimeout
	cfg.Logger = logger
	cfg.OnBatch = func(res *producer.Result) {
		if res.Err != nil {
			failMu.Lock()
			failed[res.ErrName] += int64(len(res.Records))
			if firstErr == nil {
				firstErr = res.Err
			}
			failMu.Unlock()
			return
		}
		for _, r := range res.Records {
			stats.Record(res.Done.Sub(r.SentAt), len(r.Value))
		}
	}
	prod, err := producer.New(setup, cl, cfg)
	if err != nil {
		if kerr.Is(err, kerr.UnknownTopicOrPartition) {
			return &inputError{fmt.Errorf("--topic %s: %w (pass --partitions to create it)", o.topic, err)}
		}
		return err
	}
	size := producer.SingleRecordBatchSize(&tapesv1.Record{TimestampMs: time.Now().UnixMilli(), Value: payload})
	if int64(size) > prod.MaxMessageBytes() {
		prod.Close(context.Background())
		return &inputError{kerr.New(kerr.RecordTooLarge, "--record-size %d makes records of %d bytes, more than max.message.bytes=%d of topic %q",
			o.recordSize, size, prod.MaxMessageBytes(), o.topic)}
	}

	stats = producer.NewPerfStats(o.numRecords, time.Now())
	stopReport := stats.Report(stdout, o.interval)
	var pc pacer
	pc.reset(max(o.throughput, 0), time.Now())
	var sendErr error
send:
	for i := int64(0); i < o.numRecords; i++ {
		if w := pc.next(time.Now()); w > time.Millisecond {
			select {
			case <-time.After(w):
			case <-ctx.Done():
				break send
			}
		}
		if err := prod.Send(ctx, &producer.Record{Value: payload}); err != nil {
			if ctx.Err() == nil {
				sendErr = err
			}
			break
		}
	}
	closeCtx, cancelClose := context.WithTimeout(context.Background(), o.deliveryTimeout+o.requestTimeout)
	defer cancelClose()
	go func() {
		select {
		case <-ctx.Done(): // interrupted: do not wait long
			time.Sleep(5 * time.Second)
			cancelClose()
		case <-closeCtx.Done():
		}
	}()
	prod.Close(closeCtx)
	stopReport()
	fmt.Fprintln(stdout, stats.Total(time.Now()).Line())
	if sendErr != nil {
		return sendErr
	}
	var total int64
	var parts []string
	for name, n := range failed {
		total += n
		parts = append(parts, fmt.Sprintf("%s %d", name, n))
	}
	if total > 0 {
		fmt.Fprintf(stderr, "producerd perf: %d records failed (%s); first error: %v\n", total, strings.Join(parts, ", "), firstErr)
		return &failedError{total}
	}
	return nil
}

// ensureTopic creates o.topic with o.partitions partitions when it does not
// exist and waits until every partition has a leader.
func ensureTopic(ctx context.Context, cl *client.Client, o *perfOpts, stderr io.Writer) error {
	md, err := cl.Metadata(ctx, []string{o.topic}, false)
	if err != nil {
		return err
	}
	exists := false
	for _, t := range md.GetTopics() {
		if t.GetName() == o.topic && t.GetError() == nil {
			exists = true
			if n := len(t.GetPartitions()); n != o.partitions {
				fmt.Fprintf(stderr, "producerd perf: topic %s exists with %d partitions; --partitions %d ignored\n", o.topic, n, o.partitions)
			}
		}
	}
	if !exists {
		rf := o.rf
		if rf == 0 {
			alive := 0
			for _, b := range md.GetBrokers() {
				if b.GetAlive() {
					alive++
				}
			}
			rf = max(1, min(3, alive))
		}
		err := cl.CreateTopics(ctx, []*tapesv1.TopicSpec{{Name: o.topic, Partitions: int32(o.partitions), ReplicationFactor: int32(rf)}}, false)
		if err != nil && !kerr.Is(err, kerr.TopicAlreadyExists) {
			var ke *kerr.Error
			if errors.As(err, &ke) && !ke.Code().Retriable() {
				return &inputError{err}
			}
			return err
		}
		fmt.Fprintf(stderr, "producerd perf: created topic %s with %d partitions, replication factor %d\n", o.topic, o.partitions, rf)
	}
	for {
		md, err := cl.Metadata(ctx, []string{o.topic}, false)
		if err == nil && len(md.GetTopics()) == 1 && md.GetTopics()[0].GetError() == nil {
			ready := len(md.GetTopics()[0].GetPartitions()) > 0
			for _, p := range md.GetTopics()[0].GetPartitions() {
				if p.GetLeaderId() < 0 {
					ready = false
				}
			}
			if ready {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topic %s: partitions without a leader: %w", o.topic, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
