package systest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	fkerr "github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/eventually"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// kafkaAck is one record a Kafka producer had acknowledged.
type kafkaAck struct {
	key, value string
	partition  int32
	offset     int64
	timestamp  int64
	seq        int // its place in its key's sequence
}

// consumedRecord is a line of `cluster consume --format json`.
type consumedRecord struct {
	Partition int32             `json:"partition"`
	Offset    int64             `json:"offset"`
	Key       *string           `json:"key"`
	Value     string            `json:"value"`
	Headers   map[string]string `json:"headers"`
	Timestamp int64             `json:"timestamp"`
}

// TestKafkaIdempotentProduceThroughLeaderKill: franz-go's idempotent
// producer (acks=all, its default snappy compression) writes keyed records
// with headers and timestamps to a 3-partition RF 3 topic through the
// Kafka listeners while a partition leader is SIGKILLed; kgo retries what
// the dead leader left unanswered. Afterwards `cluster consume --format
// json`, the gRPC Fetch and a franz-go cooperative-sticky group consumer
// (committing, its commits checked) each read every acknowledged record exactly
// once, at its acknowledged offset, in per-key order, with its key,
// headers and timestamp as produced.
func TestKafkaIdempotentProduceThroughLeaderKill(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("orders", 3, 3, map[string]string{"min.insync.replicas": "2"})
	e.WaitSettled("orders", 60*time.Second)
	leader := e.Partition("orders", 0).LeaderId

	cl, err := kgo.NewClient(kgo.SeedBrokers(e.KafkaBootstrap()...), kgo.DefaultProduceTopic("orders"),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(5*time.Millisecond),
		// Small batches: many requests in flight (kgo pipelines up to 5
		// per broker) when the leader dies.
		kgo.ProducerBatchMaxBytes(1024),
		kgo.RetryTimeout(60*time.Second), kgo.ProduceRequestTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// The group consumer reads (and commits) while the records are
	// produced and the leader is killed.
	reader := startGroupReader(t, e, "orders-readers", "orders")

	const keys, perKey = 12, 250
	base := time.Now().Add(-time.Hour).UnixMilli()
	var (
		mu     sync.Mutex
		acked  []kafkaAck
		failed int
	)
	var ackedCount atomic.Int64
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		for ackedCount.Load() < keys*perKey/4 {
			time.Sleep(time.Millisecond)
		}
		if err := e.C.Kill(testcluster.BrokerName(leader)); err != nil {
			t.Errorf("kill leader: %v", err)
		}
		t.Logf("SIGKILLed broker-%d (leader of orders-0) after %d acknowledged records", leader, ackedCount.Load())
	}()
	for i := range perKey {
		for k := range keys {
			if i == perKey/2 {
				<-killed // half the records go after the kill
			}
			key, value := fmt.Sprintf("key-%d", k), fmt.Sprintf("key-%d-%d", k, i)
			ts := time.UnixMilli(base + int64(i*keys+k))
			r := &kgo.Record{Key: []byte(key), Value: []byte(value), Timestamp: ts,
				Headers: []kgo.RecordHeader{{Key: "seq", Value: []byte(strconv.Itoa(i))}, {Key: "empty", Value: []byte{}}}}
			cl.Produce(context.Background(), r, func(r *kgo.Record, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed++
					return
				}
				acked = append(acked, kafkaAck{key: key, value: value, partition: r.Partition, offset: r.Offset, timestamp: ts.UnixMilli(), seq: i})
				ackedCount.Add(1)
			})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if err := cl.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d records acknowledged, %d failed", len(acked), failed)
	if failed > 0 || len(acked) != keys*perKey {
		t.Fatalf("an idempotent producer with unbounded retries had %d of %d records fail", failed, keys*perKey)
	}
	if got := e.Partition("orders", 0).LeaderId; got == leader {
		t.Fatalf("broker-%d still leads orders-0 after it was killed", leader)
	}

	// Read back by `cluster consume --format json`.
	out, err := cli(t, e, "", "consume", "--topic", "orders", "--from-beginning", "--until-end", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var consumed []consumedRecord
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r consumedRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("not a JSON record line: %q: %v", sc.Text(), err)
		}
		consumed = append(consumed, r)
	}
	checkKafkaAcked(t, "cluster consume", acked, consumed)

	// And by the gRPC Fetch.
	var fetched []consumedRecord
	for p := range int32(3) {
		for _, r := range e.ReadAll("orders", p) {
			c := consumedRecord{Partition: p, Offset: r.Offset, Value: string(r.Value), Timestamp: r.TimestampMs, Headers: map[string]string{}}
			if r.Key != nil {
				k := string(r.Key)
				c.Key = &k
			}
			for _, h := range r.Headers {
				c.Headers[h.Key] = string(h.Value)
			}
			// (gRPC's bytes cannot tell an empty header value from a null one.)
			if len(r.Headers) != 2 || r.Headers[0].Key != "seq" || r.Headers[1].Key != "empty" {
				t.Fatalf("gRPC fetch of %s-%d at %d: headers %+v", "orders", p, r.Offset, r.Headers)
			}
			fetched = append(fetched, c)
		}
	}
	checkKafkaAcked(t, "gRPC fetch", acked, fetched)

	// And by the franz-go cooperative-sticky group consumer, which
	// committed what it had read.
	checkKafkaAcked(t, "kgo group consumer", acked, reader.wait(t, len(acked)))

	// The batches are stored as kgo sent them: snappy-compressed.
	var snappy, all int
	for p := range int32(3) {
		for _, kb := range storedKafkaBatches(t, e, "orders", p, e.Partition("orders", p).LeaderId) {
			all++
			if kb.Attributes&7 == int16(kgo.CodecSnappy) {
				snappy++
			}
		}
	}
	t.Logf("%d of the %d stored batches are snappy-compressed", snappy, all)
	if snappy == 0 || all < 30 {
		t.Fatal("no stored batch is compressed as kgo sent it")
	}
}

// groupReader is a franz-go cooperative-sticky member of a group reading
// a topic from its start, committing each polled batch (synchronously)
// after recording it. Its goroutine polls until the test ends.
type groupReader struct {
	cl           *kgo.Client
	group, topic string

	mu  sync.Mutex
	got []consumedRecord // guarded by mu: in the order read
	err error            // guarded by mu: the first failed commit
}

// startGroupReader joins group (which creates __consumer_offsets if it is
// missing: Kafka, and tapes, refuse that with fewer live brokers than its
// replication factor, so a test that kills a broker joins before) and
// returns once the member owns partitions.
func startGroupReader(t *testing.T, e *testcluster.Env, group, topic string) *groupReader {
	t.Helper()
	g := &groupReader{group: group, topic: topic}
	assigned := make(chan struct{})
	var once sync.Once
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.KafkaBootstrap()...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.RetryTimeout(60*time.Second),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { once.Do(func() { close(assigned) }) }))
	if err != nil {
		t.Fatal(err)
	}
	g.cl = cl
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			recs := fs.Records()
			g.mu.Lock()
			for _, r := range recs {
				c := consumedRecord{Partition: r.Partition, Offset: r.Offset, Value: string(r.Value), Timestamp: r.Timestamp.UnixMilli(), Headers: map[string]string{}}
				if r.Key != nil {
					k := string(r.Key)
					c.Key = &k
				}
				for _, h := range r.Headers {
					c.Headers[h.Key] = string(h.Value)
				}
				g.got = append(g.got, c)
			}
			g.mu.Unlock()
			// A commit may meet the coordinator a test just SIGKILLed
			// ("unable to dial"); the client finds the next one on a
			// retry. Ten failures in a row fail the test.
			for try := 1; ; try++ {
				err := cl.CommitRecords(ctx, recs...)
				if err == nil || ctx.Err() != nil {
					break
				}
				if try == 10 {
					g.mu.Lock()
					if g.err == nil {
						g.err = err
					}
					g.mu.Unlock()
					break
				}
				t.Logf("group %s commit (try %d of 10): %v", group, try, err)
				select {
				case <-ctx.Done():
				case <-time.After(500 * time.Millisecond):
				}
			}
		}
	}()
	select {
	case <-assigned:
	case <-time.After(60 * time.Second):
		t.Fatalf("group %s: no partition assigned in 60 s", group)
	}
	return g
}

// wait returns the records read once there are n (60 s at most), after
// checking that the group's committed offsets are the partitions' ends.
func (g *groupReader) wait(t *testing.T, n int) []consumedRecord {
	t.Helper()
	var got []consumedRecord
	eventually.Nil(t, 60*time.Second, fmt.Sprintf("group %s to read %d records", g.group, n), func() error {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.err != nil {
			t.Fatalf("group %s commit: %v", g.group, g.err)
		}
		if len(g.got) < n {
			return fmt.Errorf("%d read", len(g.got))
		}
		got = slices.Clone(g.got)
		return nil
	})
	// The commits are the group's: its offsets are every partition's end.
	adm := kadm.NewClient(g.cl)
	eventually.Nil(t, 30*time.Second, "group "+g.group+"'s commits at the partitions' ends", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ends, err := adm.ListEndOffsets(ctx, g.topic)
		if err != nil {
			return err
		}
		committed, err := adm.FetchOffsets(ctx, g.group)
		if err != nil {
			return err
		}
		var errs []string
		ends.Each(func(o kadm.ListedOffset) {
			if c, ok := committed.Lookup(g.topic, o.Partition); !ok || c.At != o.Offset {
				errs = append(errs, fmt.Sprintf("partition %d committed at %d, its end is %d", o.Partition, c.At, o.Offset))
			}
		})
		if len(errs) > 0 {
			return errors.New(strings.Join(errs, "; "))
		}
		return nil
	})
	return got
}

// checkKafkaAcked fails unless got holds every acknowledged record exactly
// once, at its acknowledged partition and offset, with its key, headers
// and timestamp, each key's records in the order produced.
func checkKafkaAcked(t *testing.T, how string, acked []kafkaAck, got []consumedRecord) {
	t.Helper()
	byValue := map[string][]consumedRecord{}
	for _, r := range got {
		byValue[r.Value] = append(byValue[r.Value], r)
	}
	lastOffset := map[string]int64{}
	lastSeq := map[string]int{}
	ordered := append([]kafkaAck(nil), acked...)
	// Per key, in produce order.
	for i := 1; i < len(ordered); i++ {
		for j := i; j > 0 && ordered[j].key == ordered[j-1].key && ordered[j].seq < ordered[j-1].seq; j-- {
			ordered[j], ordered[j-1] = ordered[j-1], ordered[j]
		}
	}
	for _, a := range acked {
		rs := byValue[a.value]
		if len(rs) != 1 {
			t.Fatalf("%s: acknowledged %s read %d times", how, a.value, len(rs))
		}
		r := rs[0]
		if r.Partition != a.partition || r.Offset != a.offset {
			t.Fatalf("%s: %s acknowledged at %d/%d, read at %d/%d", how, a.value, a.partition, a.offset, r.Partition, r.Offset)
		}
		if r.Key == nil || *r.Key != a.key || r.Timestamp != a.timestamp || r.Headers["seq"] != strconv.Itoa(a.seq) {
			t.Fatalf("%s: %s read as %+v (key %q, timestamp %d, seq %d produced)", how, a.value, r, a.key, a.timestamp, a.seq)
		}
		if _, ok := r.Headers["empty"]; !ok {
			t.Fatalf("%s: %s lost its empty header: %+v", how, a.value, r.Headers)
		}
	}
	// Per-key order: a key's records, read in offset order, come in the
	// order produced.
	for _, r := range got {
		var seq int
		fmt.Sscanf(r.Value[strings.LastIndexByte(r.Value, '-')+1:], "%d", &seq)
		k := *r.Key
		if prev, ok := lastOffset[k]; ok && r.Offset > prev && seq < lastSeq[k] {
			t.Fatalf("%s: key %s: %s at offset %d after seq %d", how, k, r.Value, r.Offset, lastSeq[k])
		}
		if prev, ok := lastOffset[k]; !ok || r.Offset > prev {
			lastOffset[k], lastSeq[k] = r.Offset, seq
		}
	}
	if len(got) != len(acked) {
		t.Fatalf("%s: %d records read, %d acknowledged", how, len(got), len(acked))
	}
	t.Logf("%s: all %d acknowledged records read once, in per-key order", how, len(acked))
}

// TestKafkaProduceAcks1And0: franz-go producers with acks=1 and acks=0
// (not idempotent) through the Kafka listener; every record they sent is
// in the log (no fault here). Records produced over gRPC are stored as
// Kafka record batches (format version 3 frames that franz-go's kmsg
// decodes, as a Kafka consumer will), like the Kafka producers' own.
func TestKafkaProduceAcks1And0(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("events", 1, 3, nil)
	e.WaitSettled("events", 60*time.Second)
	for _, acks := range []struct {
		name string
		acks kgo.Acks
	}{{"acks=1", kgo.LeaderAck()}, {"acks=0", kgo.NoAck()}} {
		cl, err := kgo.NewClient(kgo.SeedBrokers(e.KafkaBootstrap()...), kgo.DefaultProduceTopic("events"),
			kgo.RequiredAcks(acks.acks), kgo.DisableIdempotentWrite())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		var rs []*kgo.Record
		for i := range 200 {
			rs = append(rs, &kgo.Record{Value: []byte(fmt.Sprintf("%s-%d", acks.name, i))})
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatalf("%s: %v", acks.name, err)
		}
		cancel()
		cl.Close()
	}
	e.ProduceN("events", 0, "grpc", 50)
	eventually.Nil(t, 30*time.Second, "every record in the log", func() error {
		seen := map[string]bool{}
		for _, r := range e.ReadAll("events", 0) {
			seen[string(r.Value)] = true
		}
		for _, prefix := range []string{"acks=1", "acks=0"} {
			for i := range 200 {
				if v := fmt.Sprintf("%s-%d", prefix, i); !seen[v] {
					return fmt.Errorf("%s missing", v)
				}
			}
		}
		if len(seen) != 450 {
			return fmt.Errorf("%d distinct records, want 450", len(seen))
		}
		return nil
	})

	// Every frame the leader stored is a Kafka batch (version 3) that
	// kmsg decodes to the records at their offsets; the gRPC records among
	// them.
	var decoded, grpc int
	for _, kb := range storedKafkaBatches(t, e, "events", 0, e.Partition("events", 0).LeaderId) {
		recs := kmsgRecords(t, kb)
		for _, r := range recs {
			if bytes.HasPrefix(r.Value, []byte("grpc")) {
				grpc++
			}
		}
		decoded += len(recs)
	}
	if decoded != 450 || grpc != 50 {
		t.Fatalf("kmsg decoded %d records (%d from gRPC) from the leader's segments, want 450 (50)", decoded, grpc)
	}
}

// storedKafkaBatches reads the segment files of broker id's replica of
// topic-p and returns their batches as franz-go's kmsg decodes them,
// failing unless every frame is a Kafka batch (storage format version 3)
// with the frame's base offset, magic 2, a leader epoch, and a CRC that
// checks.
func storedKafkaBatches(t *testing.T, e *testcluster.Env, topic string, p, id int32) []kmsg.RecordBatch {
	t.Helper()
	var segFiles []string
	for _, b := range e.Brokers() {
		if b.ID == id {
			segFiles, _ = filepath.Glob(filepath.Join(b.DataDir, "partitions", fmt.Sprintf("%s-%d@*", topic, p), "log", "*.log"))
		}
	}
	if len(segFiles) == 0 {
		t.Fatalf("no segment file of %s-%d on broker-%d", topic, p, id)
	}
	var out []kmsg.RecordBatch
	for _, s := range segFiles {
		data, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		for pos := 0; pos+24 <= len(data); {
			base := int64(binary.BigEndian.Uint64(data[pos:]))
			n := int(binary.BigEndian.Uint32(data[pos+8:])) + 12
			if pos+n > len(data) {
				break // the tail being written
			}
			batch := data[pos+24 : pos+n]
			if batch[4] != 3 {
				t.Fatalf("%s: frame at %d is of storage version %d, want 3 (a Kafka batch)", s, pos, batch[4])
			}
			var kb kmsg.RecordBatch
			if err := kb.ReadFrom(batch[5:]); err != nil || kb.FirstOffset != base || kb.Magic != 2 || kb.PartitionLeaderEpoch < 1 {
				t.Fatalf("%s: frame at %d: %+v, %v", s, pos, kb, err)
			}
			if crc := crc32.Checksum(batch[5+21:], crc32.MakeTable(crc32.Castagnoli)); crc != uint32(kb.CRC) {
				t.Fatalf("%s: frame at %d: Kafka CRC %08x, computed %08x", s, pos, uint32(kb.CRC), crc)
			}
			out = append(out, kb)
			pos += n
		}
	}
	return out
}

// kmsgRecords decodes the records of an uncompressed or compressed batch
// with franz-go (kgo's decompressor, kmsg's record reader).
func kmsgRecords(t *testing.T, kb kmsg.RecordBatch) []kmsg.Record {
	t.Helper()
	raw := kb.Records
	if codec := kb.Attributes & 7; codec != 0 {
		d := kgo.DefaultDecompressor()
		var err error
		if raw, err = d.Decompress(raw, kgo.CompressionCodecType(codec)); err != nil {
			t.Fatalf("decompress: %v", err)
		}
	}
	out := make([]kmsg.Record, kb.NumRecords)
	for i := range out {
		length, n := binary.Varint(raw)
		if n <= 0 || int64(n)+length > int64(len(raw)) {
			t.Fatalf("record %d: length %d of %d bytes", i, length, len(raw))
		}
		if err := out[i].ReadFrom(raw[:n+int(length)]); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		raw = raw[n+int(length):]
	}
	return out
}

// TestKafkaProduceRefusesBadBatches: on a real broker, a batch with a wrong
// CRC answers CORRUPT_MESSAGE, a magic 1 batch (Produce v2 and v9) and a
// magic 0 one INVALID_RECORD, a transactional batch INVALID_RECORD, an
// unknown topic UNKNOWN_TOPIC_OR_PARTITION, a batch over max.message.bytes
// MESSAGE_TOO_LARGE, and InitProducerId with a transactional id and no
// transaction timeout INVALID_TRANSACTION_TIMEOUT; nothing is appended, and the broker goes on serving
// another connection, which produces and gets a producer id. With acks=0 a
// good batch is not answered and a refused one closes its connection.
func TestKafkaProduceRefusesBadBatches(t *testing.T) {
	e := start(t, 1)
	e.CreateTopic("bad", 1, 1, nil)
	e.CreateTopic("small", 1, 1, map[string]string{"max.message.bytes": "100"})
	e.WaitSettled("bad", 60*time.Second)
	e.WaitSettled("small", 60*time.Second)
	addr := e.KafkaAddress(e.Partition("bad", 0).LeaderId)

	good := kafkaBatch(t, 0)
	wrongCRC := bytes.Clone(good)
	wrongCRC[len(wrongCRC)-1] ^= 0xff
	magic := func(m byte) []byte { b := bytes.Clone(good); b[16] = m; return b }
	// A transactional batch is accepted (issue 13), but not without a
	// producer id.
	transactional := kafkaBatch(t, 0x10)
	binary.BigEndian.PutUint64(transactional[43:], math.MaxUint64) // producer id -1
	binary.BigEndian.PutUint32(transactional[17:], crc32.Checksum(transactional[21:], crc32.MakeTable(crc32.Castagnoli)))
	big := kafkaBatchOf(t, 0, bytes.Repeat([]byte("x"), 100))
	for _, tc := range []struct {
		name    string
		topic   string
		version int16
		batch   []byte
		want    *fkerr.Error
	}{
		{"wrong CRC", "bad", 9, wrongCRC, fkerr.CorruptMessage},
		{"magic 1 at v9", "bad", 9, magic(1), fkerr.InvalidRecord},
		{"magic 0 at v3", "bad", 3, magic(0), fkerr.InvalidRecord},
		{"magic 1 at v2", "bad", 2, magic(1), fkerr.InvalidRecord},
		{"transactional batch without a producer id", "bad", 9, transactional, fkerr.InvalidRecord},
		{"unknown topic", "nope", 9, good, fkerr.UnknownTopicOrPartition},
		{"over max.message.bytes", "small", 9, big, fkerr.MessageTooLarge},
		{"good", "bad", 9, good, nil},
	} {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks, req.TimeoutMillis = tc.version, -1, 10000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = tc.topic
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = tc.batch
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := rawKafka(addr, req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		p := resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
		if got := fkerr.ErrorForCode(p.ErrorCode); got != error(tc.want) && !(tc.want == nil && got == nil) {
			t.Fatalf("%s: answered %v, want %v", tc.name, got, tc.want)
		}
		if tc.want != nil && (p.BaseOffset != -1 || (tc.version >= 8 && p.ErrorMessage == nil)) {
			t.Fatalf("%s: %+v", tc.name, p)
		}
		if tc.want == nil && p.BaseOffset != 0 {
			t.Fatalf("%s: base offset %d, want 0 (nothing refused was appended)", tc.name, p.BaseOffset)
		}
	}
	ipi := kmsg.NewPtrInitProducerIDRequest()
	ipi.Version, ipi.TransactionalID = 4, kmsg.StringPtr("tx-1")
	resp, err := rawKafka(addr, ipi)
	if err != nil {
		t.Fatal(err)
	}
	if got := fkerr.ErrorForCode(resp.(*kmsg.InitProducerIDResponse).ErrorCode); got != fkerr.InvalidTransactionTimeout {
		t.Fatalf("InitProducerId with a transactional id and timeout 0: %v", got)
	}
	ipi.TransactionalID = nil
	for _, v := range []int16{0, 4} {
		ipi.Version = v
		resp, err := rawKafka(addr, ipi)
		if err != nil {
			t.Fatal(err)
		}
		if r := resp.(*kmsg.InitProducerIDResponse); r.ErrorCode != 0 || r.ProducerID <= 0 || r.ProducerEpoch != 0 {
			t.Fatalf("InitProducerId v%d: %+v", v, r)
		}
	}
	if got := e.ReadAll("bad", 0); len(got) != 1 {
		t.Fatalf("the log holds %d records, want the good batch's 1", len(got))
	}

	// acks=0: a good batch gets no answer (the next request's comes
	// first); a refused one closes the connection, as Kafka does, so that
	// the client notices.
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	produce0 := func(batch []byte) *kmsg.ProduceRequest {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks, req.TimeoutMillis = 9, 0, 10000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "bad"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = batch
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return req
	}
	md := kmsg.NewPtrMetadataRequest()
	mdResp := kmsg.NewPtrMetadataResponse()
	mdResp.Version = 12
	writeKafka(c, produce0(kafkaBatch(t, 0)), 9, 1)
	writeKafka(c, md, 12, 2)
	if err := readKafka(c, mdResp, 2, true); err != nil {
		t.Fatalf("the answer after an acks=0 Produce: %v", err)
	}
	writeKafka(c, produce0(wrongCRC), 9, 3)
	writeKafka(c, md, 12, 4)
	if err := readKafka(c, mdResp, 4, true); err == nil {
		t.Fatalf("a refused acks=0 Produce left the connection open: %+v", mdResp)
	}
	eventually.True(t, 20*time.Second, "the acks=0 record in the log", func() bool { return len(e.ReadAll("bad", 0)) == 2 })
}

// kafkaBatch is a one-record v2 batch with the given attributes, encoded
// by kmsg with a correct length and CRC.
func kafkaBatch(t *testing.T, attrs int16) []byte {
	return kafkaBatchOf(t, attrs, []byte("v"))
}

// kafkaBatchOf is kafkaBatch with a record of that value.
func kafkaBatchOf(t *testing.T, attrs int16, value []byte) []byte {
	t.Helper()
	rec := kmsg.Record{Key: []byte("k"), Value: value}
	rb := rec.AppendTo(nil)[1:]
	rec.Length = int32(len(rb))
	b := kmsg.RecordBatch{Magic: 2, Attributes: attrs, FirstTimestamp: time.Now().UnixMilli(), MaxTimestamp: time.Now().UnixMilli(),
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: 1, Records: rec.AppendTo(nil)}
	if attrs&0x10 != 0 {
		b.ProducerID, b.ProducerEpoch, b.FirstSequence = 1, 0, 0
	}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], crc32.MakeTable(crc32.Castagnoli)))
	return out
}
