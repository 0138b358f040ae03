package broker

import (
	"context"
	"hash/fnv"
	"math"
	"slices"
	"sync"
	"time"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/recordbatch"
	"github.com/tapes-dev/tapes/internal/replication"
	"github.com/tapes-dev/tapes/internal/storage"
)

// Limits of the client API.
const (
	defaultProduceTimeout = 30 * time.Second
	maxFetchWait          = 30 * time.Second
	defaultFetchBytes     = 1 << 20
)

// api serves BrokerService. Handlers return *kerr.Error values converted to
// gRPC statuses by kerr.ToStatus.
type api struct {
	tapesv1.UnimplementedBrokerServiceServer
	b *Broker
}

func (a *api) Metadata(ctx context.Context, req *tapesv1.MetadataRequest) (*tapesv1.MetadataResponse, error) {
	if req.GetNoTopics() && len(req.GetTopics()) > 0 {
		return nil, kerr.ToStatus(kerr.New(kerr.InvalidRequest, "metadata request sets no_topics and names %d topics (%q...)", len(req.GetTopics()), req.GetTopics()[0]))
	}
	// Only the topics asked for: the answer's size never depends on
	// topics the client did not name (issue 15).
	names := req.GetTopics()
	switch {
	case req.GetNoTopics():
		names = []string{} // none
	case len(names) == 0:
		names = nil // every topic
	}
	resp, err := a.metadata(names)
	if err != nil {
		return nil, kerr.ToStatus(err)
	}
	if req.IncludeOffsets {
		a.fillOffsets(ctx, resp)
	}
	return resp, nil
}

// metadata is this broker's view of the cluster for both front ends (gRPC
// Metadata and Kafka's, kafka.go): every registered broker with its
// liveness, the controller, and the topics named (nil: every topic, empty:
// none; a name
// that does not exist gets UNKNOWN_TOPIC_OR_PARTITION), with leaders this
// broker's own replicas know to be newer than the controller's. A broker
// cut off from the controller quorum answers BROKER_NOT_AVAILABLE: it
// would answer with what it last knew (old leaders, forever); the error is
// retriable, so clients ask another broker. Called from request
// goroutines; it does not block on the network.
func (a *api) metadata(names []string) (*tapesv1.MetadataResponse, *kerr.Error) {
	b := a.b
	if why := b.metadataStale(); why != "" {
		return nil, kerr.New(kerr.BrokerNotAvailable, "broker %d %s: its metadata may be stale; ask another broker", b.cfg.ID, why)
	}
	resp := &tapesv1.MetadataResponse{ControllerId: int32(b.controllerID()), BrokerId: int32(b.cfg.ID)}
	b.meta.View(func(s *metadata.State) {
		for _, id := range s.BrokerIDs() {
			br := s.Brokers[id]
			resp.Brokers = append(resp.Brokers, &tapesv1.BrokerInfo{Id: int32(id), Address: br.Address, KafkaAddress: br.KafkaAddress})
		}
		for id := range s.Removed {
			resp.RemovedBrokerIds = append(resp.RemovedBrokerIds, int32(id))
		}
		slices.Sort(resp.RemovedBrokerIds)
		if names == nil {
			names = s.TopicNames()
		}
		for _, n := range names {
			t, ok := s.Topics[n]
			if !ok {
				resp.Topics = append(resp.Topics, &tapesv1.TopicMetadata{Name: n, Error: kerr.New(kerr.UnknownTopicOrPartition, "topic %q does not exist", n).Detail})
				continue
			}
			tm := topicMetadata(t)
			resp.Topics = append(resp.Topics, tm)
		}
	})
	for _, bi := range resp.Brokers {
		bi.Alive = b.alive(metadata.BrokerID(bi.Id))
	}
	a.localLeaders(resp)
	return resp, nil
}

// topicMetadata describes t as the controller knows it (no offsets).
func topicMetadata(t *metadata.Topic) *tapesv1.TopicMetadata {
	tm := &tapesv1.TopicMetadata{Name: t.Name, TopicId: uint64(t.ID), Configs: map[string]string{}}
	for k, v := range t.Configs {
		tm.Configs[k] = v
	}
	for p, ps := range t.Partitions {
		pm := &tapesv1.PartitionMetadata{Partition: int32(p), LeaderId: int32(ps.Leader), LeaderEpoch: ps.Epoch,
			Replicas: ids32(ps.Replicas), Isr: ids32(ps.ISR), HighWatermark: -1, LogStartOffset: -1, LogEndOffset: -1,
			AddingReplicas: ids32(ps.Adding), RemovingReplicas: ids32(ps.Removing), RaftVoters: ids32(ps.Voters), RaftLearners: ids32(ps.Learners), ReassignmentSteps: append([]string(nil), ps.Steps...),
			ThrottleBytesPerSec: ps.Throttle}
		if ps.Leader < 0 {
			// Not the topic's name again: the answer's size per
			// partition stays bounded (maxPartitionMetadataBytes).
			pm.Error = kerr.New(kerr.LeaderNotAvailable, "partition %d has no leader yet", p).Detail
		}
		tm.Partitions = append(tm.Partitions, pm)
	}
	return tm
}

// fillOffsets asks every live broker for its replicas' state and takes the
// high watermark and log bounds from each partition's ready leader; the
// leader it reports also replaces a stale one in the controller's view.
func (a *api) fillOffsets(ctx context.Context, resp *tapesv1.MetadataResponse) {
	type key struct {
		topic string
		p     int32
	}
	index := map[key]*tapesv1.PartitionMetadata{}
	// Only the topics asked for: the answer must not grow with the others.
	want := &tapesv1.DescribeReplicasRequest{}
	for _, t := range resp.Topics {
		if t.Error == nil {
			want.Topics = append(want.Topics, t.Name)
		}
		for _, p := range t.Partitions {
			index[key{t.Name, p.Partition}] = p
		}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, bi := range resp.Brokers {
		wg.Add(1)
		go func(id metadata.BrokerID) {
			defer wg.Done()
			var out *tapesv1.DescribeReplicasResponse
			if id == a.b.cfg.ID {
				out, _ = (&controllerAPI{b: a.b}).DescribeReplicas(ctx, want)
			} else {
				conn, err := a.b.peerConn(id)
				if err != nil {
					return
				}
				out, err = tapesv1.NewControllerServiceClient(conn).DescribeReplicas(ctx, want)
				if err != nil {
					return
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for _, rs := range out.Replicas {
				pm := index[key{rs.Topic, rs.Partition}]
				if pm == nil || len(rs.Isr) == 0 || rs.Term < pm.LeaderEpoch {
					continue // not a ready leader, or an older one
				}
				pm.LeaderId, pm.LeaderEpoch, pm.Isr = rs.BrokerId, rs.Term, rs.Isr
				pm.HighWatermark, pm.LogStartOffset, pm.LogEndOffset = rs.HighWatermark, rs.LogStartOffset, rs.LogEndOffset
				pm.Error = nil
			}
		}(metadata.BrokerID(bi.Id))
	}
	wg.Wait()
}

// localLeaders replaces the controller's leader of a partition with the one
// this broker's own replica knows when that one is newer: after a failover
// the replicas learn the new leader at once, the controller only when the
// new leader's report has committed. Clients find the leader sooner so.
func (a *api) localLeaders(resp *tapesv1.MetadataResponse) {
	for _, t := range resp.Topics {
		if t.Error != nil {
			continue
		}
		for _, p := range t.Partitions {
			r := a.b.replica(t.Name, metadata.TopicID(t.TopicId), p.Partition)
			if r == nil {
				continue
			}
			leader, term, ok := r.KnownLeader()
			if !ok {
				continue
			}
			var ownISR []metadata.BrokerID
			if leader == a.b.cfg.ID {
				ownISR = r.ISR() // nil until this leader is ready
			}
			useLocalLeader(p, leader, term, ownISR)
		}
	}
}

// useLocalLeader puts leader (of Raft term term, as this broker's replica
// knows it) into p when term is newer than p's epoch and an ISR holding
// leader is known: ownISR (the leader's own, when this broker is it and
// ready), else p's ISR from the controller. Otherwise p stays the
// controller's answer (leader -1 with LEADER_NOT_AVAILABLE for a partition
// whose leader has not reported yet): Kafka never names a leader outside
// the ISR, and a client given leader 2 with an empty ISR (kcat -L on a
// just-created topic) shows it as such.
func useLocalLeader(p *tapesv1.PartitionMetadata, leader metadata.BrokerID, term int64, ownISR []metadata.BrokerID) {
	if term <= p.LeaderEpoch {
		return
	}
	isr := p.Isr
	if len(ownISR) > 0 {
		isr = ids32(ownISR)
	}
	if !slices.Contains(isr, int32(leader)) {
		return
	}
	p.LeaderId, p.LeaderEpoch, p.Isr, p.Error = int32(leader), term, isr, nil
}

func ids32(ids []metadata.BrokerID) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

func (a *api) CreateTopics(ctx context.Context, req *tapesv1.CreateTopicsRequest) (*tapesv1.CreateTopicsResponse, error) {
	resp := &tapesv1.CreateTopicsResponse{}
	for _, spec := range req.Topics {
		var detail *tapesv1.ErrorDetail
		if err := a.createClientTopic(ctx, spec, nil, req.ValidateOnly); err != nil {
			detail = asDetail(err)
		}
		resp.Results = append(resp.Results, &tapesv1.TopicResult{Name: spec.Name, Error: detail})
	}
	return resp, nil
}

// createClientTopic is createTopic for a client's request (gRPC's and
// Kafka's CreateTopics): __consumer_offsets is refused, the brokers create
// it themselves (ensureOffsetsTopic).
func (a *api) createClientTopic(ctx context.Context, spec *tapesv1.TopicSpec, manual [][]metadata.BrokerID, validateOnly bool) error {
	if isInternalTopic(spec.Name) {
		return kerr.New(kerr.InvalidTopic, "%s is an internal topic: the brokers create it when the first consumer group or transactional producer looks for its coordinator", spec.Name)
	}
	return a.createTopic(ctx, spec, manual, validateOnly)
}

// createTopic checks spec against this broker's view (name, configs,
// collisions, live brokers, the partition budget) and proposes it; the
// controller's state machine checks name, collisions and budget again in
// log order, so concurrent creates cannot both pass. Replicas go only to
// live, registered brokers. Too few of them is INVALID_REPLICATION_FACTOR
// naming the live count, unless enough brokers are still starting (not
// registered yet, or not heard from since this broker started): that is the
// retriable BROKER_NOT_AVAILABLE, so a script that creates a topic right
// after `cluster up` retries instead of failing.
//
// manual, when not nil, is the replica list of every partition (Kafka's
// CreateTopics replica assignment, kafka_admin.go), used as given instead
// of metadata.Assign's: its brokers must be live and registered
// (INVALID_REPLICA_ASSIGNMENT naming the others; BROKER_NOT_AVAILABLE while
// one is still starting), spec.Partitions and spec.ReplicationFactor must
// match it.
func (a *api) createTopic(ctx context.Context, spec *tapesv1.TopicSpec, manual [][]metadata.BrokerID, validateOnly bool) error {
	b := a.b
	if err := metadata.ValidateTopicName(spec.Name); err != nil {
		return err
	}
	if _, err := metadata.ParseTopicConfig(spec.Configs); err != nil {
		return err
	}
	var (
		avail, starting []metadata.BrokerID
		exists          bool
		colliding       string
		budgetErr       error
		assignment      [][]metadata.BrokerID
		assignErr       error
	)
	h := fnv.New32a()
	h.Write([]byte(spec.Name))
	b.meta.View(func(s *metadata.State) {
		_, exists = s.Topics[spec.Name]
		colliding = s.CollidingTopic(spec.Name)
		for _, id := range b.peerIDsIn(s) {
			_, registered := s.Brokers[id]
			switch l := b.peerLiveness(id); {
			case registered && l == live:
				avail = append(avail, id)
			case !registered || l == unknown:
				starting = append(starting, id)
			}
		}
		if manual != nil {
			assignment, assignErr = checkManualAssignment(manual, avail, starting)
			if assignErr == nil {
				budgetErr = s.CheckBudget(spec.Name, assignment, b.cfg.MaxPartitionsPerBroker)
			}
			return
		}
		if spec.Partitions > 0 && spec.ReplicationFactor > 0 && int(spec.ReplicationFactor) > len(avail) &&
			int(spec.ReplicationFactor) <= len(avail)+len(starting) {
			return
		}
		assignment, assignErr = metadata.Assign(avail, int(spec.Partitions), int(spec.ReplicationFactor), int(h.Sum32()%1024))
		if assignErr == nil {
			budgetErr = s.CheckBudget(spec.Name, assignment, b.cfg.MaxPartitionsPerBroker)
		}
	})
	switch {
	case exists:
		return kerr.New(kerr.TopicAlreadyExists, "topic %q already exists", spec.Name)
	case colliding != "":
		return metadata.CollisionError(spec.Name, colliding)
	case assignment == nil && assignErr == nil:
		return kerr.New(kerr.BrokerNotAvailable, "replication factor %d needs %d brokers: %d available, %d still starting (%s)",
			spec.ReplicationFactor, spec.ReplicationFactor, len(avail), len(starting), metadata.JoinIDs(starting))
	case assignErr != nil:
		return assignErr
	case budgetErr != nil:
		return budgetErr
	case validateOnly:
		return nil
	}
	t := &metadata.Topic{Name: spec.Name, Configs: spec.Configs}
	for _, r := range assignment {
		t.Partitions = append(t.Partitions, metadata.PartitionState{Replicas: r})
	}
	res, err := b.propose(ctx, &metadata.Command{Op: metadata.OpCreateTopic, Topic: t, MaxPartitionsPerBroker: b.cfg.MaxPartitionsPerBroker})
	if err != nil {
		return err
	}
	if err := res.Err(); err != nil {
		return err
	}
	b.waitMeta(ctx, func(s *metadata.State) bool { return s.Topics[spec.Name] != nil })
	return nil
}

func (a *api) DeleteTopics(ctx context.Context, req *tapesv1.DeleteTopicsRequest) (*tapesv1.DeleteTopicsResponse, error) {
	resp := &tapesv1.DeleteTopicsResponse{}
	for _, name := range req.Names {
		var err error
		var res *metadata.Result
		if isInternalTopic(name) {
			err = kerr.New(kerr.InvalidTopic, "%s is an internal topic (committed offsets, transaction state) and cannot be deleted", name)
		} else if res, err = a.b.propose(ctx, &metadata.Command{Op: metadata.OpDeleteTopic, Name: name}); err == nil {
			err = res.Err()
		}
		if err == nil {
			a.b.waitMeta(ctx, func(s *metadata.State) bool { return s.Topics[name] == nil })
		}
		var detail *tapesv1.ErrorDetail
		if err != nil {
			detail = asDetail(err)
		}
		resp.Results = append(resp.Results, &tapesv1.TopicResult{Name: name, Error: detail})
	}
	return resp, nil
}

func asDetail(err error) *tapesv1.ErrorDetail {
	if ke, ok := kerr.As(err); ok {
		return ke.Detail
	}
	return kerr.New(kerr.UnknownServerError, "%v", err).Detail
}

// leaderReplica finds the local replica of topic/partition. It answers
// UNKNOWN_TOPIC_OR_PARTITION for a topic or partition that does not exist
// and NOT_LEADER_OR_FOLLOWER (with the leader the metadata names) when this
// broker holds no replica of it.
func (a *api) leaderReplica(topic string, partition int32) (*replication.Replica, error) {
	var t *metadata.Topic
	var ps metadata.PartitionState
	var count int
	a.b.meta.View(func(s *metadata.State) {
		if tt, ok := s.Topics[topic]; ok {
			t = &metadata.Topic{Name: tt.Name, ID: tt.ID}
			count = len(tt.Partitions)
			if partition >= 0 && int(partition) < count {
				ps = tt.Partitions[partition]
			}
		}
	})
	if t == nil {
		return nil, kerr.New(kerr.UnknownTopicOrPartition, "topic %q does not exist", topic)
	}
	if partition < 0 || int(partition) >= count {
		return nil, kerr.New(kerr.UnknownTopicOrPartition, "partition %d of topic %q does not exist (it has %d)", partition, topic, count)
	}
	r := a.b.replica(topic, t.ID, partition)
	if r == nil {
		return nil, kerr.NotLeader(int32(ps.Leader), a.b.brokerAddress(ps.Leader), ps.Epoch,
			"broker %d holds no replica of %s-%d (replicas %s)", a.b.cfg.ID, topic, partition, metadata.JoinIDs(ps.Replicas))
	}
	return r, nil
}

func (a *api) Produce(ctx context.Context, req *tapesv1.ProduceRequest) (resp *tapesv1.ProduceResponse, err error) {
	start := time.Now()
	defer func() { a.b.metrics.observeProduce(req.Acks, len(req.Records), start, err) }()
	r, err := a.leaderReplica(req.Topic, req.Partition)
	if err != nil {
		return nil, kerr.ToStatus(err)
	}
	if len(req.Records) == 0 {
		return nil, kerr.ToStatus(kerr.New(kerr.InvalidRequest, "produce to %s-%d carries no records", req.Topic, req.Partition))
	}
	now := time.Now().UnixMilli()
	recs := make([]storage.Record, len(req.Records))
	for i, pr := range req.Records {
		recs[i] = storage.Record{Timestamp: pr.TimestampMs, Key: pr.Key, Value: pr.Value}
		if recs[i].Timestamp == 0 {
			recs[i].Timestamp = now
		}
		if pr.Key != nil && len(pr.Key) == 0 {
			recs[i].Key = []byte{}
		}
		for _, h := range pr.Headers {
			recs[i].Headers = append(recs[i].Headers, storage.Header{Key: h.Key, Value: h.Value})
		}
	}
	timeout := defaultProduceTimeout
	if req.TimeoutMs > 0 {
		timeout = time.Duration(req.TimeoutMs) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// A Kafka record batch (storage format version 3), as a Kafka producer
	// would send it, so that Kafka consumers read what gRPC producers wrote.
	p := recordbatch.NoProducer
	if req.ProducerId > 0 {
		if req.ProducerEpoch < 0 || req.ProducerEpoch > math.MaxInt16 {
			return nil, kerr.ToStatus(kerr.New(kerr.InvalidProducerEpoch, "producer %d epoch %d: a Kafka producer epoch is 0..%d", req.ProducerId, req.ProducerEpoch, math.MaxInt16))
		}
		p = recordbatch.Producer{ID: req.ProducerId, Epoch: int16(req.ProducerEpoch), BaseSequence: req.BaseSequence}
	}
	encode := recordbatch.Encode
	if req.Transactional {
		if req.ProducerId <= 0 {
			return nil, kerr.ToStatus(kerr.New(kerr.InvalidRequest, "transactional produce to %s-%d without a producer id (InitTransactionalProducerId gives one)", req.Topic, req.Partition))
		}
		encode = recordbatch.EncodeTransactional // transactions over gRPC, grpc_txn.go
	}
	batch, err := storage.WrapKafka(encode(p, recs))
	if err != nil {
		return nil, kerr.ToStatus(kerr.New(kerr.InvalidRecord, "%v", err))
	}
	res, err := r.Produce(ctx, int(req.Acks), batch)
	if err != nil {
		return nil, kerr.ToStatus(err)
	}
	return &tapesv1.ProduceResponse{BaseOffset: res.BaseOffset, LogStartOffset: res.LogStart, LeaderEpoch: res.Epoch, Duplicate: res.Duplicate}, nil
}

func (a *api) Fetch(ctx context.Context, req *tapesv1.FetchRequest) (resp *tapesv1.FetchResponse, err error) {
	defer func() { a.b.metrics.fetch.WithLabelValues(string(kerr.CodeOf(kerr.FromStatus(err)))).Inc() }()
	r, err := a.leaderReplica(req.Topic, req.Partition)
	if err != nil {
		return nil, kerr.ToStatus(err)
	}
	maxBytes := int(req.MaxBytes)
	if maxBytes <= 0 {
		maxBytes = defaultFetchBytes
	}
	wait := time.Duration(req.MaxWaitMs) * time.Millisecond
	if wait > maxFetchWait {
		wait = maxFetchWait
	}
	iso, err := grpcIsolation(req.IsolationLevel)
	if err != nil {
		return nil, kerr.ToStatus(err)
	}
	res, err := r.FetchIsolated(ctx, req.Offset, maxBytes, wait, iso)
	if err != nil {
		return nil, kerr.ToStatus(err)
	}
	out := &tapesv1.FetchResponse{HighWatermark: res.HighWatermark, LogStartOffset: res.LogStart, LeaderEpoch: res.Epoch,
		LastStableOffset: res.LastStable, NextOffset: res.NextOffset, Records: make([]*tapesv1.Record, len(res.Records))}
	for i, rec := range res.Records {
		out.Records[i] = toProto(rec)
		if id, ok := replication.Transactional(res.TxnBatches, rec.Offset); ok {
			out.Records[i].Transactional, out.Records[i].ProducerId = true, id
		}
	}
	for _, a := range res.Aborted {
		out.AbortedTransactions = append(out.AbortedTransactions,
			&tapesv1.FetchAbortedTransaction{ProducerId: a.ProducerID, FirstOffset: a.FirstOffset, LastOffset: a.LastOffset})
	}
	for _, m := range res.Markers {
		out.Markers = append(out.Markers, &tapesv1.FetchTransactionMarker{Offset: m.Offset, ProducerId: m.ProducerID,
			ProducerEpoch: int32(m.ProducerEpoch), Commit: m.Commit})
	}
	return out, nil
}

func toProto(rec storage.Record) *tapesv1.Record {
	pr := &tapesv1.Record{Offset: rec.Offset, TimestampMs: rec.Timestamp, Key: rec.Key, Value: rec.Value}
	if rec.Key != nil && len(rec.Key) == 0 {
		pr.Key = []byte{}
	}
	for _, h := range rec.Headers {
		pr.Headers = append(pr.Headers, &tapesv1.Header{Key: h.Key, Value: h.Value})
	}
	return pr
}

// grpcIsolation reads the isolation_level of a gRPC Fetch or ListOffsets:
// 0 read_uncommitted, 1 read_committed, anything else INVALID_REQUEST.
func grpcIsolation(level int32) (replication.IsolationLevel, error) {
	if level != int32(replication.ReadUncommitted) && level != int32(replication.ReadCommitted) {
		return 0, kerr.New(kerr.InvalidRequest, "isolation level %d: 0 (read_uncommitted) or 1 (read_committed)", level)
	}
	return replication.IsolationLevel(level), nil
}

func (a *api) ListOffsets(ctx context.Context, req *tapesv1.ListOffsetsRequest) (*tapesv1.ListOffsetsResponse, error) {
	r, err := a.leaderReplica(req.Topic, req.Partition)
	if err != nil {
		return nil, kerr.ToStatus(err)
	}
	iso, err := grpcIsolation(req.IsolationLevel)
	if err != nil {
		return nil, kerr.ToStatus(err)
	}
	off, ts, epoch, err := r.ListOffsetsIsolated(req.TimestampMs, iso)
	if err != nil {
		return nil, kerr.ToStatus(err)
	}
	return &tapesv1.ListOffsetsResponse{Offset: off, TimestampMs: ts, LeaderEpoch: epoch}, nil
}

// DeleteRecords moves a partition's log start forward on every replica.
// __consumer_offsets is refused: its coordinator compacts it.
func (a *api) DeleteRecords(ctx context.Context, req *tapesv1.DeleteRecordsRequest) (*tapesv1.DeleteRecordsResponse, error) {
	if isInternalTopic(req.Topic) {
		return nil, kerr.ToStatus(kerr.New(kerr.InvalidTopic, "%s is an internal topic (its coordinator keeps it); records cannot be deleted from it", req.Topic))
	}
	r, err := a.leaderReplica(req.Topic, req.Partition)
	if err != nil {
		return nil, kerr.ToStatus(err)
	}
	start, err := r.DeleteRecords(ctx, req.Offset)
	if err != nil {
		return nil, kerr.ToStatus(err)
	}
	return &tapesv1.DeleteRecordsResponse{LowWatermark: start}, nil
}

// InitProducerId allocates a producer id through the controller quorum, so
// ids are unique across the cluster and survive every failover.
func (a *api) InitProducerId(ctx context.Context, _ *tapesv1.InitProducerIdRequest) (*tapesv1.InitProducerIdResponse, error) {
	id, err := a.b.allocProducerID(ctx)
	if err != nil {
		return nil, kerr.ToStatus(err)
	}
	return &tapesv1.InitProducerIdResponse{ProducerId: id, ProducerEpoch: 0}, nil
}

// allocProducerID allocates a producer id through the controller quorum
// (gRPC's and Kafka's InitProducerId). It blocks for the round trip.
func (b *Broker) allocProducerID(ctx context.Context) (int64, error) {
	res, err := b.propose(ctx, &metadata.Command{Op: metadata.OpAllocProducerID})
	if err == nil {
		err = res.Err()
	}
	if err != nil {
		return 0, err
	}
	return res.ProducerID, nil
}
