package broker

import (
	"context"
	"math"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/group"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/txn"
)

// tapes.v1.TransactionService (issue 13 point 3): the same transaction
// coordinator (b.txns) and group coordinator (b.groups) the Kafka handlers
// of kafka_txn.go and kafka_txnoffsetcommit.go call, translated from
// protobuf. The coordinators keep every rule (fencing, NOT_COORDINATOR,
// CONCURRENT_TRANSACTIONS, timeouts); nothing here keeps state.
// ARCHITECTURE.md "Transactions over gRPC".

// txnAPI serves tapes.v1.TransactionService.
type txnAPI struct {
	tapesv1.UnimplementedTransactionServiceServer
	b *Broker
}

// producerEpoch checks a gRPC (int32) producer epoch fits Kafka's int16.
func producerEpoch(id int64, epoch int32) (int16, error) {
	if epoch < -1 || epoch > math.MaxInt16 {
		return 0, kerr.New(kerr.InvalidProducerEpoch, "producer %d epoch %d: a Kafka producer epoch is 0..%d", id, epoch, math.MaxInt16)
	}
	return int16(epoch), nil
}

func (t *txnAPI) InitTransactionalProducerId(ctx context.Context, req *tapesv1.InitTransactionalProducerIdRequest) (*tapesv1.InitTransactionalProducerIdResponse, error) {
	epoch, err := producerEpoch(req.ProducerId, req.ProducerEpoch)
	if err != nil {
		return nil, kerr.ToStatus(err)
	}
	id, e, err := t.b.initTxnProducerID(ctx, txn.InitRequest{TransactionalID: req.TransactionalId,
		TimeoutMs: req.TransactionTimeoutMs, ProducerID: req.ProducerId, ProducerEpoch: epoch})
	if err != nil {
		return nil, kerr.ToStatus(err)
	}
	return &tapesv1.InitTransactionalProducerIdResponse{ProducerId: id, ProducerEpoch: int32(e)}, nil
}

func (t *txnAPI) AddPartitionsToTxn(ctx context.Context, req *tapesv1.AddPartitionsToTxnRequest) (*tapesv1.AddPartitionsToTxnResponse, error) {
	epoch, err := producerEpoch(req.ProducerId, req.ProducerEpoch)
	if err != nil {
		return nil, kerr.ToStatus(err)
	}
	parts := make([]txn.TopicPartition, len(req.Partitions))
	for i, p := range req.Partitions {
		if !t.b.partitionExists(p.Topic, p.Partition) {
			return nil, kerr.ToStatus(kerr.New(kerr.UnknownTopicOrPartition, "%s-%d does not exist", p.Topic, p.Partition))
		}
		parts[i] = txn.TopicPartition{Topic: p.Topic, Partition: p.Partition}
	}
	if err := t.b.txnReady(); err != nil {
		return nil, kerr.ToStatus(err)
	}
	if err := t.b.txns.AddPartitions(ctx, req.TransactionalId, req.ProducerId, epoch, parts); err != nil {
		return nil, kerr.ToStatus(err)
	}
	return &tapesv1.AddPartitionsToTxnResponse{}, nil
}

func (t *txnAPI) AddOffsetsToTxn(ctx context.Context, req *tapesv1.AddOffsetsToTxnRequest) (*tapesv1.AddOffsetsToTxnResponse, error) {
	epoch, err := producerEpoch(req.ProducerId, req.ProducerEpoch)
	if err == nil {
		err = t.b.addOffsetsToTxn(ctx, req.TransactionalId, req.ProducerId, epoch, req.GroupId)
	}
	if err != nil {
		return nil, kerr.ToStatus(err)
	}
	return &tapesv1.AddOffsetsToTxnResponse{}, nil
}

func (t *txnAPI) TxnOffsetCommit(ctx context.Context, req *tapesv1.TxnOffsetCommitRequest) (*tapesv1.TxnOffsetCommitResponse, error) {
	epoch, err := producerEpoch(req.ProducerId, req.ProducerEpoch)
	if err != nil {
		return nil, kerr.ToStatus(err)
	}
	for _, o := range req.Offsets {
		if !t.b.partitionExists(o.Topic, o.Partition) {
			return nil, kerr.ToStatus(kerr.New(kerr.UnknownTopicOrPartition, "%s-%d does not exist", o.Topic, o.Partition))
		}
	}
	if why := t.b.notReady(); why != "" {
		return nil, kerr.ToStatus(kerr.New(kerr.CoordinatorNotAvailable, "%s", why))
	}
	err = t.b.groups.TxnOffsetCommit(ctx, group.TxnOffsetCommitRequest{TransactionalID: req.TransactionalId, GroupID: req.GroupId,
		ProducerID: req.ProducerId, ProducerEpoch: epoch, GenerationID: req.GenerationId, MemberID: req.MemberId, Offsets: req.Offsets})
	if err != nil {
		return nil, kerr.ToStatus(err)
	}
	return &tapesv1.TxnOffsetCommitResponse{}, nil
}

func (t *txnAPI) EndTxn(ctx context.Context, req *tapesv1.EndTxnRequest) (*tapesv1.EndTxnResponse, error) {
	epoch, err := producerEpoch(req.ProducerId, req.ProducerEpoch)
	if err == nil {
		err = t.b.txnReady()
	}
	if err == nil {
		err = t.b.txns.EndTxn(ctx, req.TransactionalId, req.ProducerId, epoch, req.Commit)
	}
	if err != nil {
		return nil, kerr.ToStatus(err)
	}
	return &tapesv1.EndTxnResponse{}, nil
}

// initTxnProducerID is InitProducerId with a transactional id for both
// front ends: __transaction_state is created on first use, then the
// coordinator answers.
func (b *Broker) initTxnProducerID(ctx context.Context, req txn.InitRequest) (int64, int16, error) {
	err := b.txnReady()
	if err == nil && b.txnPartitions() == 0 {
		if err = b.ensureTxnTopic(ctx); err != nil {
			err = kerr.New(kerr.CoordinatorNotAvailable, "creating %s: %v", txn.StateTopic, err)
		}
	}
	if err != nil {
		return -1, -1, err
	}
	return b.txns.InitProducerID(ctx, req)
}

// addOffsetsToTxn is AddOffsetsToTxn of both front ends: the group's
// __consumer_offsets partition (group.PartitionFor, the topic created
// first if need be) joins the transaction, so that its markers complete
// the transaction's offset commits.
func (b *Broker) addOffsetsToTxn(ctx context.Context, id string, producerID int64, epoch int16, groupID string) error {
	err := b.txnReady()
	if err == nil && groupID == "" {
		err = kerr.New(kerr.InvalidGroupID, "group id is empty")
	}
	if err == nil && b.offsetsPartitions() == 0 {
		if err = b.ensureOffsetsTopic(ctx); err != nil {
			err = kerr.New(kerr.CoordinatorNotAvailable, "creating %s: %v", group.OffsetsTopic, err)
		}
	}
	if err == nil {
		if n := b.offsetsPartitions(); n == 0 {
			err = kerr.New(kerr.CoordinatorNotAvailable, "%s is being created", group.OffsetsTopic)
		} else {
			tp := txn.TopicPartition{Topic: group.OffsetsTopic, Partition: group.PartitionFor(groupID, n)}
			err = b.txns.AddPartitions(ctx, id, producerID, epoch, []txn.TopicPartition{tp})
		}
	}
	return err
}

// findTxnCoordinatorGRPC answers FindCoordinator with key type 1: the
// coordinator Kafka's FindCoordinator names (findTxnCoordinator, the
// txn.PartitionFor rule), with its gRPC address.
func (b *Broker) findTxnCoordinatorGRPC(ctx context.Context, id string) (*tapesv1.FindCoordinatorResponse, error) {
	leader, _, err := b.findTxnCoordinator(ctx, id)
	if err != nil {
		return nil, err
	}
	return &tapesv1.FindCoordinatorResponse{NodeId: leader, Address: b.brokerAddress(metadata.BrokerID(leader)),
		Partition: txn.PartitionFor(id, b.txnPartitions())}, nil
}
