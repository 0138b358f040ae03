package check

import (
	"context"
	"net"
	"reflect"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tapes-dev/tapes/internal/client"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/producer"
)

// fakeBroker is one broker leading every partition of topic "orders",
// held in memory: Metadata, ListOffsets and Fetch (up to three records per
// fetch, starting one record before the offset asked for, as a batch may).
type fakeBroker struct {
	tapesv1.UnimplementedBrokerServiceServer
	addr string

	mu       sync.Mutex
	logStart []int64
	records  [][]*tapesv1.Record // per partition, offsets logStart...
	fetches  int
	// onFetch runs (under mu) before each fetch is answered.
	onFetch func(b *fakeBroker, req *tapesv1.FetchRequest)
}

func newFakeBroker(t *testing.T, partitions [][]*tapesv1.Record) *fakeBroker {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &fakeBroker{addr: lis.Addr().String(), records: partitions, logStart: make([]int64, len(partitions))}
	srv := grpc.NewServer()
	tapesv1.RegisterBrokerServiceServer(srv, b)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return b
}

func (b *fakeBroker) hw(p int32) int64 { return b.logStart[p] + int64(len(b.records[p])) }

func (b *fakeBroker) Metadata(_ context.Context, req *tapesv1.MetadataRequest) (*tapesv1.MetadataResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	tm := &tapesv1.TopicMetadata{Name: "orders", TopicId: 1}
	for p := range b.records {
		tm.Partitions = append(tm.Partitions, &tapesv1.PartitionMetadata{Partition: int32(p), LeaderId: 1, LeaderEpoch: 1,
			Replicas: []int32{1}, Isr: []int32{1}, HighWatermark: -1, LogStartOffset: -1, LogEndOffset: -1})
	}
	resp := &tapesv1.MetadataResponse{BrokerId: 1, ControllerId: 1, Brokers: []*tapesv1.BrokerInfo{{Id: 1, Address: b.addr, Alive: true}}}
	for _, n := range req.GetTopics() {
		if n == "orders" {
			resp.Topics = append(resp.Topics, tm)
		} else {
			resp.Topics = append(resp.Topics, &tapesv1.TopicMetadata{Name: n, Error: kerr.New(kerr.UnknownTopicOrPartition, "no topic %q", n).Detail})
		}
	}
	if len(req.GetTopics()) == 0 {
		resp.Topics = append(resp.Topics, tm)
	}
	return resp, nil
}

func (b *fakeBroker) ListOffsets(_ context.Context, req *tapesv1.ListOffsetsRequest) (*tapesv1.ListOffsetsResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := req.GetPartition()
	if req.GetTimestampMs() == client.EarliestOffset {
		return &tapesv1.ListOffsetsResponse{Offset: b.logStart[p]}, nil
	}
	return &tapesv1.ListOffsetsResponse{Offset: b.hw(p)}, nil
}

func (b *fakeBroker) Fetch(_ context.Context, req *tapesv1.FetchRequest) (*tapesv1.FetchResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fetches++
	if b.onFetch != nil {
		b.onFetch(b, req)
	}
	p, off := req.GetPartition(), req.GetOffset()
	if off < b.logStart[p] || off > b.hw(p) {
		return nil, kerr.ToStatus(kerr.OutOfRange(off, b.logStart[p], b.hw(p)))
	}
	from := max(off-1, b.logStart[p]) - b.logStart[p]
	to := min(from+3, int64(len(b.records[p])))
	return &tapesv1.FetchResponse{Records: b.records[p][from:to], HighWatermark: b.hw(p), LogStartOffset: b.logStart[p]}, nil
}

func fakeRecords(ids ...string) []*tapesv1.Record {
	var out []*tapesv1.Record
	for i, id := range ids {
		r := &tapesv1.Record{Offset: int64(i), Value: []byte("v-" + id),
			Headers: []*tapesv1.Header{{Key: "schema_version", Value: []byte("1")}, {Key: producer.EventIDHeader, Value: []byte(id)}}}
		if i%2 == 0 {
			r.Key = []byte("k")
		}
		out = append(out, r)
	}
	return out
}

func fakeClient(t *testing.T, b *fakeBroker) *client.Client {
	t.Helper()
	cl, err := client.New(client.Config{Bootstrap: []string{b.addr}, RequestTimeout: 2 * time.Second, AddressMap: map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func TestReadTopic(t *testing.T) {
	b := newFakeBroker(t, [][]*tapesv1.Record{fakeRecords("a-0", "a-1", "a-2", "a-3", "a-4"), {}, fakeRecords("c-0", "", "c-2")})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	log, start, err := ReadTopic(ctx, fakeClient(t, b), "orders")
	if err != nil {
		t.Fatal(err)
	}
	k := "k"
	want := map[int32][]LogRecord{
		0: {{0, "a-0", &k, "v-a-0"}, {1, "a-1", nil, "v-a-1"}, {2, "a-2", &k, "v-a-2"}, {3, "a-3", nil, "v-a-3"}, {4, "a-4", &k, "v-a-4"}},
		1: {},
		2: {{0, "c-0", &k, "v-c-0"}, {1, "", nil, "v-"}, {2, "c-2", &k, "v-c-2"}},
	}
	if !reflect.DeepEqual(log, want) || !reflect.DeepEqual(start, map[int32]int64{0: 0, 1: 0, 2: 0}) {
		t.Fatalf("ReadTopic = %+v, %v\nwant %+v", log, start, want)
	}

	if _, _, err := ReadTopic(ctx, fakeClient(t, b), "nope"); err == nil || !kerr.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("unknown topic: %v", err)
	}
}

func TestReadTopicFollowsRetention(t *testing.T) {
	b := newFakeBroker(t, [][]*tapesv1.Record{fakeRecords("a-0", "a-1", "a-2", "a-3", "a-4", "a-5")})
	// Once the first fetch returned offsets 0..2, retention deletes 0..3.
	b.onFetch = func(b *fakeBroker, req *tapesv1.FetchRequest) {
		if b.fetches == 2 {
			b.records[0], b.logStart[0] = b.records[0][4:], 4
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	log, start, err := ReadTopic(ctx, fakeClient(t, b), "orders")
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for _, r := range log[0] {
		offs = append(offs, r.Offset)
	}
	if !reflect.DeepEqual(offs, []int64{0, 1, 2, 4, 5}) || start[0] != 4 {
		t.Fatalf("read offsets %v, log start %d: want 0 1 2 4 5 and 4", offs, start[0])
	}
}
