package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/kafkawire"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/replication"
)

// ListOffsets versions served: v1-v6. v7 adds the timestamp -3 (the offset
// of the record with the largest timestamp), which the storage cannot answer
// exactly yet (a segment's largest timestamp may belong to records before
// the log start that DeleteRecords moved), so v7+ is not advertised and
// clients use v6 (franz-go, Java) or lower.
const (
	kafkaListOffsetsMin = 1
	kafkaListOffsetsMax = 6
)

// registerKafkaListOffsets registers ListOffsets (key 2) on srv
// (registerKafkaAdmin calls it).
func (b *Broker) registerKafkaListOffsets(srv *kafkawire.Server) {
	srv.Register(kmsg.ListOffsets.Int16(), kafkaListOffsetsMin, kafkaListOffsetsMax, b.kafkaListOffsets)
}

// kafkaListOffsets answers ListOffsets (key 2, v1-v6) from the partitions'
// leaders on this broker, as gRPC's ListOffsets (replication.Replica
// ListOffsets): -2 the log start, -1 the high watermark, a timestamp the
// first committed record at or after it (offset and timestamp -1 when
// none). It does not block (no network, local reads), so it runs on the
// request goroutine.
//
// current_leader_epoch (v4+), when not -1, is checked against the Raft term
// as kafkaEpoch gives it: older is FENCED_LEADER_EPOCH, newer
// UNKNOWN_LEADER_EPOCH, as Kafka's leader answers. The answer's leader
// epoch is that term for -1 (latest), as Kafka's (its latest epoch); for
// -2 and a timestamp Kafka answers the epoch of the batch holding the
// offset, which tapes does not keep, so -1 (unknown: clients then skip
// OffsetForLeaderEpoch validation, which is not served anyway). A broker that is not the partition's ready leader
// answers NOT_LEADER_OR_FOLLOWER (without checking the epoch). Isolation
// level 1 (read_committed, v2+) answers the last stable offset for -1, and
// no offset at or past it for a timestamp, as Kafka does. A partition asked for twice is
// INVALID_REQUEST, as Kafka answers.
func (b *Broker) kafkaListOffsets(_ context.Context, r *kafkawire.Request) kafkawire.Reply {
	req := r.Msg.(*kmsg.ListOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	type tp struct {
		topic string
		p     int32
	}
	times := map[tp]int{}
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			times[tp{t.Topic, p.Partition}]++
		}
	}
	gate := b.clientGate()
	if gate == nil && req.IsolationLevel != 0 && req.IsolationLevel != 1 {
		gate = kerr.New(kerr.InvalidRequest, "isolation level %d: 0 (read_uncommitted) or 1 (read_committed)", req.IsolationLevel)
	}
	a := &api{b: b}
	for _, t := range req.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition = p.Partition
			off, ts, epoch, err := int64(-1), int64(-1), int32(-1), gate
			if err == nil && times[tp{t.Topic, p.Partition}] > 1 {
				err = kerr.New(kerr.InvalidRequest, "%s-%d is asked for %d times in one ListOffsets request", t.Topic, p.Partition, times[tp{t.Topic, p.Partition}])
			}
			if err == nil {
				off, ts, epoch, err = a.kafkaListOffset(t.Topic, p.Partition, p.Timestamp, p.CurrentLeaderEpoch, kafkaIsolation(req.IsolationLevel))
			}
			if err != nil {
				off, ts, epoch = -1, -1, -1
				rp.ErrorCode = kafkawire.ErrorCode(err)
			}
			rp.Offset, rp.Timestamp, rp.LeaderEpoch = off, ts, epoch
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return kafkawire.Respond(resp)
}

// kafkaListOffset is one partition's answer: offset, timestamp and leader
// epoch, or FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH when current (not
// -1) differs from the leader's epoch.
func (a *api) kafkaListOffset(topic string, partition int32, timestamp int64, current int32, isolation replication.IsolationLevel) (int64, int64, int32, error) {
	r, err := a.leaderReplica(topic, partition)
	if err != nil {
		return 0, 0, 0, err
	}
	off, ts, term, err := r.ListOffsetsIsolated(timestamp, isolation)
	if err != nil {
		return 0, 0, 0, err
	}
	epoch := kafkaEpoch(term)
	if err := checkLeaderEpoch(topic, partition, current, epoch); err != nil {
		return 0, 0, 0, err
	}
	if timestamp != replication.LatestTimestamp {
		// Kafka answers the epoch of the batch that holds the offset;
		// tapes keeps no epoch per offset, so: unknown.
		epoch = -1
	}
	return off, ts, epoch, nil
}

// checkLeaderEpoch fences a request's current_leader_epoch (-1: none given)
// against the leader's: Kafka's rule for every partition request that
// carries one (ListOffsets, Fetch, OffsetForLeaderEpoch).
func checkLeaderEpoch(topic string, partition, current, leader int32) error {
	switch {
	case current == -1 || current == leader:
		return nil
	case current < leader:
		return kerr.New(kerr.FencedLeaderEpoch, "%s-%d: the client's leader epoch %d is older than the leader's %d; refresh metadata", topic, partition, current, leader)
	}
	return kerr.New(kerr.UnknownLeaderEpoch, "%s-%d: the client's leader epoch %d is newer than the leader's %d", topic, partition, current, leader)
}
