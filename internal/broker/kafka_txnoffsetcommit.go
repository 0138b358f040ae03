package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/group"
	"github.com/tapes-dev/tapes/internal/kafkawire"
)

// Kafka's TxnOffsetCommit (key 28, issue 13): a transactional producer's
// consumed offsets, sent to the group coordinator inside its transaction,
// committed by the group coordinator (internal/group, txn.go) only when
// the producer's commit marker reaches the group's __consumer_offsets
// partition. ARCHITECTURE.md "Transactional offset commits".

// TxnOffsetCommit versions served: v0-v3 (v3 adds the group metadata of
// KIP-447; v4 and v5 only change which errors a client may expect, v6 names
// topics by id).
const (
	kafkaTxnOffsetCommitMin = 0
	kafkaTxnOffsetCommitMax = 3
)

// registerKafkaTxnOffsetCommit registers TxnOffsetCommit on srv (ServeKafka
// calls it once, before Serve). Its calls run in turn per connection among
// themselves, as the group APIs' do (kafkaGroups.inTurn).
func (b *Broker) registerKafkaTxnOffsetCommit(srv *kafkawire.Server) {
	k := &kafkaGroups{coord: b.groups, notReady: b.notReady, partitionExists: b.partitionExists,
		log: b.log.With("component", "kafka-txn-offsets"), last: map[uint64]chan struct{}{}}
	k.registerTxnOffsetCommit(srv)
}

// registerTxnOffsetCommit registers the handler over k (whose last map must
// be made: register makes it, so unit tests share the group APIs' chain).
func (k *kafkaGroups) registerTxnOffsetCommit(srv *kafkawire.Server) {
	srv.Register(kmsg.TxnOffsetCommit.Int16(), kafkaTxnOffsetCommitMin, kafkaTxnOffsetCommitMax, func(ctx context.Context, r *kafkawire.Request) kafkawire.Reply {
		return k.inTurn(ctx, r, k.txnOffsetCommit)
	})
}

// txnOffsetCommit answers TxnOffsetCommit: partitions of topics (or
// partitions) that do not exist are UNKNOWN_TOPIC_OR_PARTITION, as Kafka's
// KafkaApis answers; the others are one coordinator call, whose outcome
// each of them gets: NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS (Check,
// as for OffsetCommit), INVALID_PRODUCER_EPOCH, and with v3's group
// metadata UNKNOWN_MEMBER_ID and ILLEGAL_GENERATION. Before v3 the request
// has no group metadata: generation -1, no member, which fences nothing.
// v2+'s leader epoch is not stored. It blocks until the pending commit is
// written with acks=all.
func (k *kafkaGroups) txnOffsetCommit(ctx context.Context, r *kafkawire.Request) kmsg.Response {
	req := r.Msg.(*kmsg.TxnOffsetCommitRequest)
	resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	tr := group.TxnOffsetCommitRequest{TransactionalID: req.TransactionalID, GroupID: req.Group,
		ProducerID: req.ProducerID, ProducerEpoch: req.ProducerEpoch, GenerationID: -1}
	if req.Version >= 3 {
		tr.GenerationID, tr.MemberID, tr.GroupInstanceID = req.Generation, req.MemberID, req.InstanceID
	}
	split := k.splitCommit(req.Group, len(req.Topics), func(i int) (string, int) { return req.Topics[i].Topic, len(req.Topics[i].Partitions) },
		func(i, j int) (int32, int64, *string) {
			p := req.Topics[i].Partitions[j]
			return p.Partition, p.Offset, p.Metadata
		})
	tr.Offsets = split.offsets
	var code int16
	if len(tr.Offsets) > 0 {
		err := k.coord.TxnOffsetCommit(ctx, tr)
		if err != nil {
			k.log.Info("transactional commit refused", "group", req.Group, "transactional_id", req.TransactionalID,
				"producer", req.ProducerID, "epoch", req.ProducerEpoch, "err", err)
		}
		code = kafkawire.ErrorCode(err)
	}
	for i, t := range req.Topics {
		kt := kmsg.NewTxnOffsetCommitResponseTopic()
		kt.Topic = t.Topic
		for j, p := range t.Partitions {
			kp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			kp.Partition, kp.ErrorCode = p.Partition, split.code(i, j, code)
			kt.Partitions = append(kt.Partitions, kp)
		}
		resp.Topics = append(resp.Topics, kt)
	}
	return resp
}
