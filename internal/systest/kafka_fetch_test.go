package systest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	fkerr "github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/eventually"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// kafkaConsumer is a franz-go consumer of exact offsets (no group, no
// ListOffsets) that collects every record it polls, from its own goroutine
// until the test ends.
type kafkaConsumer struct {
	cl *kgo.Client
	mu sync.Mutex
	// recs are the records polled, in poll order.
	recs []*kgo.Record
	// fetchWrites, fetchReads: when a Fetch request was last written to
	// each broker, and when an answer to one was last read.
	fetchWrites, fetchReads map[int32]time.Time
	got                     chan *kgo.Record // every record, as polled (buffered)
}

// fetchHook records when each Fetch request is written and answered (kgo
// calls it on its broker goroutines).
type fetchHook struct{ c *kafkaConsumer }

func (h fetchHook) OnBrokerWrite(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == kmsg.Fetch.Int16() && err == nil {
		h.c.mu.Lock()
		h.c.fetchWrites[meta.NodeID] = time.Now()
		h.c.mu.Unlock()
	}
}

func (h fetchHook) OnBrokerRead(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == kmsg.Fetch.Int16() {
		h.c.mu.Lock()
		h.c.fetchReads[meta.NodeID] = time.Now()
		h.c.mu.Unlock()
	}
}

func consumeKafka(t *testing.T, e *testcluster.Env, topic string, offsets map[int32]int64, opts ...kgo.Opt) *kafkaConsumer {
	t.Helper()
	parts := map[int32]kgo.Offset{}
	for p, o := range offsets {
		parts[p] = kgo.NewOffset().At(o)
	}
	c := &kafkaConsumer{fetchWrites: map[int32]time.Time{}, fetchReads: map[int32]time.Time{}, got: make(chan *kgo.Record, 10000)}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(e.KafkaBootstrap()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}),
		kgo.WithHooks(fetchHook{c}), kgo.RetryTimeout(60 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	c.cl = cl
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachError(func(topic string, p int32, err error) {
				if ctx.Err() == nil {
					t.Logf("kgo fetch %s-%d: %v", topic, p, err)
				}
			})
			fs.EachRecord(func(r *kgo.Record) {
				c.mu.Lock()
				c.recs = append(c.recs, r)
				c.mu.Unlock()
				c.got <- r
			})
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		cl.Close()
	})
	return c
}

func (c *kafkaConsumer) records() []*kgo.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*kgo.Record(nil), c.recs...)
}

// parkedSince is when the Fetch waiting on broker now was written; ok is
// false when none waits (the last one written has been answered).
func (c *kafkaConsumer) parkedSince(broker int32) (since time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, r := c.fetchWrites[broker], c.fetchReads[broker]
	return w, !w.IsZero() && w.After(r)
}

// sameRecord says how a record read through Kafka's Fetch differs from the
// one gRPC's Fetch returns ("" when it does not): offset, key (null apart
// from empty), value, headers, CreateTime timestamp.
func sameRecord(k *kgo.Record, g *tapesv1.Record) string {
	switch {
	case k.Offset != g.Offset:
		return fmt.Sprintf("offset %d, gRPC %d", k.Offset, g.Offset)
	case (k.Key == nil) != (g.Key == nil) || !bytes.Equal(k.Key, g.Key):
		return fmt.Sprintf("key %q (null %v), gRPC %q (null %v)", k.Key, k.Key == nil, g.Key, g.Key == nil)
	case !bytes.Equal(k.Value, g.Value):
		return fmt.Sprintf("value %q, gRPC %q", k.Value, g.Value)
	case k.Timestamp.UnixMilli() != g.TimestampMs || k.Attrs.TimestampType() != 0:
		return fmt.Sprintf("timestamp %d (type %d), gRPC %d", k.Timestamp.UnixMilli(), k.Attrs.TimestampType(), g.TimestampMs)
	case len(k.Headers) != len(g.Headers):
		return fmt.Sprintf("%d headers, gRPC %d", len(k.Headers), len(g.Headers))
	case k.LeaderEpoch < 1:
		// gRPC's Produce stores Kafka batches too, stamped with the Raft
		// term of the leader that appended them.
		return fmt.Sprintf("leader epoch %d, want the appending leader's Raft term (1 or more)", k.LeaderEpoch)
	}
	for i, h := range k.Headers {
		if h.Key != g.Headers[i].Key || !bytes.Equal(h.Value, g.Headers[i].Value) {
			return fmt.Sprintf("header %d %q=%q, gRPC %q=%q", i, h.Key, h.Value, g.Headers[i].Key, g.Headers[i].Value)
		}
	}
	return ""
}

// waitRecords waits until c has polled n records and returns them.
func waitRecords(t *testing.T, c *kafkaConsumer, n int, d time.Duration) []*kgo.Record {
	t.Helper()
	eventually.Nil(t, d, fmt.Sprintf("the Kafka consumer to read %d records", n), func() error {
		if got := len(c.records()); got < n {
			return fmt.Errorf("%d records so far", got)
		}
		return nil
	})
	return c.records()
}

func produceGRPC(t *testing.T, e *testcluster.Env, topic string, p int32, recs []*tapesv1.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.Client.Produce(ctx, &tapesv1.ProduceRequest{Topic: topic, Partition: p, Acks: -1, Records: recs}); err != nil {
		t.Fatalf("produce to %s-%d: %v", topic, p, err)
	}
}

// TestKafkaFetch: records produced through gRPC (as producerd writes them)
// and by `cluster produce` read by a franz-go consumer exactly as gRPC's Fetch
// returns them; raw Fetch at every served version; the errors and empty
// answers; a consumer of six partitions woken by a record on any one.
func TestKafkaFetch(t *testing.T) {
	e := start(t, 3, "--metrics-listen", "127.0.0.1:0")
	e.CreateTopic("kf", 1, 3, nil)
	e.CreateTopic("wake", 6, 3, nil)

	// Three batches: null and empty keys, an empty value (gRPC's value is
	// not optional: stored null), headers, timestamps out of order.
	ts := int64(1_700_000_000_000)
	produceGRPC(t, e, "kf", 0, []*tapesv1.Record{
		{Key: nil, Value: []byte("v0"), TimestampMs: ts},
		{Key: []byte{}, Value: []byte("v1"), TimestampMs: ts + 5, Headers: []*tapesv1.Header{{Key: "h", Value: []byte("x")}, {Key: "empty", Value: nil}}},
	})
	produceGRPC(t, e, "kf", 0, []*tapesv1.Record{{Key: []byte("k"), Value: nil, TimestampMs: ts - 1000}})
	var many []*tapesv1.Record
	for i := range 300 {
		many = append(many, &tapesv1.Record{Key: []byte(fmt.Sprintf("key-%d", i%7)), Value: bytes.Repeat([]byte{'a' + byte(i%26)}, i), TimestampMs: ts + int64(i%11)})
	}
	produceGRPC(t, e, "kf", 0, many)
	var lines []string
	for i := range 20 {
		lines = append(lines, fmt.Sprintf("cli-%d", i))
	}
	if _, err := cli(t, e, strings.Join(lines, "\n")+"\n", "produce", "--topic", "kf", "--partition", "0", "--key", "alice", "--header", "src=cli", "--acks", "all"); err != nil {
		t.Fatal(err)
	}
	want := e.ReadAll("kf", 0)
	if n := len(want); n != 2+1+300+20 || string(want[n-1].Value) != "cli-19" || len(want[n-1].Headers) != 1 {
		t.Fatalf("gRPC reads %d records, the last %v", n, want[n-1])
	}

	t.Run("kgo reads gRPC records", func(t *testing.T) {
		c := consumeKafka(t, e, "kf", map[int32]int64{0: 0}, kgo.FetchMaxWait(time.Second), kgo.FetchMaxPartitionBytes(2000))
		got := waitRecords(t, c, len(want), 60*time.Second)
		if len(got) != len(want) {
			t.Fatalf("read %d records, want %d", len(got), len(want))
		}
		for i := range want {
			if d := sameRecord(got[i], want[i]); d != "" {
				t.Fatalf("record %d: %s", i, d)
			}
		}
	})

	leader := e.Partition("kf", 0).LeaderId
	epoch := int32(e.Partition("kf", 0).LeaderEpoch)
	addr := e.KafkaAddress(leader)
	hw := want[len(want)-1].Offset + 1
	fetch := func(version int16, offset int64, mut func(*kmsg.FetchRequest)) *kmsg.FetchResponse {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.Version = version
		req.ReplicaID = -1
		req.MaxBytes = 1 << 20
		req.MinBytes = 1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "kf"
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.FetchOffset = offset
		rp.PartitionMaxBytes = 1 << 20
		rp.CurrentLeaderEpoch = -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		if mut != nil {
			mut(req)
		}
		resp, err := rawKafka(addr, req)
		if err != nil {
			t.Fatalf("Fetch v%d: %v", version, err)
		}
		return resp.(*kmsg.FetchResponse)
	}
	one := func(t *testing.T, resp *kmsg.FetchResponse) kmsg.FetchResponseTopicPartition {
		t.Helper()
		if resp.ErrorCode != 0 || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("answer %+v", resp)
		}
		return resp.Topics[0].Partitions[0]
	}

	t.Run("raw Fetch v4-v12", func(t *testing.T) {
		for v := int16(4); v <= 12; v++ {
			p := one(t, fetch(v, 0, nil))
			if p.ErrorCode != 0 || p.HighWatermark != hw || p.LastStableOffset != hw || (v >= 5 && p.LogStartOffset != 0) || (v >= 11 && p.PreferredReadReplica != -1) {
				t.Fatalf("v%d: %+v", v, p)
			}
			var offsets []int64
			for rest := p.RecordBatches; len(rest) > 0; {
				var rb kmsg.RecordBatch
				if err := rb.ReadFrom(rest); err != nil {
					t.Fatalf("v%d: batch: %v", v, err)
				}
				for i := range rb.NumRecords {
					offsets = append(offsets, rb.FirstOffset+int64(i))
				}
				rest = rest[12+int(rb.Length):]
			}
			if len(offsets) != len(want) || offsets[0] != 0 || offsets[len(offsets)-1] != hw-1 {
				t.Fatalf("v%d: offsets %v, want 0..%d", v, offsets, hw-1)
			}
		}
	})

	t.Run("empty answer has zero-length records", func(t *testing.T) {
		for _, v := range []int16{4, 11, 12} {
			p := one(t, fetch(v, hw, func(r *kmsg.FetchRequest) { r.MaxWaitMillis = 0 }))
			if p.ErrorCode != 0 || p.HighWatermark != hw || p.RecordBatches == nil || len(p.RecordBatches) != 0 {
				t.Fatalf("v%d at the high watermark: %+v", v, p)
			}
		}
		// A long poll that nothing wakes answers the same at max_wait_ms.
		p := one(t, fetch(12, hw, func(r *kmsg.FetchRequest) { r.MaxWaitMillis = 300 }))
		if p.ErrorCode != 0 || p.RecordBatches == nil || len(p.RecordBatches) != 0 {
			t.Fatalf("long poll at the high watermark: %+v", p)
		}
	})

	t.Run("errors", func(t *testing.T) {
		check := func(what string, p kmsg.FetchResponseTopicPartition, want *fkerr.Error) {
			t.Helper()
			if fkerr.ErrorForCode(p.ErrorCode) != error(want) || p.HighWatermark != -1 || p.RecordBatches == nil || len(p.RecordBatches) != 0 {
				t.Fatalf("%s: %v %+v, want %v", what, fkerr.ErrorForCode(p.ErrorCode), p, want)
			}
		}
		check("past the high watermark", one(t, fetch(12, hw+1, nil)), fkerr.OffsetOutOfRange)
		check("below the log start", one(t, fetch(12, -1, nil)), fkerr.OffsetOutOfRange)
		check("older leader epoch", one(t, fetch(12, 0, func(r *kmsg.FetchRequest) { r.Topics[0].Partitions[0].CurrentLeaderEpoch = epoch - 1 })), fkerr.FencedLeaderEpoch)
		check("newer leader epoch", one(t, fetch(12, 0, func(r *kmsg.FetchRequest) { r.Topics[0].Partitions[0].CurrentLeaderEpoch = epoch + 1 })), fkerr.UnknownLeaderEpoch)
		if p := one(t, fetch(12, 0, func(r *kmsg.FetchRequest) { r.Topics[0].Partitions[0].CurrentLeaderEpoch = epoch })); p.ErrorCode != 0 || len(p.RecordBatches) == 0 {
			t.Fatalf("at the leader's epoch %d: %+v", epoch, p)
		}
		check("unknown topic", one(t, fetch(12, 0, func(r *kmsg.FetchRequest) { r.Topics[0].Topic = "no-such-topic" })), fkerr.UnknownTopicOrPartition)
		check("unknown partition", one(t, fetch(12, 0, func(r *kmsg.FetchRequest) { r.Topics[0].Partitions[0].Partition = 9 })), fkerr.UnknownTopicOrPartition)

		// A follower: NOT_LEADER_OR_FOLLOWER, naming the leader (v12).
		follower := testcluster.Others(e.Partition("kf", 0).Replicas, leader)[0]
		saved := addr
		addr = e.KafkaAddress(follower)
		p := one(t, fetch(12, 0, nil))
		addr = saved
		check("a follower", p, fkerr.NotLeaderForPartition)
		if p.CurrentLeader.LeaderID != leader || p.CurrentLeader.LeaderEpoch != epoch {
			t.Fatalf("a follower names leader %d epoch %d, want %d epoch %d", p.CurrentLeader.LeaderID, p.CurrentLeader.LeaderEpoch, leader, epoch)
		}

		// Each partition answered counts in the leader's fetch metric by its
		// error name, as gRPC's Fetch.
		resp, err := http.Get(e.ServedURL(testcluster.BrokerName(leader), "metrics"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range []string{
			`tapes_fetch_requests_total{error="OFFSET_OUT_OF_RANGE"} 2`,
			`tapes_fetch_requests_total{error="FENCED_LEADER_EPOCH"} 1`,
			`tapes_fetch_requests_total{error="UNKNOWN_LEADER_EPOCH"} 1`,
			`tapes_fetch_requests_total{error="UNKNOWN_TOPIC_OR_PARTITION"} 2`,
		} {
			if !strings.Contains(string(body), want) {
				t.Errorf("leader's metrics lack %q", want)
			}
		}

		// An incremental fetch session: none is kept.
		fresp := fetch(12, 0, func(r *kmsg.FetchRequest) { r.SessionID, r.SessionEpoch = 5, 1 })
		if fkerr.ErrorForCode(fresp.ErrorCode) != fkerr.FetchSessionIDNotFound || fresp.SessionID != 0 {
			t.Fatalf("incremental fetch: %+v", fresp)
		}
		// A full one that asks for a session gets none (id 0).
		if resp := fetch(12, 0, func(r *kmsg.FetchRequest) { r.SessionID, r.SessionEpoch = 0, 0 }); resp.ErrorCode != 0 || resp.SessionID != 0 {
			t.Fatalf("full fetch asking for a session: %+v", resp)
		}
	})

	t.Run("woken by any of six partitions", func(t *testing.T) {
		// max_wait_ms 30 s (the broker's cap): a record that arrives much
		// sooner came from the wake, not from the wait running out.
		const maxWait = 30 * time.Second
		offsets := map[int32]int64{}
		for p := range int32(6) {
			offsets[p] = 0
		}
		c := consumeKafka(t, e, "wake", offsets, kgo.FetchMaxWait(maxWait))
		// First one record per partition, read without a bound below
		// maxWait: afterwards the client fetches every partition from its
		// leader. Before, a Fetch parked on a leader may not cover a
		// partition the client still fetches elsewhere (its metadata older
		// than a leader's move), and only the next Fetch, maxWait later,
		// would.
		for p := range int32(6) {
			produceGRPC(t, e, "wake", p, []*tapesv1.Record{{Value: []byte("warm-up")}})
		}
		for range 6 {
			select {
			case r := <-c.got:
				if string(r.Value) != "warm-up" {
					t.Fatalf("got %s-%d %q, want a warm-up record", r.Topic, r.Partition, r.Value)
				}
			case <-time.After(3 * maxWait):
				t.Fatalf("the warm-up records were not all read within %v", 3*maxWait)
			}
		}
		for _, p := range []int32{3, 0, 5, 1, 4, 2} {
			leader := e.Partition("wake", p).LeaderId
			// A Fetch covering p waits on its leader, written less than
			// maxWait/2 ago: unless a wake answers it, its answer comes
			// more than maxWait/2 after the produce.
			eventually.True(t, 2*maxWait, fmt.Sprintf("a Fetch waiting on broker %d", leader), func() bool {
				since, ok := c.parkedSince(leader)
				return ok && time.Since(since) < maxWait/4
			})
			sent := time.Now()
			value := fmt.Sprintf("wake-%d", p)
			produceGRPC(t, e, "wake", p, []*tapesv1.Record{{Value: []byte(value)}})
			select {
			case r := <-c.got:
				took := time.Since(sent)
				if r.Partition != p || string(r.Value) != value {
					t.Fatalf("got %s-%d %q, want partition %d %q", r.Topic, r.Partition, r.Value, p, value)
				}
				if took > maxWait/2 {
					t.Fatalf("partition %d: the record took %v to arrive: the long poll was not woken", p, took)
				}
				t.Logf("partition %d (leader %d): read %v after the produce", p, leader, took)
			case <-time.After(maxWait / 2):
				t.Fatalf("partition %d: no record %v after the produce: the long poll was not woken", p, maxWait/2)
			}
		}
	})
}

// TestKafkaFetchAcrossLeaderKill: a franz-go consumer reading a partition
// goes on at the new leader after the leader's SIGKILL and reads every
// committed record once, at the offsets gRPC's Fetch gives them.
func TestKafkaFetchAcrossLeaderKill(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("kfo", 1, 3, map[string]string{"min.insync.replicas": "2"})
	e.ProduceN("kfo", 0, "before", 300)
	c := consumeKafka(t, e, "kfo", map[int32]int64{0: 0}, kgo.FetchMaxWait(time.Second), kgo.FetchMaxPartitionBytes(4000))
	waitRecords(t, c, 300, 60*time.Second)

	old := e.Partition("kfo", 0).LeaderId
	if err := e.C.Kill(testcluster.BrokerName(old)); err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGKILLed broker-%d, leader of kfo-0", old)
	e.ProduceN("kfo", 0, "after", 300)
	want := e.ReadAll("kfo", 0)
	if e.Partition("kfo", 0).LeaderId == old {
		t.Fatalf("broker %d still leads", old)
	}
	got := waitRecords(t, c, len(want), 90*time.Second)
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d (duplicates?)", len(got), len(want))
	}
	for i := range want {
		if got[i].Offset != want[i].Offset || !bytes.Equal(got[i].Value, want[i].Value) {
			t.Fatalf("record %d: offset %d %q, gRPC offset %d %q", i, got[i].Offset, got[i].Value, want[i].Offset, want[i].Value)
		}
	}
}
