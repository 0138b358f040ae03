package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
	"unicode"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tapes-dev/tapes/internal/client"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/partitioner"
)

// produceCommand is `cluster produce`: records from stdin, one per line, in
// the manner of kafka-console-producer.
type produceCommand struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

func init() {
	register("produce", "send records read from stdin (one per line) to a topic",
		(&produceCommand{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}).Run)
}

// produceAckTimeout is how long the leader waits for the acknowledgement
// asked for; it stays under the client's per-attempt deadline so that a slow
// commit comes back as REQUEST_TIMED_OUT rather than as a lost answer.
const produceAckTimeout = client.DefaultRequestTimeout / 2

// Run reads stdin until EOF or Ctrl-C, batches the lines per partition and
// sends them, then prints a summary to stderr. It fails when any record
// failed.
func (c *produceCommand) Run(ctx context.Context, args []string) error {
	var (
		t          clusterTarget
		topic      string
		key        string
		partition  int
		acks       string
		headers    multiFlag
		batchBytes int
		linger     time.Duration
	)
	fs := commandFlags("produce --topic T [--key K] [--partition P] [--acks 0|1|all] [--header KEY=VALUE ...]",
		"Sends every line of stdin as one record (the line is the value). Records with --key all carry that key\n"+
			"and go to the partition Kafka's default partitioner picks for it (murmur2); without --key and\n"+
			"--partition the sticky partitioner fills one batch per partition in turn. Lines are batched per\n"+
			"partition and sent when a batch is full or has waited --linger. At the end (EOF or Ctrl-C, which stops\n"+
			"reading and sends what was read) a summary goes to stderr; the exit status is 1 if any record failed.", c.stderr)
	t.addFlags(fs)
	fs.StringVar(&topic, "topic", "", "topic to write to (required)")
	fs.StringVar(&key, "key", "", "key of every record; without it records have no key (null)")
	fs.IntVar(&partition, "partition", -1, "send every record to this partition instead of choosing one")
	fs.StringVar(&acks, "acks", "all", "acknowledgement to wait for: 0 (none), 1 (the leader's log) or all (committed by Raft)")
	fs.Var(&headers, "header", "header `KEY=VALUE` added to every record; repeat for several")
	fs.IntVar(&batchBytes, "batch-bytes", 16<<10, "send a partition's batch once its records reach this many bytes (Kafka's batch.size)")
	fs.DurationVar(&linger, "linger", 5*time.Millisecond, "send a batch that has waited this long even if not full (Kafka's linger.ms)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("%w: produce takes no arguments (records come from stdin), got %q", errUsage, pos)
	}
	if topic == "" {
		return fmt.Errorf("%w: --topic is required", errUsage)
	}
	if partition < -1 {
		return fmt.Errorf("%w: --partition %d: want a partition number (0 or more)", errUsage, partition)
	}
	if batchBytes < 1 {
		return fmt.Errorf("%w: --batch-bytes %d: want at least 1", errUsage, batchBytes)
	}
	if linger < 0 {
		return fmt.Errorf("%w: --linger %v: want 0 or more", errUsage, linger)
	}
	ackCode, err := client.ParseAcks(acks)
	if err != nil {
		return fmt.Errorf("%w: --%v", errUsage, err)
	}
	hdrs, err := parseHeaders(headers)
	if err != nil {
		return err
	}
	var keyBytes []byte
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "key" {
			keyBytes = []byte(key)
		}
	})

	cl, err := t.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	setup, cancel := context.WithTimeout(ctx, t.timeout)
	n, err := partitionCount(setup, cl, topic, partition)
	cancel()
	if err != nil {
		return err
	}
	p := &lineProducer{
		cl: cl, topic: topic, partitions: int32(n), partition: int32(partition), key: keyBytes, headers: hdrs,
		acks: ackCode, batchBytes: batchBytes, linger: linger, timeout: t.timeout,
		sticky: partitioner.NewSticky(nil), batches: map[int32]*pendingBatch{}, failed: map[string]int{}, example: map[string]error{},
	}
	if keyBytes != nil && partition < 0 {
		p.partition = partitioner.ForKey(keyBytes, p.partitions)
	}
	readErr := p.run(ctx, c.stdin)
	p.summary(c.stderr)
	if readErr != nil {
		return fmt.Errorf("read stdin: %w", readErr)
	}
	if f := p.failedCount(); f > 0 {
		return fmt.Errorf("%d of %d records failed", f, p.sent)
	}
	return nil
}

func parseHeaders(kvs []string) ([]*tapesv1.Header, error) {
	var out []*tapesv1.Header
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: --header %q: want KEY=VALUE", errUsage, kv)
		}
		out = append(out, &tapesv1.Header{Key: k, Value: []byte(v)})
	}
	return out, nil
}

// lineProducer batches lines per partition and sends the batches. It is
// used by one goroutine.
type lineProducer struct {
	cl         *client.Client
	topic      string
	partitions int32
	partition  int32 // fixed partition (--partition or the key's), or -1 for sticky
	key        []byte
	headers    []*tapesv1.Header
	acks       int32
	batchBytes int
	linger     time.Duration
	timeout    time.Duration

	sticky     *partitioner.Sticky
	stickyFull bool
	batches    map[int32]*pendingBatch

	sent, acked int
	interrupted bool
	failed      map[string]int   // records per error name
	example     map[string]error // first error per name
}

type pendingBatch struct {
	records []*tapesv1.Record
	bytes   int
}

// run reads lines from r until EOF or ctx ends, sending batches as they
// fill or linger; at the end it sends what is left. It returns the read
// error, if any; send failures are counted, not returned.
func (p *lineProducer) run(ctx context.Context, r io.Reader) error {
	lines := make(chan []byte, 1024)
	stop := make(chan struct{})
	readErr := make(chan error, 1)
	go func() {
		defer close(lines)
		readErr <- readLines(r, lines, stop)
	}()
	// Sends outlive Ctrl-C: what was read is still sent (each batch bounded
	// by --timeout).
	sendCtx := context.WithoutCancel(ctx)

	var lingerC <-chan time.Time
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				p.flush(sendCtx)
				return <-readErr
			}
			p.add(sendCtx, line)
			switch {
			case len(p.batches) == 0:
				lingerC = nil
			case p.linger == 0 && len(lines) == 0:
				p.flush(sendCtx)
			case lingerC == nil:
				lingerC = time.After(p.linger)
			}
		case <-lingerC:
			lingerC = nil
			p.flush(sendCtx)
		case <-ctx.Done():
			p.interrupted = true
			close(stop)
			// Lines already read (buffered) are sent too. The reader may be
			// blocked reading stdin: it is not waited for.
			for {
				select {
				case line, ok := <-lines:
					if ok {
						p.add(sendCtx, line)
						continue
					}
				default:
				}
				break
			}
			p.flush(sendCtx)
			return nil
		}
	}
}

// errStopped ends readLines when the producer stops reading.
var errStopped = errors.New("stopped")

// readLines sends each line of r (without its line ending) to out until
// EOF, a read error, or stop.
func readLines(r io.Reader, out chan<- []byte, stop <-chan struct{}) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
			select {
			case out <- line:
			case <-stop:
				return errStopped
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// add puts one line into its partition's batch, sending the batch when full.
func (p *lineProducer) add(ctx context.Context, value []byte) {
	part := p.partition
	sticky := part < 0
	if sticky {
		part = p.sticky.Next(p.partitions, p.stickyFull)
		p.stickyFull = false
	}
	rec := &tapesv1.Record{TimestampMs: time.Now().UnixMilli(), Key: p.key, Value: value, Headers: p.headers}
	size := len(p.key) + len(value)
	for _, h := range p.headers {
		size += len(h.Key) + len(h.Value)
	}
	b := p.batches[part]
	if b == nil {
		b = &pendingBatch{}
		p.batches[part] = b
	}
	b.records = append(b.records, rec)
	b.bytes += size
	p.sent++
	if b.bytes >= p.batchBytes {
		p.send(ctx, part)
		p.stickyFull = sticky
	}
}

// flush sends every pending batch, in partition order.
func (p *lineProducer) flush(ctx context.Context) {
	parts := make([]int32, 0, len(p.batches))
	for part := range p.batches {
		parts = append(parts, part)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	for _, part := range parts {
		p.send(ctx, part)
	}
}

// send produces one partition's pending batch and counts the outcome.
func (p *lineProducer) send(ctx context.Context, part int32) {
	b := p.batches[part]
	delete(p.batches, part)
	if b == nil || len(b.records) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	_, err := p.cl.Produce(ctx, &tapesv1.ProduceRequest{
		Topic: p.topic, Partition: part, Acks: p.acks, TimeoutMs: int32(produceAckTimeout.Milliseconds()),
		Records: b.records, ProducerId: -1, ProducerEpoch: -1, BaseSequence: -1,
	})
	if err == nil {
		p.acked += len(b.records)
		return
	}
	name := errorName(err)
	p.failed[name] += len(b.records)
	if p.example[name] == nil {
		p.example[name] = err
	}
}

func (p *lineProducer) failedCount() int {
	n := 0
	for _, f := range p.failed {
		n += f
	}
	return n
}

// summary prints what happened: records sent, acknowledged, and failed by
// error name with the first error of each.
func (p *lineProducer) summary(w io.Writer) {
	prefix := ""
	if p.interrupted {
		prefix = "interrupted: "
	}
	verb := "acked"
	if p.acks == client.AcksNone {
		verb = "handed to the leader (acks=0)"
	}
	fmt.Fprintf(w, "%ssent %d records to %s: %d %s, %d failed\n", prefix, p.sent, p.topic, p.acked, verb, p.failedCount())
	names := make([]string, 0, len(p.failed))
	for n := range p.failed {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %s: %d records (first error: %v)\n", n, p.failed[n], p.example[n])
	}
}

// errorName names a failure for the summary: its Kafka error name, else its
// gRPC code in the same style (UNAVAILABLE, DEADLINE_EXCEEDED).
func errorName(err error) string {
	if code := kerr.CodeOf(err); code != "" {
		return string(code)
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return upperSnake(st.Code().String())
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "DEADLINE_EXCEEDED"
	}
	return "ERROR"
}

// upperSnake turns "DeadlineExceeded" into "DEADLINE_EXCEEDED".
func upperSnake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}
