package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/partitioner"
)

// ErrClosed is returned by Send after Close.
var ErrClosed = errors.New("producer: closed")

// Record is one record handed to Send.
type Record struct {
	// Key is nil for a keyless record (sticky partitioner), which is not the
	// same as an empty key.
	Key   []byte
	Value []byte
	// Headers travel with the record.
	Headers []*tapesv1.Header
	// Timestamp in milliseconds since the epoch; 0 means the time of Send.
	Timestamp int64
	// Tag is the caller's; the producer does not read it.
	Tag int64

	// Set by Send.
	SentAt    time.Time // when Send took the record
	Partition int32
}

// Result is the outcome of one batch: every record of it shares it.
type Result struct {
	Topic     string
	Partition int32
	// Records in the order they were sent; Records[i] is at BaseOffset+i.
	Records []*Record
	// BaseOffset is -1 when unknown: a failure, or acks=0.
	BaseOffset int64
	// Err is nil on success; ErrName is its Kafka name (see the package
	// documentation).
	Err     error
	ErrName string
	// Attempts is the number of Produce requests that carried the batch.
	Attempts int
	// Duplicate: the broker answered a retry from its producer state (the
	// batch was already written; idempotence avoided a duplicate).
	Duplicate bool
	// Done is when the outcome was known (the acknowledgement's arrival on
	// success).
	Done time.Time
}

// Offset returns the offset of Records[i], or -1 when unknown.
func (r *Result) Offset(i int) int64 {
	if r.BaseOffset < 0 || r.Err != nil {
		return -1
	}
	return r.BaseOffset + int64(i)
}

// Producer sends records to one topic. Send and Stats are safe for
// concurrent use.
type Producer struct {
	cfg      Config
	cl       *client.Client
	log      *slog.Logger
	topic    string
	nparts   int32
	maxBatch int // min(BatchBytes, max.message.bytes)
	maxMsg   int64

	pid   int64
	epoch int32

	parts []*partition

	// closeMu: Send holds it shared while appending; Close takes it to
	// set closing, after which no record is appended.
	closeMu sync.RWMutex
	closing bool
	// closingFlag mirrors closing for the partition goroutines, which must
	// not take closeMu while holding a partition's lock (Send does the
	// opposite).
	closingFlag atomic.Bool

	stickyMu    sync.Mutex
	sticky      *partitioner.Sticky
	stickyBytes int // sent to the sticky partition since it was chosen

	bufMu   sync.Mutex
	bufUsed int64
	bufFree chan struct{} // closed and replaced whenever bytes are released

	runCtx    context.Context // attempts; cancelled by abort
	runCancel context.CancelFunc
	abortOnce sync.Once
	aborted   atomic.Bool
	loops     sync.WaitGroup
	refresh   chan struct{}
	refreshWG sync.WaitGroup

	stats stats
}

// New looks topic up (its partitions and max.message.bytes), obtains a
// producer id when cfg.Idempotent, and starts one goroutine per partition.
// An unknown topic is UNKNOWN_TOPIC_OR_PARTITION.
func New(ctx context.Context, cl *client.Client, cfg Config) (*Producer, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	md, err := cl.Metadata(ctx, []string{cfg.Topic}, false)
	if err != nil {
		return nil, fmt.Errorf("metadata of topic %q: %w", cfg.Topic, err)
	}
	var tm *tapesv1.TopicMetadata
	for _, t := range md.GetTopics() {
		if t.GetName() == cfg.Topic {
			tm = t
		}
	}
	if tm == nil {
		return nil, kerr.New(kerr.UnknownTopicOrPartition, "topic %q does not exist", cfg.Topic)
	}
	if err := kerr.FromDetail(tm.GetError()); err != nil {
		if kerr.Is(err, kerr.UnknownTopicOrPartition) {
			return nil, kerr.New(kerr.UnknownTopicOrPartition, "topic %q does not exist", cfg.Topic)
		}
		return nil, fmt.Errorf("topic %q: %w", cfg.Topic, err)
	}
	if len(tm.GetPartitions()) == 0 {
		return nil, kerr.New(kerr.UnknownTopicOrPartition, "topic %q has no partitions", cfg.Topic)
	}
	tc, err := metadata.ParseTopicConfig(tm.GetConfigs())
	if err != nil {
		return nil, fmt.Errorf("configs of topic %q: %w", cfg.Topic, err)
	}
	p := &Producer{
		cfg: cfg, cl: cl, log: log, topic: cfg.Topic, nparts: int32(len(tm.GetPartitions())),
		maxMsg: tc.MaxMessageBytes, pid: -1, epoch: -1,
		sticky: partitioner.NewSticky(nil), bufFree: make(chan struct{}), refresh: make(chan struct{}, 1),
	}
	p.maxBatch = int(min(int64(cfg.BatchBytes), tc.MaxMessageBytes))
	if cfg.Idempotent {
		id, epoch, err := cl.InitProducerId(ctx)
		if err != nil {
			return nil, fmt.Errorf("init producer id: %w", err)
		}
		p.pid, p.epoch = id, epoch
		log.Info("idempotent producer", "producer_id", id, "epoch", epoch)
	}
	p.stats.init(int(p.nparts))
	p.runCtx, p.runCancel = context.WithCancel(context.Background())
	p.refreshWG.Add(1)
	go p.refresher()
	for i := range p.nparts {
		pt := newPartition(p, i)
		p.parts = append(p.parts, pt)
		p.loops.Add(1)
		go pt.run()
	}
	return p, nil
}

// Partitions is the topic's partition count (read once, by New).
func (p *Producer) Partitions() int32 { return p.nparts }

// MaxMessageBytes is the topic's max.message.bytes.
func (p *Producer) MaxMessageBytes() int64 { return p.maxMsg }

// ProducerID returns the producer id and epoch (-1, -1 when not idempotent).
func (p *Producer) ProducerID() (int64, int32) { return p.pid, p.epoch }

// Send hands r to the producer and returns once it is in a batch; the
// outcome comes later through Config.OnBatch. Send blocks while the records
// waiting for an outcome fill Config.BufferBytes (until ctx ends). A record
// that cannot fit in any batch of the topic is RECORD_TOO_LARGE, and Send
// after Close is ErrClosed: neither record is reported.
func (p *Producer) Send(ctx context.Context, r *Record) error {
	r.SentAt = p.cfg.Now()
	if r.Timestamp == 0 {
		r.Timestamp = r.SentAt.UnixMilli()
	}
	msg := &tapesv1.Record{TimestampMs: r.Timestamp, Key: r.Key, Value: r.Value, Headers: r.Headers}
	if n := SingleRecordBatchSize(msg); int64(n) > p.maxMsg {
		return kerr.New(kerr.RecordTooLarge, "a record of %d bytes (value %d bytes) exceeds max.message.bytes=%d of topic %q",
			n, len(r.Value), p.maxMsg, p.topic)
	}
	// Reserve with the record's largest size in a batch (deltas of up to
	// 5 bytes each); the batch accounts its exact size.
	reserve := int64(encodedSize(msg, 1<<28, 1<<28))
	if err := p.reserve(ctx, reserve); err != nil {
		return err
	}
	p.closeMu.RLock()
	if p.closing {
		p.closeMu.RUnlock()
		p.release(reserve)
		return ErrClosed
	}
	if r.Key != nil {
		r.Partition = partitioner.ForKey(r.Key, p.nparts)
		p.parts[r.Partition].append(r, msg, reserve)
	} else {
		// Sticky: stay on a partition until about BatchBytes went to it
		// (Kafka's built-in partitioner), then move to another.
		p.stickyMu.Lock()
		full := p.stickyBytes >= p.maxBatch
		if full {
			p.stickyBytes = 0
		}
		r.Partition = p.sticky.Next(p.nparts, full)
		p.stickyBytes += int(reserve)
		p.parts[r.Partition].append(r, msg, reserve)
		p.stickyMu.Unlock()
	}
	p.stats.sent.Add(1)
	p.closeMu.RUnlock()
	return nil
}

// reserve takes n bytes of the buffer, waiting while it is full. A record
// larger than the whole buffer is let through when the buffer is empty.
func (p *Producer) reserve(ctx context.Context, n int64) error {
	for {
		p.bufMu.Lock()
		if p.bufUsed == 0 || p.bufUsed+n <= p.cfg.BufferBytes {
			p.bufUsed += n
			p.bufMu.Unlock()
			return nil
		}
		free := p.bufFree
		p.bufMu.Unlock()
		select {
		case <-free:
		case <-ctx.Done():
			return ctx.Err()
		case <-p.runCtx.Done():
			return ErrClosed
		}
	}
}

func (p *Producer) release(n int64) {
	p.bufMu.Lock()
	p.bufUsed -= n
	close(p.bufFree)
	p.bufFree = make(chan struct{})
	p.bufMu.Unlock()
}

// Close stops taking records, sends every batch (linger no longer waits)
// and waits for every outcome. When ctx ends first, it gives up: requests
// in flight are cancelled, and every record without an outcome is reported
// as PRODUCER_CLOSED (it may or may not be in the log). Either way, when
// Close returns every record Send took has been reported. It returns ctx's
// error when it gave up.
func (p *Producer) Close(ctx context.Context) error {
	p.closeMu.Lock()
	p.closing = true
	p.closingFlag.Store(true)
	p.closeMu.Unlock()
	for _, pt := range p.parts {
		pt.poke()
	}
	done := make(chan struct{})
	go func() { p.loops.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		p.Abort()
		<-done
	}
	p.runCancel()
	p.refreshWG.Wait()
	return err
}

// Abort makes Close give up at once (see Close); it does not wait.
func (p *Producer) Abort() {
	p.abortOnce.Do(func() {
		p.aborted.Store(true)
		p.runCancel()
		for _, pt := range p.parts {
			pt.poke()
		}
	})
}

// needRefresh asks the refresher for a metadata refresh (coalesced).
func (p *Producer) needRefresh() {
	select {
	case p.refresh <- struct{}{}:
	default:
	}
}

// refresher refreshes the client's metadata when an attempt failed in a way
// that may mean the leader moved, at most every 50ms, so that the next
// attempts find the new leader without each paying for a refresh.
func (p *Producer) refresher() {
	defer p.refreshWG.Done()
	for {
		select {
		case <-p.runCtx.Done():
			return
		case <-p.refresh:
		}
		ctx, cancel := context.WithTimeout(p.runCtx, p.cfg.RequestTimeout)
		if err := p.cl.RefreshMetadata(ctx); err != nil && p.runCtx.Err() == nil {
			p.log.Debug("metadata refresh failed", "err", err)
		}
		cancel()
		select {
		case <-p.runCtx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// complete reports a batch's outcome: counters, buffer, callback.
func (p *Producer) complete(res *Result, reserved int64) {
	n := int64(len(res.Records))
	if res.Err == nil {
		p.stats.acked.Add(n)
		p.stats.ackedPerPartition[res.Partition].Add(n)
		if res.Duplicate {
			p.stats.duplicates.Add(1)
		}
	} else {
		p.stats.fail(res.ErrName, n)
	}
	p.release(reserved)
	if p.cfg.OnBatch != nil {
		p.cfg.OnBatch(res)
	}
}

// Stats is a snapshot of the producer's counters.
type Stats struct {
	// Sent counts records handed to Send (and taken).
	Sent int64
	// Acked counts records acknowledged.
	Acked int64
	// Failed counts records that ended in error, by error name.
	Failed map[string]int64
	// RetriedRecords counts records resent (once per resend);
	// RetriedRequests the requests that resent a batch.
	RetriedRecords, RetriedRequests int64
	// DuplicatesAvoided counts retried batches the broker answered as
	// duplicates.
	DuplicatesAvoided int64
	// InFlight counts records taken but not yet reported.
	InFlight int64
	// AckedPerPartition counts acknowledged records per partition.
	AckedPerPartition []int64
}

// FailedTotal sums Failed.
func (s Stats) FailedTotal() int64 {
	var n int64
	for _, v := range s.Failed {
		n += v
	}
	return n
}

// FailedNames returns the error names of Failed, sorted.
func (s Stats) FailedNames() []string {
	names := make([]string, 0, len(s.Failed))
	for n := range s.Failed {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

type stats struct {
	sent, acked                     atomic.Int64
	retriedRecords, retriedRequests atomic.Int64
	duplicates                      atomic.Int64
	failedTotal                     atomic.Int64
	ackedPerPartition               []atomic.Int64

	mu     sync.Mutex
	failed map[string]int64
}

func (s *stats) init(partitions int) {
	s.ackedPerPartition = make([]atomic.Int64, partitions)
	s.failed = map[string]int64{}
}

func (s *stats) fail(name string, n int64) {
	s.mu.Lock()
	s.failed[name] += n
	s.mu.Unlock()
	s.failedTotal.Add(n)
}

// Stats returns the counters now.
func (p *Producer) Stats() Stats {
	st := Stats{
		Acked:             p.stats.acked.Load(),
		RetriedRecords:    p.stats.retriedRecords.Load(),
		RetriedRequests:   p.stats.retriedRequests.Load(),
		DuplicatesAvoided: p.stats.duplicates.Load(),
		Failed:            map[string]int64{},
		AckedPerPartition: make([]int64, len(p.stats.ackedPerPartition)),
	}
	p.stats.mu.Lock()
	for k, v := range p.stats.failed {
		st.Failed[k] = v
	}
	failed := p.stats.failedTotal.Load()
	p.stats.mu.Unlock()
	for i := range p.stats.ackedPerPartition {
		st.AckedPerPartition[i] = p.stats.ackedPerPartition[i].Load()
	}
	// Sent last: every record counted as acked or failed was sent before.
	st.Sent = p.stats.sent.Load()
	st.InFlight = max(st.Sent-st.Acked-failed, 0)
	return st
}
