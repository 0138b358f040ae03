package main

import (
	"bytes"
	"context"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// memBroker is a one-broker cluster held in memory behind a real gRPC
// server on 127.0.0.1:0: enough BrokerService for the operator commands
// (topics, produce with acks, fetch with long poll, list offsets).
type memBroker struct {
	tapesv1.UnimplementedBrokerServiceServer
	addr string

	mu       sync.Mutex
	topics   map[string]*memTopic
	nextID   uint64
	produces []*tapesv1.ProduceRequest
	// metadataRequests are the Metadata requests so far, in order.
	metadataRequests []*tapesv1.MetadataRequest
	// onProduce, when set, may reject a produce before it is appended.
	onProduce func(req *tapesv1.ProduceRequest) error
	// onFetch, when set, runs before a fetch is answered (without the lock).
	onFetch func(req *tapesv1.FetchRequest)
	// brokers, when set, is the Metadata's broker list (else broker 1 alone).
	brokers []*tapesv1.BrokerInfo
	// removed is the Metadata's removed_broker_ids.
	removed []int32
	// replicas, when set, returns a partition's leader and replicas (else
	// leader 1, replicas 1..rf).
	replicas func(topic string, partition int32) (leader int32, replicas []int32)
	// reassigns are the ReassignPartition requests so far.
	reassigns []*tapesv1.ReassignPartitionRequest
}

type memTopic struct {
	id      uint64
	rf      int32
	configs map[string]string
	parts   []*memPartition
}

// memPartition holds records logStart, logStart+1, ...
type memPartition struct {
	logStart int64
	records  []*tapesv1.Record
}

func (p *memPartition) hw() int64 { return p.logStart + int64(len(p.records)) }

func newMemBroker(t *testing.T) *memBroker {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &memBroker{addr: lis.Addr().String(), topics: map[string]*memTopic{}}
	srv := grpc.NewServer()
	tapesv1.RegisterBrokerServiceServer(srv, b)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return b
}

// addTopic creates a topic directly.
func (b *memBroker) addTopic(name string, partitions, rf int32, configs map[string]string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nextID++
	tp := &memTopic{id: b.nextID, rf: rf, configs: configs}
	for range partitions {
		tp.parts = append(tp.parts, &memPartition{})
	}
	b.topics[name] = tp
}

// append adds records to a partition, assigning offsets.
func (b *memBroker) append(topic string, partition int32, recs ...*tapesv1.Record) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.topics[topic].parts[partition]
	for _, r := range recs {
		r = proto.Clone(r).(*tapesv1.Record)
		r.Offset = p.hw()
		p.records = append(p.records, r)
	}
}

// records returns a copy of a partition's records.
func (b *memBroker) records(topic string, partition int32) []*tapesv1.Record {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*tapesv1.Record(nil), b.topics[topic].parts[partition].records...)
}

func (b *memBroker) producedRequests() []*tapesv1.ProduceRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*tapesv1.ProduceRequest(nil), b.produces...)
}

func (b *memBroker) partition(topic string, partition int32) (*memPartition, error) {
	tp, ok := b.topics[topic]
	if !ok || partition < 0 || int(partition) >= len(tp.parts) {
		return nil, kerr.ToStatus(kerr.New(kerr.UnknownTopicOrPartition, "%s-%d", topic, partition))
	}
	return tp.parts[partition], nil
}

func (b *memBroker) Metadata(_ context.Context, req *tapesv1.MetadataRequest) (*tapesv1.MetadataResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.metadataRequests = append(b.metadataRequests, proto.Clone(req).(*tapesv1.MetadataRequest))
	resp := &tapesv1.MetadataResponse{BrokerId: 1, ControllerId: 1, Brokers: []*tapesv1.BrokerInfo{{Id: 1, Address: b.addr, Alive: true}}}
	if b.brokers != nil {
		resp.Brokers = slices.Clone(b.brokers)
	}
	resp.RemovedBrokerIds = b.removed
	names := req.GetTopics()
	if len(names) == 0 && !req.GetNoTopics() {
		for n := range b.topics {
			names = append(names, n)
		}
	}
	for _, n := range names {
		tp, ok := b.topics[n]
		if !ok {
			resp.Topics = append(resp.Topics, &tapesv1.TopicMetadata{Name: n, Error: kerr.New(kerr.UnknownTopicOrPartition, "topic %q does not exist", n).Detail})
			continue
		}
		tm := &tapesv1.TopicMetadata{Name: n, TopicId: tp.id, Configs: tp.configs}
		for i, p := range tp.parts {
			pm := &tapesv1.PartitionMetadata{Partition: int32(i), LeaderId: 1, LeaderEpoch: 3, HighWatermark: -1, LogStartOffset: -1, LogEndOffset: -1}
			for r := int32(1); r <= tp.rf; r++ {
				pm.Replicas = append(pm.Replicas, r)
			}
			if b.replicas != nil {
				pm.LeaderId, pm.Replicas = b.replicas(n, int32(i))
			}
			pm.Isr = []int32{1}
			if req.GetIncludeOffsets() {
				pm.HighWatermark, pm.LogStartOffset, pm.LogEndOffset = p.hw(), p.logStart, p.hw()
			}
			tm.Partitions = append(tm.Partitions, pm)
		}
		resp.Topics = append(resp.Topics, tm)
	}
	return resp, nil
}

func (b *memBroker) CreateTopics(_ context.Context, req *tapesv1.CreateTopicsRequest) (*tapesv1.CreateTopicsResponse, error) {
	resp := &tapesv1.CreateTopicsResponse{}
	for _, s := range req.GetTopics() {
		r := &tapesv1.TopicResult{Name: s.GetName()}
		b.mu.Lock()
		_, exists := b.topics[s.GetName()]
		b.mu.Unlock()
		if exists {
			r.Error = kerr.New(kerr.TopicAlreadyExists, "topic %q already exists", s.GetName()).Detail
		} else if !req.GetValidateOnly() {
			b.addTopic(s.GetName(), s.GetPartitions(), s.GetReplicationFactor(), s.GetConfigs())
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

func (b *memBroker) DeleteTopics(_ context.Context, req *tapesv1.DeleteTopicsRequest) (*tapesv1.DeleteTopicsResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	resp := &tapesv1.DeleteTopicsResponse{}
	for _, n := range req.GetNames() {
		r := &tapesv1.TopicResult{Name: n}
		if _, ok := b.topics[n]; !ok {
			r.Error = kerr.New(kerr.UnknownTopicOrPartition, "topic %q does not exist", n).Detail
		}
		delete(b.topics, n)
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

func (b *memBroker) Produce(_ context.Context, req *tapesv1.ProduceRequest) (*tapesv1.ProduceResponse, error) {
	b.mu.Lock()
	b.produces = append(b.produces, req)
	hook := b.onProduce
	p, err := b.partition(req.GetTopic(), req.GetPartition())
	b.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if hook != nil {
		if err := hook(req); err != nil {
			return nil, kerr.ToStatus(err)
		}
	}
	b.mu.Lock()
	base := p.hw()
	b.mu.Unlock()
	b.append(req.GetTopic(), req.GetPartition(), req.GetRecords()...)
	return &tapesv1.ProduceResponse{BaseOffset: base, LeaderEpoch: 3}, nil
}

func (b *memBroker) Fetch(ctx context.Context, req *tapesv1.FetchRequest) (*tapesv1.FetchResponse, error) {
	b.mu.Lock()
	hook := b.onFetch
	b.mu.Unlock()
	if hook != nil {
		hook(req)
	}
	deadline := time.Now().Add(time.Duration(req.GetMaxWaitMs()) * time.Millisecond)
	for {
		b.mu.Lock()
		p, err := b.partition(req.GetTopic(), req.GetPartition())
		if err != nil {
			b.mu.Unlock()
			return nil, err
		}
		if req.GetOffset() < p.logStart || req.GetOffset() > p.hw() {
			b.mu.Unlock()
			return nil, kerr.ToStatus(kerr.OutOfRange(req.GetOffset(), p.logStart, p.hw()))
		}
		resp := &tapesv1.FetchResponse{HighWatermark: p.hw(), LogStartOffset: p.logStart, LeaderEpoch: 3}
		size := 0
		for _, r := range p.records[req.GetOffset()-p.logStart:] {
			if len(resp.Records) > 0 && size+len(r.GetValue()) > int(req.GetMaxBytes()) {
				break
			}
			size += len(r.GetValue())
			resp.Records = append(resp.Records, r)
		}
		b.mu.Unlock()
		if len(resp.Records) > 0 || time.Now().After(deadline) {
			return resp, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (b *memBroker) ListOffsets(_ context.Context, req *tapesv1.ListOffsetsRequest) (*tapesv1.ListOffsetsResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, err := b.partition(req.GetTopic(), req.GetPartition())
	if err != nil {
		return nil, err
	}
	switch req.GetTimestampMs() {
	case -1:
		return &tapesv1.ListOffsetsResponse{Offset: p.hw()}, nil
	case -2:
		return &tapesv1.ListOffsetsResponse{Offset: p.logStart}, nil
	}
	return nil, kerr.ToStatus(kerr.New(kerr.InvalidRequest, "timestamps are not supported by the fake"))
}

// syncBuffer is a bytes.Buffer safe to read while a command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// sortedLines splits output into lines and sorts them.
func sortedLines(s string) []string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return nil
	}
	sort.Strings(lines)
	return lines
}

func cmdCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(cmdCtx(t))
	t.Cleanup(cancel)
	return ctx, cancel
}

// requestedMetadata returns the Metadata requests so far and forgets them.
func (b *memBroker) requestedMetadata() []*tapesv1.MetadataRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.metadataRequests
	b.metadataRequests = nil
	return out
}

// ReassignPartition records the request (reassigns) and refuses, as a
// broker does, a negative throttle; it moves nothing.
func (b *memBroker) ReassignPartition(_ context.Context, req *tapesv1.ReassignPartitionRequest) (*tapesv1.ReassignPartitionResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reassigns = append(b.reassigns, proto.Clone(req).(*tapesv1.ReassignPartitionRequest))
	if req.ThrottleBytesPerSec < 0 {
		return &tapesv1.ReassignPartitionResponse{Error: &tapesv1.ErrorDetail{Code: string(kerr.InvalidRequest),
			Message: "throttle " + strconv.FormatInt(req.ThrottleBytesPerSec, 10) + " bytes/s is negative"}}, nil
	}
	return &tapesv1.ReassignPartitionResponse{}, nil
}
