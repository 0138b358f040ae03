package producer

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// batch is records of one partition sent as one Produce request.
type batch struct {
	id       uint64 // creation order in the partition; sequence order too
	records  []*Record
	msgs     []*tapesv1.Record
	bytes    int   // encoded size, header included
	reserved int64 // buffer bytes held by the records
	firstTs  int64
	created  time.Time
	deadline time.Time

	// Idempotence: fixed when the batch is closed, changed only when the
	// partition bumps its epoch.
	pid   int64
	epoch int32
	seq   int32

	attempts      int       // requests sent
	failures      int       // failed attempts that count against Retries
	lastErr       error     // the last attempt's error
	lastName      string    // its name
	maybeAppended bool      // some attempt's outcome was unknown
	notBefore     time.Time // backoff: not resent before
	// waitBehind: refused as out of order behind an earlier batch; resent
	// once no earlier batch is in flight.
	waitBehind bool
	// fatal: failed for good (idempotent producer); reported when it
	// reaches the head of the queue with nothing in flight.
	fatal     error
	fatalName string
}

// partition is one partition's batches and the goroutine that sends them.
type partition struct {
	p  *Producer
	id int32

	mu     sync.Mutex
	open   *batch   // the batch Send appends to
	queue  []*batch // closed batches to send (or resend), by id
	nextID uint64
	// Idempotence: this partition's producer identity and next sequence.
	pid     int64
	epoch   int32
	nextSeq int32

	wake    chan struct{}
	results chan *attemptResult

	// Owned by run.
	inflight []*batch
	// recovering: after a retriable failure (idempotent producer), send
	// nothing until the requests in flight ended, then one at a time until
	// one succeeds.
	recovering bool
	// hint is the leader a NOT_LEADER_OR_FOLLOWER answer named, tried
	// before the metadata's; -1 for none.
	hint int32
	// lastSent is the previous attempt's signal (see order.go).
	lastSent *sentSignal
}

func newPartition(p *Producer, id int32) *partition {
	return &partition{
		p: p, id: id, pid: p.pid, epoch: p.epoch,
		wake: make(chan struct{}, 1), results: make(chan *attemptResult, p.cfg.MaxInFlight),
		// A broker that does not know the producer accepts any sequence:
		// the first batch goes alone.
		recovering: p.cfg.Idempotent,
		hint:       -1,
	}
}

// poke wakes run.
func (pt *partition) poke() {
	select {
	case pt.wake <- struct{}{}:
	default:
	}
}

// append adds a record to the open batch, closing the batch first when the
// record would take it past the batch limit, and after when it reached the
// limit. It wakes the partition goroutine when a batch opened, filled, or
// has lingered long enough.
func (pt *partition) append(r *Record, msg *tapesv1.Record, reserved int64) {
	pt.mu.Lock()
	b := pt.open
	size := 0
	if b != nil {
		size = encodedSize(msg, int64(len(b.msgs)), msg.TimestampMs-b.firstTs)
		if b.bytes+size > pt.p.maxBatch {
			pt.closeOpen()
			b = nil
		}
	}
	opened := b == nil
	if opened {
		pt.nextID++
		b = &batch{id: pt.nextID, bytes: batchOverhead, firstTs: msg.TimestampMs, created: r.SentAt,
			deadline: r.SentAt.Add(pt.p.cfg.DeliveryTimeout)}
		pt.open = b
		size = encodedSize(msg, 0, 0)
	}
	b.records = append(b.records, r)
	b.msgs = append(b.msgs, msg)
	b.bytes += size
	b.reserved += reserved
	full := b.bytes >= pt.p.maxBatch
	if full {
		pt.closeOpen()
	}
	// A record that finds the batch past its linger window (on the
	// producer's clock) wakes the partition too, rather than leave the
	// send to its timer.
	lingered := !full && !r.SentAt.Before(b.created.Add(pt.p.cfg.Linger))
	pt.mu.Unlock()
	if opened || full || lingered {
		pt.poke()
	}
}

// closeOpen moves the open batch to the queue and numbers it. Caller holds mu.
func (pt *partition) closeOpen() {
	b := pt.open
	pt.open = nil
	if pt.p.cfg.Idempotent {
		pt.number(b)
	}
	pt.queue = append(pt.queue, b)
}

// number gives b the partition's identity and next sequence. Sequences wrap
// from MaxInt32 to 0, as in Kafka. Caller holds mu.
func (pt *partition) number(b *batch) {
	b.pid, b.epoch, b.seq = pt.pid, pt.epoch, pt.nextSeq
	pt.nextSeq = int32((int64(pt.nextSeq) + int64(len(b.records))) % (math.MaxInt32 + 1))
}

// requeue puts a batch back in the queue in id order.
func (pt *partition) requeue(b *batch) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	i, _ := slices.BinarySearchFunc(pt.queue, b.id, func(q *batch, id uint64) int {
		switch {
		case q.id < id:
			return -1
		case q.id > id:
			return 1
		}
		return 0
	})
	pt.queue = slices.Insert(pt.queue, i, b)
}

// finished is a reported batch and the buffer bytes it releases.
type finished struct {
	res      *Result
	reserved int64
}

func (pt *partition) succeeded(b *batch, resp *tapesv1.ProduceResponse, now time.Time) finished {
	base := resp.GetBaseOffset()
	if pt.p.cfg.Acks == 0 || base < 0 {
		base = -1
	}
	return finished{&Result{Topic: pt.p.topic, Partition: pt.id, Records: b.records, BaseOffset: base,
		Attempts: b.attempts, Duplicate: resp.GetDuplicate(), Done: now}, b.reserved}
}

func (pt *partition) failed(b *batch, err error, name string) finished {
	level := slog.LevelWarn
	if name == ErrNameClosed {
		level = slog.LevelDebug // one per open batch at a forced close: the summary counts them
	}
	pt.p.log.Log(context.Background(), level, "batch failed", "partition", pt.id, "records", len(b.records), "attempts", b.attempts, "error", name, "err", err)
	return finished{&Result{Topic: pt.p.topic, Partition: pt.id, Records: b.records, BaseOffset: -1,
		Err: err, ErrName: name, Attempts: b.attempts, Done: pt.p.cfg.Now()}, b.reserved}
}

func (pt *partition) report(done []finished) {
	for _, f := range done {
		pt.p.complete(f.res, f.reserved)
	}
}

// run sends the partition's batches until the producer is closed and
// everything was reported.
func (pt *partition) run() {
	defer pt.p.loops.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var done []finished
	for {
		wait, exit := pt.pump(&done)
		pt.report(done)
		done = done[:0]
		if exit {
			return
		}
		if wait >= 0 {
			timer.Reset(wait)
		} else {
			timer.Stop()
		}
		select {
		case <-pt.wake:
		case <-timer.C:
		case r := <-pt.results:
			pt.handle(r, &done)
		drain:
			for {
				select {
				case r := <-pt.results:
					pt.handle(r, &done)
				default:
					break drain
				}
			}
		}
	}
}

// pump sends what may be sent now and reports batches that failed for good.
// It returns how long until it has something to do without being woken (-1:
// nothing), and whether the partition is finished (closing, and nothing
// left).
func (pt *partition) pump(done *[]finished) (wait time.Duration, exit bool) {
	p := pt.p
	now := p.cfg.Now()
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if p.aborted.Load() {
		if pt.open != nil {
			pt.queue = append(pt.queue, pt.open)
			pt.open = nil
		}
		for _, b := range pt.queue {
			*done = append(*done, pt.failed(b, closedErr(b), ErrNameClosed))
		}
		pt.queue = nil
		return -1, len(pt.inflight) == 0
	}
	closing := p.closingFlag.Load()
	wait = -1
	for {
		limit := p.cfg.MaxInFlight
		if pt.recovering {
			limit = 1
		}
		if len(pt.inflight) >= limit {
			break
		}
		if len(pt.queue) == 0 {
			if pt.open == nil {
				break
			}
			if !closing {
				if d := pt.open.created.Add(p.cfg.Linger).Sub(now); d > 0 {
					wait = d
					break
				}
			}
			pt.closeOpen()
		}
		b := pt.queue[0]
		if err, name := pt.permanent(b, now); err != nil {
			if p.cfg.Idempotent && len(pt.inflight) > 0 {
				// Fail in sequence order, with nothing in flight.
				pt.recovering = true
				break
			}
			pt.queue = pt.queue[1:]
			*done = append(*done, pt.failed(b, err, name))
			if p.cfg.Idempotent {
				pt.bumpEpoch(b, err, name, done)
			}
			continue
		}
		if d := b.notBefore.Sub(now); d > 0 {
			wait = d
			break
		}
		if b.waitBehind && pt.earlierInFlight(b) {
			break // woken by that batch's result
		}
		if p.cfg.Idempotent && pt.outsideWindow(b, limit) {
			break // woken by the oldest batch's result
		}
		pt.queue = pt.queue[1:]
		pt.send(b)
	}
	if closing && pt.open == nil && len(pt.queue) == 0 && len(pt.inflight) == 0 {
		return -1, true
	}
	return wait, false
}

func closedErr(b *batch) error {
	if b.lastErr != nil {
		return fmt.Errorf("%s: the producer closed before the batch's outcome was known (last error: %w)", ErrNameClosed, b.lastErr)
	}
	return fmt.Errorf("%s: the producer closed before the batch's outcome was known", ErrNameClosed)
}

// permanent returns why b must fail now without another attempt, if it must.
func (pt *partition) permanent(b *batch, now time.Time) (error, string) {
	switch {
	case b.fatal != nil:
		return b.fatal, b.fatalName
	case !now.Before(b.deadline):
		if b.lastErr != nil {
			return fmt.Errorf("%s: batch of %d records not acknowledged within the delivery timeout %v after %d attempts (last error: %w)",
				ErrNameTimeout, len(b.records), pt.p.cfg.DeliveryTimeout, b.attempts, b.lastErr), ErrNameTimeout
		}
		return fmt.Errorf("%s: batch of %d records expired after the delivery timeout %v before it could be sent",
			ErrNameTimeout, len(b.records), pt.p.cfg.DeliveryTimeout), ErrNameTimeout
	case b.failures > pt.p.cfg.Retries:
		return fmt.Errorf("gave up after %d attempts (retries %d): %w", b.attempts, pt.p.cfg.Retries, b.lastErr), b.lastName
	}
	return nil, ""
}

// bumpEpoch follows the failure of batch b of an idempotent producer, with
// nothing in flight: the batches behind b would be refused as a gap, so the
// partition bumps its epoch and numbers them from 0. When b may have been
// written, so may the batches behind it that were sent: they fail too.
// Caller holds mu.
func (pt *partition) bumpEpoch(b *batch, err error, name string, done *[]finished) {
	if b.maybeAppended {
		keep := pt.queue[:0]
		for _, q := range pt.queue {
			if q.attempts > 0 {
				*done = append(*done, pt.failed(q, fmt.Errorf("sent behind a failed batch whose outcome is unknown: %w", err), name))
				continue
			}
			keep = append(keep, q)
		}
		clear(pt.queue[len(keep):])
		pt.queue = keep
	}
	pt.epoch++
	pt.nextSeq = 0
	for _, q := range pt.queue {
		pt.number(q)
		q.maybeAppended, q.waitBehind = false, false
	}
	pt.recovering = true
	pt.p.log.Warn("producer epoch bumped after a failed batch", "partition", pt.id, "producer_id", pt.pid, "epoch", pt.epoch, "renumbered_batches", len(pt.queue))
}

// outsideWindow reports whether sending b would put more than limit
// batches between the oldest one in flight and b. The broker remembers
// the last MaxIdempotentInFlight batches of a producer to answer a resent
// one as a duplicate; responses of one partition may come back in any
// order (concurrent requests, unlike Kafka's one connection), so counting
// only the requests in flight would let later batches push the oldest one,
// whose answer was lost, out of the broker's memory before it is resent,
// and the resend would be refused as OUT_OF_ORDER_SEQUENCE_NUMBER.
func (pt *partition) outsideWindow(b *batch, limit int) bool {
	for _, q := range pt.inflight {
		if q.id < b.id && b.id-q.id >= uint64(limit) {
			return true
		}
	}
	return false
}

// earlierInFlight reports whether a batch older than b is in flight.
func (pt *partition) earlierInFlight(b *batch) bool {
	for _, q := range pt.inflight {
		if q.id < b.id {
			return true
		}
	}
	return false
}

// send starts an attempt for b. Caller holds mu.
func (pt *partition) send(b *batch) {
	p := pt.p
	b.attempts++
	if b.attempts > 1 {
		p.stats.retriedRequests.Add(1)
		p.stats.retriedRecords.Add(int64(len(b.records)))
	}
	behind := p.cfg.Idempotent && pt.earlierInFlight(b)
	pt.inflight = append(pt.inflight, b)
	req := &tapesv1.ProduceRequest{
		Topic: p.topic, Partition: pt.id, Acks: p.cfg.Acks, Records: b.msgs,
		TimeoutMs:  int32(min(p.cfg.RequestTimeout*3/4, math.MaxInt32*time.Millisecond) / time.Millisecond),
		ProducerId: -1, ProducerEpoch: -1, BaseSequence: -1,
	}
	if p.cfg.Idempotent {
		req.ProducerId, req.ProducerEpoch, req.BaseSequence = b.pid, b.epoch, b.seq
	}
	prev, sent := pt.lastSent, newSentSignal()
	pt.lastSent = sent
	go pt.attempt(b, req, behind, pt.hint, prev, sent)
}

// handle takes an attempt's result.
func (pt *partition) handle(r *attemptResult, done *[]finished) {
	b := r.b
	if i := slices.Index(pt.inflight, b); i >= 0 {
		pt.inflight = slices.Delete(pt.inflight, i, i+1)
	}
	now := pt.p.cfg.Now()
	if r.err == nil {
		pt.recovering = false
		*done = append(*done, pt.succeeded(b, r.resp, now))
		return
	}
	p := pt.p
	name, retriable := classify(r.err)
	code := kerr.CodeOf(r.err)
	if !r.notSent && !notAppended[code] {
		b.maybeAppended = true
	}
	b.lastErr, b.lastName = r.err, name
	if p.aborted.Load() {
		*done = append(*done, pt.failed(b, closedErr(b), ErrNameClosed))
		return
	}
	if r.via >= 0 && pt.hint == r.via {
		pt.hint = -1 // the hinted leader failed too: back to the metadata
	}
	if ke, ok := kerr.As(r.err); ok && code == kerr.NotLeaderOrFollower && ke.Detail.GetLeaderId() >= 0 {
		pt.hint = ke.Detail.GetLeaderId()
	}
	if leaderMayHaveMoved(r.err) {
		p.needRefresh()
	}
	idem := p.cfg.Idempotent
	switch {
	case idem && code == kerr.OutOfOrderSequenceNumber && r.behind:
		// An earlier batch failed, or was handled after this one: resend
		// once no earlier batch is in flight. Not a failure of this batch.
		b.waitBehind = true
		p.log.Debug("out of order behind an earlier batch; will resend", "partition", pt.id, "seq", b.seq)
		pt.requeue(b)
	case retriable:
		b.failures++
		b.waitBehind = false
		b.notBefore = now.Add(pt.backoff(b.failures))
		p.log.Debug("retrying batch", "partition", pt.id, "records", len(b.records), "attempt", b.attempts, "error", name, "err", r.err)
		pt.requeue(b)
		if idem {
			pt.recovering = true
		}
	case idem:
		b.fatal, b.fatalName = r.err, name
		pt.requeue(b)
		pt.recovering = true
	default:
		*done = append(*done, pt.failed(b, r.err, name))
	}
}

// backoff is the wait before retry number n (1, 2, ...): RetryBackoff
// doubling up to RetryBackoffMax, ±20% jitter.
func (pt *partition) backoff(n int) time.Duration {
	cfg := pt.p.cfg
	d := cfg.RetryBackoff
	for i := 1; i < n && d < cfg.RetryBackoffMax; i++ {
		d *= 2
	}
	d = min(d, cfg.RetryBackoffMax)
	return d + time.Duration((rand.Float64()*0.4-0.2)*float64(d))
}
