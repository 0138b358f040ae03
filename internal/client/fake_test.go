package client

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// fakeCluster is a set of real gRPC servers on 127.0.0.1:0 implementing
// BrokerService (and DescribeReplicas) over one shared, test-controlled view
// of the cluster. By default a broker that is not a partition's leader
// answers NOT_LEADER_OR_FOLLOWER with the leader it knows, as real brokers
// do; tests replace a broker's behaviour with hooks.
type fakeCluster struct {
	t       *testing.T
	mu      sync.Mutex
	brokers []*fakeBroker
	topics  map[string]*tapesv1.TopicMetadata
	// metadataCalls counts Metadata requests on every broker.
	metadataCalls atomic.Int64
	// metadataRequests are those requests, in arrival order (guarded by mu).
	metadataRequests []*tapesv1.MetadataRequest
}

type fakeBroker struct {
	tapesv1.UnimplementedBrokerServiceServer
	tapesv1.UnimplementedControllerServiceServer
	tapesv1.UnimplementedGroupServiceServer
	c    *fakeCluster
	id   int32
	addr string
	srv  *grpc.Server

	produces, fetches, listOffsets atomic.Int64

	mu sync.Mutex
	// onProduce, when set, answers Produce instead of the default.
	onProduce func(n int64, req *tapesv1.ProduceRequest) (*tapesv1.ProduceResponse, error)
	onFetch   func(n int64, req *tapesv1.FetchRequest) (*tapesv1.FetchResponse, error)
	onCreate  func(req *tapesv1.CreateTopicsRequest) (*tapesv1.CreateTopicsResponse, error)
}

func newFakeCluster(t *testing.T, brokers int) *fakeCluster {
	t.Helper()
	c := &fakeCluster{t: t, topics: map[string]*tapesv1.TopicMetadata{}}
	for i := 1; i <= brokers; i++ {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		b := &fakeBroker{c: c, id: int32(i), addr: lis.Addr().String(), srv: grpc.NewServer()}
		tapesv1.RegisterBrokerServiceServer(b.srv, b)
		tapesv1.RegisterControllerServiceServer(b.srv, b)
		tapesv1.RegisterGroupServiceServer(b.srv, b)
		go b.srv.Serve(lis)
		t.Cleanup(b.srv.Stop)
		c.brokers = append(c.brokers, b)
	}
	return c
}

func (c *fakeCluster) broker(id int32) *fakeBroker { return c.brokers[id-1] }

// setTopic sets a topic's partitions: leaders[i] leads partition i at epoch.
func (c *fakeCluster) setTopic(name string, epoch int64, leaders ...int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &tapesv1.TopicMetadata{Name: name, TopicId: uint64(len(c.topics) + 1)}
	for i, l := range leaders {
		tm.Partitions = append(tm.Partitions, &tapesv1.PartitionMetadata{
			Partition: int32(i), LeaderId: l, LeaderEpoch: epoch, Replicas: []int32{1, 2, 3}, Isr: []int32{l},
		})
	}
	c.topics[name] = tm
}

func (c *fakeCluster) leaderOf(topic string, partition int32) (int32, int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm, ok := c.topics[topic]
	if !ok || partition < 0 || int(partition) >= len(tm.Partitions) {
		return -1, 0, false
	}
	p := tm.Partitions[partition]
	return p.LeaderId, p.LeaderEpoch, true
}

// client returns a Client with short timeouts, closed at the end of the test.
func (c *fakeCluster) client(bootstrap ...string) *Client {
	c.t.Helper()
	if len(bootstrap) == 0 {
		for _, b := range c.brokers {
			bootstrap = append(bootstrap, b.addr)
		}
	}
	cl, err := New(Config{Bootstrap: bootstrap, RequestTimeout: 500 * time.Millisecond, RetryBackoff: 10 * time.Millisecond})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

func (b *fakeBroker) Metadata(_ context.Context, req *tapesv1.MetadataRequest) (*tapesv1.MetadataResponse, error) {
	b.c.metadataCalls.Add(1)
	b.c.mu.Lock()
	defer b.c.mu.Unlock()
	b.c.metadataRequests = append(b.c.metadataRequests, proto.Clone(req).(*tapesv1.MetadataRequest))
	resp := &tapesv1.MetadataResponse{BrokerId: b.id, ControllerId: 1}
	for _, o := range b.c.brokers {
		resp.Brokers = append(resp.Brokers, &tapesv1.BrokerInfo{Id: o.id, Address: o.addr, Alive: true})
	}
	names := req.GetTopics()
	if len(names) == 0 && !req.GetNoTopics() {
		for n := range b.c.topics {
			names = append(names, n)
		}
	}
	for _, n := range names {
		tm, ok := b.c.topics[n]
		if !ok {
			resp.Topics = append(resp.Topics, &tapesv1.TopicMetadata{Name: n, Error: kerr.New(kerr.UnknownTopicOrPartition, "no topic %q", n).Detail})
			continue
		}
		resp.Topics = append(resp.Topics, proto.Clone(tm).(*tapesv1.TopicMetadata))
	}
	return resp, nil
}

// requestedMetadata returns the Metadata requests so far and forgets them.
func (c *fakeCluster) requestedMetadata() []*tapesv1.MetadataRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.metadataRequests
	c.metadataRequests = nil
	return out
}

// ListGroups answers that each broker coordinates one group, "g<id>".
func (b *fakeBroker) ListGroups(context.Context, *tapesv1.ListGroupsRequest) (*tapesv1.ListGroupsResponse, error) {
	return &tapesv1.ListGroupsResponse{Groups: []*tapesv1.ListedGroup{{GroupId: fmt.Sprintf("g%d", b.id), CoordinatorId: b.id}}}, nil
}

// notLeader is what a real broker answers when it does not lead the partition.
func (b *fakeBroker) notLeader(topic string, partition int32) error {
	leader, epoch, ok := b.c.leaderOf(topic, partition)
	if !ok {
		return kerr.ToStatus(kerr.New(kerr.UnknownTopicOrPartition, "%s-%d", topic, partition))
	}
	if leader == b.id {
		return nil
	}
	addr := ""
	if leader > 0 {
		addr = b.c.broker(leader).addr
	}
	return kerr.ToStatus(kerr.NotLeader(leader, addr, epoch, "broker %d does not lead %s-%d", b.id, topic, partition))
}

func (b *fakeBroker) Produce(_ context.Context, req *tapesv1.ProduceRequest) (*tapesv1.ProduceResponse, error) {
	n := b.produces.Add(1)
	b.mu.Lock()
	hook := b.onProduce
	b.mu.Unlock()
	if hook != nil {
		resp, err := hook(n, req)
		return resp, kerr.ToStatus(err)
	}
	if err := b.notLeader(req.GetTopic(), req.GetPartition()); err != nil {
		return nil, err
	}
	return &tapesv1.ProduceResponse{BaseOffset: int64(b.id) * 1000}, nil
}

func (b *fakeBroker) Fetch(_ context.Context, req *tapesv1.FetchRequest) (*tapesv1.FetchResponse, error) {
	n := b.fetches.Add(1)
	b.mu.Lock()
	hook := b.onFetch
	b.mu.Unlock()
	if hook != nil {
		resp, err := hook(n, req)
		return resp, kerr.ToStatus(err)
	}
	if err := b.notLeader(req.GetTopic(), req.GetPartition()); err != nil {
		return nil, err
	}
	return &tapesv1.FetchResponse{HighWatermark: int64(b.id)}, nil
}

func (b *fakeBroker) ListOffsets(_ context.Context, req *tapesv1.ListOffsetsRequest) (*tapesv1.ListOffsetsResponse, error) {
	b.listOffsets.Add(1)
	if err := b.notLeader(req.GetTopic(), req.GetPartition()); err != nil {
		return nil, err
	}
	return &tapesv1.ListOffsetsResponse{Offset: int64(b.id)*100 + req.GetTimestampMs()}, nil
}

func (b *fakeBroker) CreateTopics(_ context.Context, req *tapesv1.CreateTopicsRequest) (*tapesv1.CreateTopicsResponse, error) {
	b.mu.Lock()
	hook := b.onCreate
	b.mu.Unlock()
	if hook != nil {
		resp, err := hook(req)
		return resp, kerr.ToStatus(err)
	}
	resp := &tapesv1.CreateTopicsResponse{}
	for _, s := range req.GetTopics() {
		r := &tapesv1.TopicResult{Name: s.GetName()}
		switch _, _, exists := b.c.leaderOf(s.GetName(), 0); {
		case exists:
			r.Error = kerr.New(kerr.TopicAlreadyExists, "topic %q already exists", s.GetName()).Detail
		case s.GetPartitions() < 1:
			r.Error = kerr.New(kerr.InvalidPartitions, "partitions %d must be at least 1", s.GetPartitions()).Detail
		case !req.GetValidateOnly():
			leaders := make([]int32, s.GetPartitions())
			for i := range leaders {
				leaders[i] = 1
			}
			b.c.setTopic(s.GetName(), 1, leaders...)
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

func (b *fakeBroker) DeleteTopics(_ context.Context, req *tapesv1.DeleteTopicsRequest) (*tapesv1.DeleteTopicsResponse, error) {
	resp := &tapesv1.DeleteTopicsResponse{}
	b.c.mu.Lock()
	defer b.c.mu.Unlock()
	for _, n := range req.GetNames() {
		r := &tapesv1.TopicResult{Name: n}
		if _, ok := b.c.topics[n]; !ok {
			r.Error = kerr.New(kerr.UnknownTopicOrPartition, "topic %q does not exist", n).Detail
		}
		delete(b.c.topics, n)
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

func (b *fakeBroker) DescribeReplicas(context.Context, *tapesv1.DescribeReplicasRequest) (*tapesv1.DescribeReplicasResponse, error) {
	return &tapesv1.DescribeReplicasResponse{BrokerId: b.id}, nil
}

func (b *fakeBroker) setProduce(f func(n int64, req *tapesv1.ProduceRequest) (*tapesv1.ProduceResponse, error)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onProduce = f
}

// deadAddr returns an address on which nothing listens.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}
