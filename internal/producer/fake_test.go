package producer

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tapes-dev/tapes/internal/client"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/recordbatch"
	"github.com/tapes-dev/tapes/internal/storage"
)

// fakeCluster is brokers in this process sharing one state: a topic whose
// partitions are logs in memory, led by one broker each, with the idempotent
// producer's broker-side contract (last 5 batches per producer and
// partition; duplicates answered with their original offset; a gap is
// OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch INVALID_PRODUCER_EPOCH; a
// producer the partition does not know may start at any sequence). A hook
// injects faults per request.
type fakeCluster struct {
	t       *testing.T
	topic   string
	maxMsg  int
	brokers []*fakeBroker

	mu        sync.Mutex
	leaders   []int32
	logs      [][]*tapesv1.Record
	producers []map[int64]*fakeProducer
	requests  []int   // per partition
	inflight  []int   // per partition, now
	maxSeen   []int   // per partition, most in flight at once
	sizes     [][]int // encoded batch sizes per partition
	hook      func(fr *fakeRequest) fakeAction
	nextPID   int64
}

type fakeProducer struct {
	epoch   int32
	batches []fakeSeqBatch
}

type fakeSeqBatch struct {
	first, last int32
	base        int64
}

// fakeRequest is what a hook sees.
type fakeRequest struct {
	req       *tapesv1.ProduceRequest
	partition int32
	n         int // the partition's request number, from 1
	broker    int32
}

// fakeAction is what a hook wants done with a request.
type fakeAction struct {
	delay time.Duration // before handling (a hang when long)
	// before: answer this error without appending.
	before error
	// after: append (or dedupe), then answer this error instead: a lost
	// response.
	after error
	// onlyIfAppended: apply after only when the request appended records
	// (not refused, not a duplicate) and lost, when set, claims the loss:
	// lost is called then, and after applies only if it returns true. A
	// hook that loses one answer claims it here, where it is decided, so
	// two pipelined requests that both passed the hook cannot both lose.
	onlyIfAppended bool
	lost           func() bool
}

type fakeBroker struct {
	tapesv1.UnimplementedBrokerServiceServer
	c    *fakeCluster
	id   int32
	addr string
	srv  *grpc.Server
}

func newFakeCluster(t *testing.T, brokers int, topic string, partitions int) *fakeCluster {
	t.Helper()
	c := &fakeCluster{t: t, topic: topic, maxMsg: 1048588, nextPID: 1000}
	for p := 0; p < partitions; p++ {
		c.leaders = append(c.leaders, 1)
		c.logs = append(c.logs, nil)
		c.producers = append(c.producers, map[int64]*fakeProducer{})
	}
	c.requests = make([]int, partitions)
	c.inflight = make([]int, partitions)
	c.maxSeen = make([]int, partitions)
	c.sizes = make([][]int, partitions)
	for i := 1; i <= brokers; i++ {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		b := &fakeBroker{c: c, id: int32(i), addr: lis.Addr().String(), srv: grpc.NewServer()}
		tapesv1.RegisterBrokerServiceServer(b.srv, b)
		go b.srv.Serve(lis)
		t.Cleanup(b.srv.Stop)
		c.brokers = append(c.brokers, b)
	}
	return c
}

func (c *fakeCluster) setHook(h func(fr *fakeRequest) fakeAction) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hook = h
}

func (c *fakeCluster) setLeader(p int32, id int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leaders[p] = id
}

// log returns a copy of partition p's records.
func (c *fakeCluster) log(p int32) []*tapesv1.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*tapesv1.Record(nil), c.logs[p]...)
}

// batchSizes returns the encoded sizes of partition p's batches.
func (c *fakeCluster) batchSizes(p int32) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.sizes[p]...)
}

// mostInFlight returns, per partition, the most requests it had at once.
func (c *fakeCluster) mostInFlight() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.maxSeen...)
}

func (c *fakeCluster) requestCount(p int32) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requests[p]
}

func (c *fakeCluster) client(t *testing.T) *client.Client {
	t.Helper()
	var addrs []string
	for _, b := range c.brokers {
		addrs = append(addrs, b.addr)
	}
	cl, err := client.New(client.Config{Bootstrap: addrs, RequestTimeout: time.Second, RetryBackoff: 10 * time.Millisecond,
		DialOptions: DialOptions()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func (b *fakeBroker) Metadata(_ context.Context, req *tapesv1.MetadataRequest) (*tapesv1.MetadataResponse, error) {
	c := b.c
	c.mu.Lock()
	defer c.mu.Unlock()
	resp := &tapesv1.MetadataResponse{BrokerId: b.id, ControllerId: 1}
	for _, o := range c.brokers {
		resp.Brokers = append(resp.Brokers, &tapesv1.BrokerInfo{Id: o.id, Address: o.addr, Alive: true})
	}
	names := req.GetTopics()
	if len(names) == 0 {
		names = []string{c.topic}
	}
	for _, n := range names {
		if n != c.topic {
			resp.Topics = append(resp.Topics, &tapesv1.TopicMetadata{Name: n, Error: kerr.New(kerr.UnknownTopicOrPartition, "no topic %q", n).Detail})
			continue
		}
		tm := &tapesv1.TopicMetadata{Name: n, TopicId: 1, Configs: map[string]string{"max.message.bytes": strconv.Itoa(c.maxMsg)}}
		for p, l := range c.leaders {
			tm.Partitions = append(tm.Partitions, &tapesv1.PartitionMetadata{Partition: int32(p), LeaderId: l, LeaderEpoch: 1, Replicas: []int32{l}, Isr: []int32{l}})
		}
		resp.Topics = append(resp.Topics, tm)
	}
	return resp, nil
}

func (b *fakeBroker) InitProducerId(context.Context, *tapesv1.InitProducerIdRequest) (*tapesv1.InitProducerIdResponse, error) {
	c := b.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextPID++
	return &tapesv1.InitProducerIdResponse{ProducerId: c.nextPID}, nil
}

func (b *fakeBroker) Produce(ctx context.Context, req *tapesv1.ProduceRequest) (*tapesv1.ProduceResponse, error) {
	c := b.c
	p := req.GetPartition()
	c.mu.Lock()
	if req.GetTopic() != c.topic || p < 0 || int(p) >= len(c.logs) {
		c.mu.Unlock()
		return nil, kerr.ToStatus(kerr.New(kerr.UnknownTopicOrPartition, "%s-%d", req.GetTopic(), p))
	}
	c.requests[p]++
	c.inflight[p]++
	c.maxSeen[p] = max(c.maxSeen[p], c.inflight[p])
	fr := &fakeRequest{req: req, partition: p, n: c.requests[p], broker: b.id}
	hook := c.hook
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.inflight[p]--
		c.mu.Unlock()
	}()
	var act fakeAction
	if hook != nil {
		act = hook(fr)
	}
	if act.delay > 0 {
		select {
		case <-time.After(act.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if act.before != nil {
		return nil, kerr.ToStatus(act.before)
	}
	c.mu.Lock()
	if leader := c.leaders[p]; leader != b.id {
		addr := ""
		if leader > 0 {
			addr = c.brokers[leader-1].addr
		}
		c.mu.Unlock()
		return nil, kerr.ToStatus(kerr.NotLeader(leader, addr, 2, "broker %d does not lead %d", b.id, p))
	}
	resp, err := c.appendLocked(req)
	c.mu.Unlock()
	if act.after != nil && (!act.onlyIfAppended || err == nil && !resp.GetDuplicate()) &&
		(act.lost == nil || act.lost()) {
		return nil, kerr.ToStatus(act.after)
	}
	return resp, kerr.ToStatus(err)
}

func (c *fakeCluster) appendLocked(req *tapesv1.ProduceRequest) (*tapesv1.ProduceResponse, error) {
	p := req.GetPartition()
	recs := make([]storage.Record, len(req.Records))
	for i, r := range req.Records {
		recs[i] = storage.Record{Timestamp: r.TimestampMs, Key: r.Key, Value: r.Value}
		for _, h := range r.Headers {
			recs[i].Headers = append(recs[i].Headers, storage.Header{Key: h.Key, Value: h.Value})
		}
	}
	size := len(recordbatch.Encode(recordbatch.NoProducer, recs)) // as the broker stores it
	c.sizes[p] = append(c.sizes[p], size)
	if size > c.maxMsg {
		return nil, kerr.New(kerr.RecordTooLarge, "batch of %d bytes exceeds max.message.bytes=%d", size, c.maxMsg)
	}
	count := int32(len(req.Records))
	if pid := req.GetProducerId(); pid > 0 {
		if req.GetAcks() != -1 {
			return nil, kerr.New(kerr.InvalidRequiredAcks, "idempotent needs acks=all")
		}
		first, last := req.GetBaseSequence(), req.GetBaseSequence()+count-1
		e := c.producers[p][pid]
		if e != nil {
			switch {
			case req.GetProducerEpoch() < e.epoch:
				return nil, kerr.New(kerr.InvalidProducerEpoch, "epoch %d < %d", req.GetProducerEpoch(), e.epoch)
			case req.GetProducerEpoch() > e.epoch:
				if first != 0 {
					return nil, kerr.New(kerr.OutOfOrderSequenceNumber, "new epoch starts at %d", first)
				}
				e = nil
			default:
				for _, b := range e.batches {
					if b.first == first && b.last == last {
						return &tapesv1.ProduceResponse{BaseOffset: b.base, Duplicate: true}, nil
					}
				}
				if n := len(e.batches); n > 0 && first != e.batches[n-1].last+1 {
					return nil, kerr.New(kerr.OutOfOrderSequenceNumber, "sequence %d, expected %d", first, e.batches[n-1].last+1)
				}
			}
		}
		if e == nil {
			e = &fakeProducer{epoch: req.GetProducerEpoch()}
			c.producers[p][pid] = e
		}
		e.batches = append(e.batches, fakeSeqBatch{first: first, last: last, base: int64(len(c.logs[p]))})
		if len(e.batches) > 5 {
			e.batches = e.batches[1:]
		}
	}
	base := int64(len(c.logs[p]))
	for i, r := range req.Records {
		cp := &tapesv1.Record{Offset: base + int64(i), TimestampMs: r.TimestampMs, Key: r.Key, Value: r.Value, Headers: r.Headers}
		c.logs[p] = append(c.logs[p], cp)
	}
	if req.GetAcks() == 0 {
		return &tapesv1.ProduceResponse{BaseOffset: -1}, nil
	}
	return &tapesv1.ProduceResponse{BaseOffset: base}, nil
}
