package producer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/eventually"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/partitioner"
	"github.com/tapes-dev/tapes/internal/recordbatch"
	"github.com/tapes-dev/tapes/internal/storage"
)

// outcome is what the producer reported for one record.
type outcome struct {
	partition int32
	offset    int64
	errName   string
	attempts  int
	dup       bool
}

// collector records every reported outcome by the record's Tag and counts
// records reported more than once.
type collector struct {
	mu      sync.Mutex
	byTag   map[int64]outcome
	twice   int
	batches int
}

func newCollector() *collector { return &collector{byTag: map[int64]outcome{}} }

func (c *collector) onBatch(res *Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batches++
	for i, r := range res.Records {
		if _, seen := c.byTag[r.Tag]; seen {
			c.twice++
		}
		c.byTag[r.Tag] = outcome{partition: res.Partition, offset: res.Offset(i), errName: res.ErrName, attempts: res.Attempts, dup: res.Duplicate}
	}
}

// testConfig is a config with test-sized timings.
func testConfig(topic string) Config {
	cfg := DefaultConfig(topic)
	cfg.RetryBackoff, cfg.RetryBackoffMax = 5*time.Millisecond, 20*time.Millisecond
	cfg.RequestTimeout = time.Second
	cfg.Linger = 2 * time.Millisecond
	return cfg
}

func startProducer(t *testing.T, fc *fakeCluster, cfg Config, col *collector) *Producer {
	t.Helper()
	cfg.OnBatch = col.onBatch
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := New(ctx, fc.client(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Abort(); p.Close(context.Background()) })
	return p
}

// keyFor is the key of record i among keys keys.
func keyFor(i, keys int) []byte { return []byte("k" + strconv.Itoa(i%keys)) }

// sendN sends records 0..n-1 (value "v<i>", Tag i, key from keyFor when
// keys > 0) and closes the producer.
func sendN(t *testing.T, p *Producer, n, keys int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < n; i++ {
		r := &Record{Value: []byte("v" + strconv.Itoa(i)), Tag: int64(i)}
		if keys > 0 {
			r.Key = keyFor(i, keys)
		}
		if err := p.Send(ctx, r); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// checkAllAcked: every record reported once, acknowledged, and found at its
// offset in the fake's log.
func checkAllAcked(t *testing.T, fc *fakeCluster, col *collector, n int) {
	t.Helper()
	if col.twice > 0 {
		t.Fatalf("%d records reported more than once", col.twice)
	}
	if len(col.byTag) != n {
		t.Fatalf("%d records reported, want %d", len(col.byTag), n)
	}
	for tag, o := range col.byTag {
		if o.errName != "" {
			t.Fatalf("record %d failed: %s", tag, o.errName)
		}
		log := fc.log(o.partition)
		if o.offset < 0 || o.offset >= int64(len(log)) || string(log[o.offset].Value) != "v"+strconv.FormatInt(tag, 10) {
			t.Fatalf("record %d reported at %d-%d, which holds something else", tag, o.partition, o.offset)
		}
	}
}

// checkOrderNoDup: in every partition, each key's values appear in send
// order, each once, and every record sent is there.
func checkOrderNoDup(t *testing.T, fc *fakeCluster, parts int32, n int) {
	t.Helper()
	seen := map[int]bool{}
	for p := int32(0); p < parts; p++ {
		last := map[string]int{}
		for _, r := range fc.log(p) {
			i, _ := strconv.Atoi(strings.TrimPrefix(string(r.Value), "v"))
			if seen[i] {
				t.Fatalf("partition %d: record %d written twice", p, i)
			}
			seen[i] = true
			k := string(r.Key)
			if prev, ok := last[k]; ok && prev > i {
				t.Fatalf("partition %d, key %q: record %d after record %d", p, k, i, prev)
			}
			last[k] = i
		}
	}
	if len(seen) != n {
		t.Fatalf("%d distinct records in the log, want %d", len(seen), n)
	}
}

func TestKeyedRecordsGoToKafkasPartitionForTheKey(t *testing.T) {
	fc := newFakeCluster(t, 1, "orders", 7)
	col := newCollector()
	p := startProducer(t, fc, testConfig("orders"), col)
	const n, keys = 700, 37
	sendN(t, p, n, keys)
	checkAllAcked(t, fc, col, n)
	for tag, o := range col.byTag {
		if want := partitioner.ForKey(keyFor(int(tag), keys), 7); o.partition != want {
			t.Fatalf("record %d with key %q went to partition %d, ForKey says %d", tag, keyFor(int(tag), keys), o.partition, want)
		}
	}
	// Kafka's own vector: "21" hashes to -973932308, toPositive 1173551340,
	// mod 7 = 3.
	fc2 := newFakeCluster(t, 1, "t", 7)
	col2 := newCollector()
	p2 := startProducer(t, fc2, testConfig("t"), col2)
	if err := p2.Send(context.Background(), &Record{Key: []byte("21"), Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	p2.Close(context.Background())
	if got := fc2.log(3); len(got) != 1 || string(got[0].Key) != "21" {
		t.Fatalf("key \"21\" not in partition 3 of 7: %v", got)
	}
}

func TestKeylessRecordsStickToAPartitionForAboutABatch(t *testing.T) {
	fc := newFakeCluster(t, 1, "t", 4)
	col := newCollector()
	cfg := testConfig("t")
	cfg.BatchBytes = 2000
	cfg.Linger = time.Hour // only full batches leave before Close
	p := startProducer(t, fc, cfg, col)
	const n = 400
	var seq []int32
	ctx := context.Background()
	for i := 0; i < n; i++ {
		r := &Record{Value: make([]byte, 90), Tag: int64(i)}
		if err := p.Send(ctx, r); err != nil {
			t.Fatal(err)
		}
		seq = append(seq, r.Partition)
	}
	p.Close(ctx)
	// Runs on one partition: about BatchBytes of records each (~18 records
	// of ~110 bytes), and the next run elsewhere.
	runs, length := 0, 0
	for i := range seq {
		length++
		if i == len(seq)-1 || seq[i+1] != seq[i] {
			runs++
			if i != len(seq)-1 && (length < 15 || length > 20) {
				t.Fatalf("a run of %d records on partition %d; want about a 2000-byte batch", length, seq[i])
			}
			length = 0
		}
	}
	used := map[int32]bool{}
	for _, s := range seq {
		used[s] = true
	}
	if len(used) < 3 || runs < 15 {
		t.Fatalf("%d runs over %d partitions; want the sticky partitioner to move around", runs, len(used))
	}
	for part := int32(0); part < 4; part++ {
		for _, size := range fc.batchSizes(part) {
			if size > 2000 {
				t.Fatalf("a batch of %d bytes, above batch bytes 2000", size)
			}
		}
	}
}

func TestBatchSizeEstimateIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		n := 1 + rng.IntN(300)
		base := int64(1_700_000_000_000 + rng.IntN(1000))
		var msgs []*tapesv1.Record
		var recs []storage.Record
		size := batchOverhead
		for i := 0; i < n; i++ {
			m := &tapesv1.Record{TimestampMs: base + int64(rng.IntN(5000)) - 2000, Value: make([]byte, rng.IntN(300))}
			if rng.IntN(2) == 0 {
				m.Key = make([]byte, rng.IntN(70))
			}
			for h := rng.IntN(3); h > 0; h-- {
				m.Headers = append(m.Headers, &tapesv1.Header{Key: strings.Repeat("h", rng.IntN(20)), Value: make([]byte, rng.IntN(200))})
			}
			size += encodedSize(m, int64(i), m.TimestampMs-msgs0(msgs, m).TimestampMs)
			msgs = append(msgs, m)
			r := storage.Record{Timestamp: m.TimestampMs, Key: m.Key, Value: m.Value}
			for _, h := range m.Headers {
				r.Headers = append(r.Headers, storage.Header{Key: h.Key, Value: h.Value})
			}
			recs = append(recs, r)
		}
		if got := len(recordbatch.Encode(recordbatch.Producer{ID: 5, Epoch: 1, BaseSequence: 9}, recs)); got != size {
			t.Fatalf("trial %d: estimated %d bytes, encoded %d", trial, size, got)
		}
	}
}

func msgs0(msgs []*tapesv1.Record, m *tapesv1.Record) *tapesv1.Record {
	if len(msgs) == 0 {
		return m
	}
	return msgs[0]
}

func TestBatchesStayUnderMaxMessageBytesAndOversizeRecordsAreRefused(t *testing.T) {
	fc := newFakeCluster(t, 1, "t", 1)
	fc.maxMsg = 1000
	col := newCollector()
	cfg := testConfig("t")
	cfg.BatchBytes = 1 << 20 // larger than max.message.bytes: batches are capped
	p := startProducer(t, fc, cfg, col)
	err := p.Send(context.Background(), &Record{Value: make([]byte, 1000)})
	if !kerr.Is(err, kerr.RecordTooLarge) || !strings.Contains(err.Error(), "max.message.bytes=1000") {
		t.Fatalf("oversized record: %v; want RECORD_TOO_LARGE naming max.message.bytes", err)
	}
	const n = 200
	sendN(t, p, n, 0)
	checkAllAcked(t, fc, col, n)
	for _, size := range fc.batchSizes(0) {
		if size > 1000 {
			t.Fatalf("batch of %d bytes sent; max.message.bytes is 1000", size)
		}
	}
	if len(fc.batchSizes(0)) < 3 {
		t.Fatalf("%d batches for %d records; want them split under max.message.bytes", len(fc.batchSizes(0)), n)
	}
}

// The linger window is measured on the producer's clock, an input here:
// records sent while the clock stands still stay in one open batch, and
// the first record after the clock passed the window sends them all in one
// request. (With a real clock and a one-hour linger nothing would leave.)
func TestLingerHoldsAPartialBatch(t *testing.T) {
	fc := newFakeCluster(t, 1, "t", 1)
	col := newCollector()
	cfg := testConfig("t")
	cfg.Linger = time.Hour
	cfg.DeliveryTimeout = 3 * time.Hour // measured on the same clock
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	p := startProducer(t, fc, cfg, col)
	for i := 0; i < 3; i++ {
		p.Send(context.Background(), &Record{Value: []byte("v" + strconv.Itoa(i)), Tag: int64(i)})
	}
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	p.Send(context.Background(), &Record{Value: []byte("v3"), Tag: 3})
	eventually.True(t, 30*time.Second, "four records acknowledged", func() bool { return p.Stats().Acked == 4 })
	if n := fc.requestCount(0); n != 1 {
		t.Fatalf("%d requests; want the four records in one batch", n)
	}
}

func TestInFlightRequestsPerPartitionAreBounded(t *testing.T) {
	for _, maxInFlight := range []int{1, 3} {
		t.Run(fmt.Sprint(maxInFlight), func(t *testing.T) {
			fc := newFakeCluster(t, 1, "t", 2)
			fc.setHook(func(*fakeRequest) fakeAction { return fakeAction{delay: 20 * time.Millisecond} })
			col := newCollector()
			cfg := testConfig("t")
			cfg.MaxInFlight, cfg.BatchBytes, cfg.Linger = maxInFlight, 500, 0
			p := startProducer(t, fc, cfg, col)
			sendN(t, p, 600, 5)
			checkAllAcked(t, fc, col, 600)
			for part, m := range fc.mostInFlight() {
				if m != maxInFlight {
					t.Errorf("partition %d: at most %d in flight, want exactly %d reached", part, m, maxInFlight)
				}
			}
		})
	}
}

// loseResponse appends the first batch of partition 0 from request k on
// that appends records, but answers REQUEST_TIMED_OUT, as a leader deposed
// after it replicated the entry.
func loseResponse(k int) func(fr *fakeRequest) fakeAction {
	var lost atomic.Bool
	return func(fr *fakeRequest) fakeAction {
		if fr.partition == 0 && fr.n >= k && !lost.Load() {
			return fakeAction{after: kerr.New(kerr.RequestTimedOut, "leadership lost before the batch committed; it may or may not be in the log"),
				onlyIfAppended: true, lost: func() bool { return lost.CompareAndSwap(false, true) }}
		}
		return fakeAction{}
	}
}

func TestLostResponseWithoutIdempotenceWritesTheBatchTwice(t *testing.T) {
	fc := newFakeCluster(t, 1, "t", 1)
	fc.setHook(loseResponse(2))
	col := newCollector()
	cfg := testConfig("t")
	cfg.Acks, cfg.BatchBytes = client.AcksAll, 150
	p := startProducer(t, fc, cfg, col)
	const n = 300
	sendN(t, p, n, 0)
	log := fc.log(0)
	count := map[string]int{}
	for _, r := range log {
		count[string(r.Value)]++
	}
	dups := 0
	for _, c := range count {
		if c > 1 {
			dups++
		}
	}
	if dups == 0 || len(log) <= n {
		t.Fatalf("log holds %d records for %d sent, %d values twice; want the lost batch written twice (at-least-once)", len(log), n, dups)
	}
	if st := p.Stats(); st.Acked != n || st.RetriedRequests != 1 || st.DuplicatesAvoided != 0 {
		t.Fatalf("stats %+v; want all acked, one retry, no duplicate avoided", st)
	}
}

func TestLostResponseWithIdempotenceIsAnsweredAsDuplicate(t *testing.T) {
	fc := newFakeCluster(t, 1, "t", 1)
	fc.setHook(loseResponse(3))
	col := newCollector()
	cfg := testConfig("t")
	cfg.Idempotent, cfg.BatchBytes = true, 150
	p := startProducer(t, fc, cfg, col)
	const n = 300
	sendN(t, p, n, 0)
	checkAllAcked(t, fc, col, n)
	checkOrderNoDup(t, fc, 1, n)
	st := p.Stats()
	if st.DuplicatesAvoided != 1 {
		t.Fatalf("duplicates avoided = %d, want 1", st.DuplicatesAvoided)
	}
	dup := 0
	for _, o := range col.byTag {
		if o.dup {
			dup++
			if o.attempts != 2 {
				t.Fatalf("duplicate batch reported with %d attempts, want 2", o.attempts)
			}
		}
	}
	if dup == 0 {
		t.Fatal("no record reported as acknowledged through a duplicate answer")
	}
}

// TestIdempotentOrderSurvivesFaultsWithFiveInFlight throws every fault a
// failover brings at a pipelined idempotent producer: requests refused
// before appending (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS), responses
// lost after appending (REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND),
// delays that make the broker handle batches out of order, and a leader
// change. Every partition must hold each key's records in send order, each
// once, and every record must be acknowledged at the offset where it is.
func TestIdempotentOrderSurvivesFaultsWithFiveInFlight(t *testing.T) {
	fc := newFakeCluster(t, 2, "t", 3)
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(7, 8))
	var faults atomic.Int64
	fc.setHook(func(fr *fakeRequest) fakeAction {
		mu.Lock()
		x := rng.IntN(100)
		d := time.Duration(rng.IntN(4)) * time.Millisecond
		mu.Unlock()
		if x < 25 {
			faults.Add(1)
		}
		switch {
		case x < 5:
			return fakeAction{before: kerr.New(kerr.NotLeaderOrFollower, "moving")}
		case x < 10:
			return fakeAction{before: kerr.New(kerr.NotEnoughReplicas, "isr 1")}
		case x < 17:
			return fakeAction{delay: d, after: kerr.New(kerr.RequestTimedOut, "unknown outcome")}
		case x < 20:
			return fakeAction{delay: d, after: kerr.New(kerr.NotEnoughReplicasAfterAppend, "isr shrank")}
		case x < 25:
			return fakeAction{delay: 3 * d} // overtaken by later requests
		}
		return fakeAction{delay: d}
	})
	col := newCollector()
	cfg := testConfig("t")
	cfg.Idempotent, cfg.MaxInFlight, cfg.BatchBytes, cfg.Linger = true, 5, 400, 0
	p := startProducer(t, fc, cfg, col)
	const n, keys = 3000, 13
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(100 * time.Millisecond)
		fc.setLeader(1, 2) // broker 1 answers NOT_LEADER_OR_FOLLOWER with a hint
	}()
	sendN(t, p, n, keys)
	<-done
	checkAllAcked(t, fc, col, n)
	checkOrderNoDup(t, fc, 3, n)
	st := p.Stats()
	t.Logf("%d faults; stats: retried %d requests, %d duplicates avoided", faults.Load(), st.RetriedRequests, st.DuplicatesAvoided)
	if st.DuplicatesAvoided == 0 || st.RetriedRequests == 0 {
		t.Fatalf("stats %+v: the faults did not cause retries and duplicates", st)
	}
	for part, m := range fc.mostInFlight() {
		if m > 5 {
			t.Fatalf("partition %d had %d requests in flight", part, m)
		}
	}
}

// TestWithoutIdempotenceRetriesCanReorder shows what idempotence prevents:
// with several requests in flight, a batch refused before appending is
// retried after later batches were written.
func TestWithoutIdempotenceRetriesCanReorder(t *testing.T) {
	fc := newFakeCluster(t, 1, "t", 1)
	fc.setHook(func(fr *fakeRequest) fakeAction {
		if fr.n == 2 {
			return fakeAction{before: kerr.New(kerr.NotEnoughReplicas, "isr 1")}
		}
		return fakeAction{delay: time.Millisecond}
	})
	col := newCollector()
	cfg := testConfig("t")
	cfg.MaxInFlight, cfg.BatchBytes, cfg.Linger = 5, 200, 0
	p := startProducer(t, fc, cfg, col)
	sendN(t, p, 200, 0)
	checkAllAcked(t, fc, col, 200)
	prev, reordered := -1, false
	for _, r := range fc.log(0) {
		i, _ := strconv.Atoi(strings.TrimPrefix(string(r.Value), "v"))
		if i < prev {
			reordered = true
		}
		prev = i
	}
	if !reordered {
		t.Fatal("the retried batch was written in order; with 5 in flight and no idempotence it should land after later ones")
	}
}

func TestOutOfOrderWithNothingBeforeItFailsTheBatchAndBumpsTheEpoch(t *testing.T) {
	fc := newFakeCluster(t, 1, "t", 1)
	// The broker "loses" the batches it acknowledged: batch 3 is refused as
	// a gap although nothing before it is unacknowledged.
	fc.setHook(func(fr *fakeRequest) fakeAction {
		if fr.n == 3 {
			return fakeAction{before: kerr.New(kerr.OutOfOrderSequenceNumber, "sequence 20, expected 10")}
		}
		return fakeAction{}
	})
	col := newCollector()
	cfg := testConfig("t")
	cfg.Idempotent, cfg.BatchBytes, cfg.MaxInFlight, cfg.Linger = true, 150, 1, 0
	p := startProducer(t, fc, cfg, col)
	const n = 100
	sendN(t, p, n, 0)
	failed := 0
	for _, o := range col.byTag {
		if o.errName != "" {
			if o.errName != string(kerr.OutOfOrderSequenceNumber) {
				t.Fatalf("record failed with %s", o.errName)
			}
			failed++
		}
	}
	if failed == 0 || failed > 15 {
		t.Fatalf("%d records failed; want exactly the refused batch", failed)
	}
	if got := len(fc.log(0)); got != n-failed {
		t.Fatalf("log holds %d records, want %d: the batches after the failed one must go through under a new epoch", got, n-failed)
	}
	fc.mu.Lock()
	e := fc.producers[0][1001]
	fc.mu.Unlock()
	if e == nil || e.epoch != 1 {
		t.Fatalf("producer state %+v; want epoch 1 after the bump", e)
	}
}

func TestRetriesAndDeliveryTimeoutEndInAFailure(t *testing.T) {
	t.Run("retries", func(t *testing.T) {
		fc := newFakeCluster(t, 1, "t", 1)
		fc.setHook(func(*fakeRequest) fakeAction {
			return fakeAction{before: kerr.New(kerr.NotEnoughReplicas, "isr 1 < 2")}
		})
		col := newCollector()
		cfg := testConfig("t")
		cfg.Retries = 3
		p := startProducer(t, fc, cfg, col)
		sendN(t, p, 10, 0)
		for tag, o := range col.byTag {
			if o.errName != string(kerr.NotEnoughReplicas) || o.attempts != 4 {
				t.Fatalf("record %d: %+v; want NOT_ENOUGH_REPLICAS after 4 attempts", tag, o)
			}
		}
		if len(col.byTag) != 10 {
			t.Fatalf("%d records reported", len(col.byTag))
		}
	})
	t.Run("delivery timeout", func(t *testing.T) {
		fc := newFakeCluster(t, 1, "t", 1)
		fc.setHook(func(*fakeRequest) fakeAction {
			return fakeAction{before: kerr.New(kerr.LeaderNotAvailable, "electing")}
		})
		col := newCollector()
		cfg := testConfig("t")
		cfg.Idempotent = true
		cfg.DeliveryTimeout = 200 * time.Millisecond
		p := startProducer(t, fc, cfg, col)
		start := time.Now()
		sendN(t, p, 10, 0)
		if el := time.Since(start); el > 2*time.Second {
			t.Fatalf("took %v to give up", el)
		}
		for tag, o := range col.byTag {
			if o.errName != ErrNameTimeout {
				t.Fatalf("record %d: %+v; want %s", tag, o, ErrNameTimeout)
			}
		}
	})
	t.Run("non-retriable", func(t *testing.T) {
		fc := newFakeCluster(t, 1, "t", 1)
		fc.setHook(func(*fakeRequest) fakeAction {
			return fakeAction{before: kerr.New(kerr.InvalidRequest, "no")}
		})
		col := newCollector()
		p := startProducer(t, fc, testConfig("t"), col)
		sendN(t, p, 10, 0)
		for tag, o := range col.byTag {
			if o.errName != string(kerr.InvalidRequest) || o.attempts != 1 {
				t.Fatalf("record %d: %+v; want INVALID_REQUEST after one attempt", tag, o)
			}
		}
	})
}

func TestCloseGivesUpAndReportsEveryRecordOnce(t *testing.T) {
	fc := newFakeCluster(t, 1, "t", 3)
	fc.setHook(func(fr *fakeRequest) fakeAction {
		if fr.partition == 0 {
			return fakeAction{delay: time.Hour} // hangs
		}
		return fakeAction{}
	})
	col := newCollector()
	cfg := testConfig("t")
	cfg.RequestTimeout = time.Hour
	p := startProducer(t, fc, cfg, col)
	ctx := context.Background()
	const n = 300
	for i := 0; i < n; i++ {
		if err := p.Send(ctx, &Record{Key: keyFor(i, 10), Value: []byte("v" + strconv.Itoa(i)), Tag: int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := p.Close(cctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want it to give up", err)
	}
	if col.twice > 0 || len(col.byTag) != n {
		t.Fatalf("%d records reported (%d twice), want %d once each", len(col.byTag), col.twice, n)
	}
	closed := 0
	for tag, o := range col.byTag {
		switch {
		case o.partition == 0 && o.errName != ErrNameClosed:
			t.Fatalf("record %d on the hung partition: %+v; want %s", tag, o, ErrNameClosed)
		case o.partition != 0 && o.errName != "":
			t.Fatalf("record %d: %+v; want acknowledged", tag, o)
		case o.partition == 0:
			closed++
		}
	}
	if closed == 0 {
		t.Fatal("no record on the hung partition")
	}
	if err := p.Send(ctx, &Record{Value: []byte("late")}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close = %v, want ErrClosed", err)
	}
	st := p.Stats()
	if st.Sent != n || st.Acked+st.FailedTotal() != n || st.InFlight != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSendBlocksWhileTheBufferIsFull(t *testing.T) {
	fc := newFakeCluster(t, 1, "t", 1)
	release := make(chan struct{})
	fc.setHook(func(*fakeRequest) fakeAction {
		<-release
		return fakeAction{}
	})
	col := newCollector()
	cfg := testConfig("t")
	cfg.BufferBytes, cfg.BatchBytes = 2000, 500
	p := startProducer(t, fc, cfg, col)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	sent := 0
	var err error
	for i := 0; i < 100; i++ {
		if err = p.Send(ctx, &Record{Value: make([]byte, 100), Tag: int64(i)}); err != nil {
			break
		}
		sent++
	}
	if !errors.Is(err, context.DeadlineExceeded) || sent > 20 || sent < 10 {
		t.Fatalf("sent %d records of 100 bytes into a 2000-byte buffer, then %v", sent, err)
	}
	close(release)
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(col.byTag) != sent {
		t.Fatalf("%d reported, %d sent", len(col.byTag), sent)
	}
}

func TestUnknownTopicAndBadConfig(t *testing.T) {
	fc := newFakeCluster(t, 1, "t", 1)
	_, err := New(context.Background(), fc.client(t), testConfig("nope"))
	if !kerr.Is(err, kerr.UnknownTopicOrPartition) || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("unknown topic: %v", err)
	}
	for _, mod := range []func(*Config){
		func(c *Config) { c.Acks = 2 },
		func(c *Config) { c.Idempotent, c.Acks = true, client.AcksLeader },
		func(c *Config) { c.Idempotent, c.MaxInFlight = true, 6 },
		func(c *Config) { c.Idempotent, c.Retries = true, 0 },
		func(c *Config) { c.BatchBytes = 0 },
	} {
		cfg := testConfig("t")
		mod(&cfg)
		if _, err := New(context.Background(), fc.client(t), cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("config %+v: %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

func TestAcksZeroReportsNoOffset(t *testing.T) {
	fc := newFakeCluster(t, 1, "t", 2)
	col := newCollector()
	cfg := testConfig("t")
	cfg.Acks = client.AcksNone
	p := startProducer(t, fc, cfg, col)
	sendN(t, p, 20, 3)
	for tag, o := range col.byTag {
		if o.errName != "" || o.offset != -1 {
			t.Fatalf("record %d: %+v; want ok with offset -1", tag, o)
		}
	}
}
