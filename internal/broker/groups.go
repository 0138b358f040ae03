package broker

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc/peer"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/group"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/recordbatch"
	"github.com/tapes-dev/tapes/internal/replication"
	"github.com/tapes-dev/tapes/internal/storage"
)

// offsetsTopicSegmentBytes is Kafka's offsets.topic.segment.bytes.
const offsetsTopicSegmentBytes = 100 << 20

// newCoordinator makes the broker's group coordinator over its replicas of
// __consumer_offsets.
func (b *Broker) newCoordinator() (*group.Coordinator, error) {
	return group.New(group.Config{
		BrokerID:              int32(b.cfg.ID),
		Partitions:            b.offsetsPartitions,
		Open:                  b.offsetsLog,
		MinSessionTimeout:     b.cfg.Groups.MinSessionTimeout,
		MaxSessionTimeout:     b.cfg.Groups.MaxSessionTimeout,
		InitialRebalanceDelay: b.cfg.Groups.InitialRebalanceDelay,
		CompactAfter:          b.cfg.Groups.OffsetsCompactAfter,
		Logger:                b.log.With("component", "coordinator"),
	})
}

// offsetsPartitions is the partition count of __consumer_offsets, 0 while it
// does not exist.
func (b *Broker) offsetsPartitions() int32 { return b.topicPartitionCount(group.OffsetsTopic) }

// offsetsLog returns this broker's replica of __consumer_offsets-p as a
// group.Log, nil when it hosts none.
func (b *Broker) offsetsLog(p int32) group.Log { return b.localLog(group.OffsetsTopic, p) }

// offsetsLog adapts a replica of __consumer_offsets to group.Log.
type offsetsLog struct{ r *replication.Replica }

func (l offsetsLog) Term() uint64 { return l.r.ReadyTerm() }

func (l offsetsLog) Append(ctx context.Context, recs []group.Record) (int64, error) {
	now := time.Now().UnixMilli()
	srecs := make([]storage.Record, len(recs))
	for i, r := range recs {
		srecs[i] = storage.Record{Timestamp: now, Key: r.Key, Value: r.Value}
	}
	res, err := l.r.Produce(ctx, replication.AcksAll, storage.EncodeBatch(srecs))
	return res.BaseOffset, err
}

func (l offsetsLog) DeleteRecords(ctx context.Context, before int64) (int64, error) {
	return l.r.DeleteRecords(ctx, before)
}

// Read reads whole batches (FetchBatches), so that it sees the
// transaction markers the partition leader's WriteTxnMarkers writes: Kafka
// control batches, which record-level reads skip. It does not wait: at the
// high watermark it returns nothing.
func (l offsetsLog) Read(_ context.Context, offset int64) ([]group.Record, int64, int64, error) {
	res, err := l.r.FetchBatches(offset, 1<<20, true, replication.ReadUncommitted)
	if ke, ok := kerr.As(err); ok && ke.Code() == kerr.OffsetOutOfRange && offset < ke.Detail.LogStartOffset {
		offset = ke.Detail.LogStartOffset
		res, err = l.r.FetchBatches(offset, 1<<20, true, replication.ReadUncommitted)
	}
	if err != nil {
		return nil, offset, 0, err
	}
	var out []group.Record
	next := offset
	for _, sb := range res.Batches {
		next = max(next, sb.NextOffset())
		if m, ok := txnMarker(sb.Batch); ok {
			if m != nil && sb.BaseOffset >= offset {
				out = append(out, group.Record{Offset: sb.BaseOffset, Marker: m})
			}
			continue
		}
		recs, err := sb.Batch.Records(sb.BaseOffset)
		if err != nil {
			return nil, offset, 0, kerr.New(kerr.KafkaStorageError, "%s: batch at %d: %v", group.OffsetsTopic, sb.BaseOffset, err)
		}
		for _, r := range recs {
			if r.Offset >= offset {
				out = append(out, group.Record{Offset: r.Offset, Key: r.Key, Value: r.Value})
			}
		}
	}
	return out, next, res.HighWatermark, nil
}

// txnMarker reads a transaction marker from a stored batch: ok is false
// for a batch that is not a control batch. A control batch that is not a
// transaction marker (recordbatch.ParseMarker refuses it) is reported with
// a nil marker and ok true: it is skipped, never read as offsets.
func txnMarker(b storage.Batch) (*group.Marker, bool) {
	kb, ok := b.Kafka()
	if !ok || !recordbatch.IsControl(kb) {
		return nil, false
	}
	m, err := recordbatch.ParseMarker(kb)
	if err != nil {
		return nil, true
	}
	return &group.Marker{ProducerID: m.ProducerID, ProducerEpoch: m.ProducerEpoch, Commit: m.Commit}, true
}

// ensureOffsetsTopic creates __consumer_offsets through the controller
// (Kafka creates it on the first FindCoordinator). Several brokers may race
// to create it: TOPIC_ALREADY_EXISTS is success.
func (b *Broker) ensureOffsetsTopic(ctx context.Context) error {
	rf := b.cfg.Groups.OffsetsTopicReplicationFactor
	rf = min(rf, len(b.peerIDs()))
	spec := &tapesv1.TopicSpec{Name: group.OffsetsTopic, Partitions: b.cfg.Groups.OffsetsTopicPartitions, ReplicationFactor: int32(rf),
		Configs: map[string]string{
			metadata.ConfigRetentionMs:    "-1", // the coordinator compacts it instead (group/compact.go)
			metadata.ConfigRetentionBytes: "-1",
			metadata.ConfigSegmentBytes:   strconv.Itoa(offsetsTopicSegmentBytes),
		}}
	err := (&api{b: b}).createTopic(ctx, spec, nil, false)
	if err != nil && !kerr.Is(err, kerr.TopicAlreadyExists) {
		return err
	}
	return nil
}

// groupAPI serves tapes.v1.GroupService.
type groupAPI struct {
	tapesv1.UnimplementedGroupServiceServer
	b *Broker
}

func (g *groupAPI) FindCoordinator(ctx context.Context, req *tapesv1.FindCoordinatorRequest) (*tapesv1.FindCoordinatorResponse, error) {
	var (
		resp *tapesv1.FindCoordinatorResponse
		err  error
	)
	switch req.KeyType {
	case 0:
		resp, err = g.findCoordinator(ctx, req.GroupId)
	case 1:
		resp, err = g.b.findTxnCoordinatorGRPC(ctx, req.GroupId) // grpc_txn.go
	default:
		err = kerr.New(kerr.InvalidRequest, "coordinator key type %d: 0 (group) or 1 (transaction)", req.KeyType)
	}
	return resp, kerr.ToStatus(err)
}

func (g *groupAPI) findCoordinator(ctx context.Context, groupID string) (*tapesv1.FindCoordinatorResponse, error) {
	if groupID == "" {
		return nil, kerr.New(kerr.InvalidGroupID, "group id is empty")
	}
	b := g.b
	if b.offsetsPartitions() == 0 {
		if err := b.ensureOffsetsTopic(ctx); err != nil {
			return nil, kerr.New(kerr.CoordinatorNotAvailable, "creating %s: %v", group.OffsetsTopic, err)
		}
	}
	var (
		ps metadata.PartitionState
		id metadata.TopicID
		p  int32
	)
	b.meta.View(func(s *metadata.State) {
		if t := s.Topics[group.OffsetsTopic]; t != nil {
			id = t.ID
			p = group.PartitionFor(groupID, int32(len(t.Partitions)))
			ps = t.Partitions[p]
		}
	})
	leader, epoch := ps.Leader, ps.Epoch
	if r := b.replica(group.OffsetsTopic, id, p); r != nil {
		if l, term, ok := r.KnownLeader(); ok && term > epoch {
			leader = l
		}
	}
	if leader <= 0 || (leader != b.cfg.ID && !b.alive(leader)) {
		return nil, kerr.New(kerr.CoordinatorNotAvailable, "%s-%d (group %s) has no live leader yet", group.OffsetsTopic, p, groupID)
	}
	return &tapesv1.FindCoordinatorResponse{NodeId: int32(leader), Address: b.brokerAddress(leader), Partition: p}, nil
}

func (g *groupAPI) JoinGroup(ctx context.Context, req *tapesv1.JoinGroupRequest) (*tapesv1.JoinGroupResponse, error) {
	host := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		host = p.Addr.String()
	}
	resp, err := g.b.groups.JoinGroup(ctx, req, host)
	return resp, kerr.ToStatus(err)
}

func (g *groupAPI) SyncGroup(ctx context.Context, req *tapesv1.SyncGroupRequest) (*tapesv1.SyncGroupResponse, error) {
	resp, err := g.b.groups.SyncGroup(ctx, req)
	return resp, kerr.ToStatus(err)
}

func (g *groupAPI) Heartbeat(ctx context.Context, req *tapesv1.HeartbeatRequest) (*tapesv1.HeartbeatResponse, error) {
	if err := g.b.groups.Heartbeat(ctx, req); err != nil {
		return nil, kerr.ToStatus(err)
	}
	return &tapesv1.HeartbeatResponse{}, nil
}

func (g *groupAPI) LeaveGroup(ctx context.Context, req *tapesv1.LeaveGroupRequest) (*tapesv1.LeaveGroupResponse, error) {
	if err := g.b.groups.LeaveGroup(ctx, req); err != nil {
		return nil, kerr.ToStatus(err)
	}
	return &tapesv1.LeaveGroupResponse{}, nil
}

func (g *groupAPI) OffsetCommit(ctx context.Context, req *tapesv1.OffsetCommitRequest) (*tapesv1.OffsetCommitResponse, error) {
	if err := g.b.groups.OffsetCommit(ctx, req); err != nil {
		return nil, kerr.ToStatus(err)
	}
	return &tapesv1.OffsetCommitResponse{}, nil
}

func (g *groupAPI) OffsetFetch(ctx context.Context, req *tapesv1.OffsetFetchRequest) (*tapesv1.OffsetFetchResponse, error) {
	if !req.RequireStable {
		resp, err := g.b.groups.OffsetFetch(ctx, req)
		return resp, kerr.ToStatus(err)
	}
	resp, unstable, err := g.b.groups.OffsetFetchStable(ctx, req)
	if err != nil {
		return nil, kerr.ToStatus(err)
	}
	for i, o := range resp.GetOffsets() {
		if i < len(unstable) && unstable[i] {
			return nil, kerr.ToStatus(kerr.New(kerr.UnstableOffsetCommit, "group %s: %s-%d has a transactional commit pending", req.GroupId, o.Topic, o.Partition))
		}
	}
	return resp, nil
}

// DescribeGroups describes groups this broker coordinates; a group it does
// not is NOT_COORDINATOR (clients ask each group's coordinator).
func (g *groupAPI) DescribeGroups(ctx context.Context, req *tapesv1.DescribeGroupsRequest) (*tapesv1.DescribeGroupsResponse, error) {
	resp := &tapesv1.DescribeGroupsResponse{}
	for _, id := range req.GroupIds {
		d, err := g.b.groups.DescribeGroup(ctx, id)
		if err != nil {
			return nil, kerr.ToStatus(fmt.Errorf("describe group %s: %w", id, err))
		}
		resp.Groups = append(resp.Groups, d)
	}
	return resp, nil
}

func (g *groupAPI) ListGroups(ctx context.Context, _ *tapesv1.ListGroupsRequest) (*tapesv1.ListGroupsResponse, error) {
	return &tapesv1.ListGroupsResponse{Groups: g.b.groups.ListGroups()}, nil
}
