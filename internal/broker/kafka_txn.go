package broker

import (
	"context"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/group"
	"github.com/tapes-dev/tapes/internal/kafkawire"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/txn"
)

// Kafka's transaction APIs (issue 13 point 1) on the broker's Kafka
// listener, translated into calls of the broker's transaction coordinator
// (internal/txn): InitProducerId with a transactional id
// (kafka_initproducerid.go hands it here), AddPartitionsToTxn,
// AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions.
// FindCoordinator with key type 1 is in kafka_groups.go. Nothing here
// keeps transaction state. ARCHITECTURE.md "Transactions: the
// coordinator".

// The version ranges served (ARCHITECTURE.md "Version ranges served").
// AddPartitionsToTxn v4+ is KIP-890's broker-to-broker verification and
// EndTxn v4+ / InitProducerId v5 transactions v2: not served.
var kafkaTxnVersions = []struct {
	key      kmsg.Key
	min, max int16
}{
	{kmsg.AddPartitionsToTxn, 0, 3},
	{kmsg.AddOffsetsToTxn, 0, 3},
	{kmsg.EndTxn, 0, 3},
	{kmsg.DescribeTransactions, 0, 0},
	{kmsg.ListTransactions, 0, 1},
}

// kafkaTxnTimeout bounds one coordinator call (its acks=all append, the
// topic's creation).
const kafkaTxnTimeout = 30 * time.Second

// registerKafkaTxn registers the transaction APIs on srv (ServeKafka calls
// it once, before Serve). Every handler answers in a Later: the calls that
// write block until their acks=all append committed.
func (b *Broker) registerKafkaTxn(srv *kafkawire.Server) {
	handlers := map[kmsg.Key]func(context.Context, *kafkawire.Request) kmsg.Response{
		kmsg.AddPartitionsToTxn:   b.kafkaAddPartitionsToTxn,
		kmsg.AddOffsetsToTxn:      b.kafkaAddOffsetsToTxn,
		kmsg.EndTxn:               b.kafkaEndTxn,
		kmsg.DescribeTransactions: b.kafkaDescribeTransactions,
		kmsg.ListTransactions:     b.kafkaListTransactions,
	}
	for _, v := range kafkaTxnVersions {
		h := handlers[v.key]
		srv.Register(v.key.Int16(), v.min, v.max, func(ctx context.Context, r *kafkawire.Request) kafkawire.Reply {
			return kafkawire.Later(func() kafkawire.Reply {
				ctx, cancel := context.WithTimeout(ctx, kafkaTxnTimeout)
				defer cancel()
				return kafkawire.Respond(h(ctx, r))
			})
		})
	}
}

// txnReady is COORDINATOR_NOT_AVAILABLE while the broker starts, else nil.
func (b *Broker) txnReady() error {
	if why := b.notReady(); why != "" {
		return kerr.New(kerr.CoordinatorNotAvailable, "%s", why)
	}
	return nil
}

// txnAnswered logs why a transactional request of api for id is answered
// COORDINATOR_NOT_AVAILABLE (Kafka's responses carry only the code, and the
// client retries it for as long as it lasts), and returns err.
func (b *Broker) txnAnswered(api, id string, err error) error {
	if kerr.Is(err, kerr.CoordinatorNotAvailable) {
		b.log.Warn("transaction coordinator not available", "api", api, "transactional_id", id, "err", err)
	}
	return err
}

// fencedForVersion is the code an old client understands for
// PRODUCER_FENCED (KIP-588): INVALID_PRODUCER_EPOCH below fencedSince (the
// first version that may answer PRODUCER_FENCED).
func fencedForVersion(err error, version, fencedSince int16) int16 {
	if version < fencedSince && kerr.Is(err, kerr.ProducerFenced) {
		return kafkawire.ErrorCode(kerr.New(kerr.InvalidProducerEpoch, "%v", err))
	}
	return kafkawire.ErrorCode(err)
}

// kafkaInitTxnProducerID answers an InitProducerId naming a transactional
// id (kafkaInitProducerID hands it over on the request goroutine): the
// topic is created on first use, then the coordinator's answer.
// PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v4.
func (b *Broker) kafkaInitTxnProducerID(ctx context.Context, req *kmsg.InitProducerIDRequest, resp *kmsg.InitProducerIDResponse) kafkawire.Reply {
	return kafkawire.Later(func() kafkawire.Reply {
		ctx, cancel := context.WithTimeout(ctx, kafkaTxnTimeout)
		defer cancel()
		var err error
		resp.ProducerID, resp.ProducerEpoch, err = b.initTxnProducerID(ctx, txn.InitRequest{TransactionalID: *req.TransactionalID,
			TimeoutMs: req.TransactionTimeoutMillis, ProducerID: req.ProducerID, ProducerEpoch: req.ProducerEpoch}) // grpc_txn.go
		if err != nil {
			resp.ProducerID, resp.ProducerEpoch = -1, -1
			resp.ErrorCode = fencedForVersion(b.txnAnswered("InitProducerId", *req.TransactionalID, err), req.Version, 4)
		}
		return kafkawire.Respond(resp)
	})
}

// kafkaAddPartitionsToTxn answers AddPartitionsToTxn v0-v3: a partition
// that does not exist is UNKNOWN_TOPIC_OR_PARTITION and the others then
// OPERATION_NOT_ATTEMPTED (as Kafka's KafkaApis); otherwise every
// partition gets the coordinator's answer for the whole request.
func (b *Broker) kafkaAddPartitionsToTxn(ctx context.Context, r *kafkawire.Request) kmsg.Response {
	req := r.Msg.(*kmsg.AddPartitionsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	var parts []txn.TopicPartition
	missing := map[txn.TopicPartition]bool{}
	b.meta.View(func(s *metadata.State) {
		for _, t := range req.Topics {
			mt := s.Topics[t.Topic]
			for _, p := range t.Partitions {
				tp := txn.TopicPartition{Topic: t.Topic, Partition: p}
				if mt == nil || p < 0 || int(p) >= len(mt.Partitions) {
					missing[tp] = true
				}
				parts = append(parts, tp)
			}
		}
	})
	var err error
	if len(missing) == 0 {
		if err = b.txnReady(); err == nil {
			err = b.txns.AddPartitions(ctx, req.TransactionalID, req.ProducerID, req.ProducerEpoch, parts)
		}
	}
	code := fencedForVersion(b.txnAnswered("AddPartitionsToTxn", req.TransactionalID, err), req.Version, 2)
	for _, t := range req.Topics {
		rt := kmsg.NewAddPartitionsToTxnResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p, code
			switch {
			case missing[txn.TopicPartition{Topic: t.Topic, Partition: p}]:
				rp.ErrorCode = kafkawire.ErrorCode(kerr.New(kerr.UnknownTopicOrPartition, "%s-%d", t.Topic, p))
			case len(missing) > 0:
				rp.ErrorCode = kafkawire.ErrorCode(kerr.New(kerr.OperationNotAttempted, "another partition does not exist"))
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// kafkaAddOffsetsToTxn answers AddOffsetsToTxn: the group's
// __consumer_offsets partition (group.PartitionFor, the topic created
// first if need be) joins the transaction, so that its markers complete the
// transaction's offset commits.
func (b *Broker) kafkaAddOffsetsToTxn(ctx context.Context, r *kafkawire.Request) kmsg.Response {
	req := r.Msg.(*kmsg.AddOffsetsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	err := b.addOffsetsToTxn(ctx, req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Group) // grpc_txn.go
	resp.ErrorCode = fencedForVersion(b.txnAnswered("AddOffsetsToTxn", req.TransactionalID, err), req.Version, 2)
	return resp
}

// kafkaEndTxn answers EndTxn once PrepareCommit or PrepareAbort is
// committed (the markers follow in the background).
func (b *Broker) kafkaEndTxn(ctx context.Context, r *kafkawire.Request) kmsg.Response {
	req := r.Msg.(*kmsg.EndTxnRequest)
	resp := req.ResponseKind().(*kmsg.EndTxnResponse)
	err := b.txnReady()
	if err == nil {
		err = b.txns.EndTxn(ctx, req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit)
	}
	resp.ErrorCode = fencedForVersion(b.txnAnswered("EndTxn", req.TransactionalID, err), req.Version, 2)
	return resp
}

// kafkaDescribeTransactions answers DescribeTransactions v0, each id on
// its own: NOT_COORDINATOR for one coordinated elsewhere,
// TRANSACTIONAL_ID_NOT_FOUND for one unknown.
func (b *Broker) kafkaDescribeTransactions(_ context.Context, r *kafkawire.Request) kmsg.Response {
	req := r.Msg.(*kmsg.DescribeTransactionsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	for _, id := range req.TransactionalIDs {
		st := kmsg.NewDescribeTransactionsResponseTransactionState()
		st.TransactionalID, st.ProducerID, st.ProducerEpoch, st.StartTimestamp = id, -1, -1, -1
		err := b.txnReady()
		var d txn.Description
		if err == nil {
			d, err = b.txns.Describe(id)
		}
		if err != nil {
			st.ErrorCode = kafkawire.ErrorCode(err)
			resp.TransactionStates = append(resp.TransactionStates, st)
			continue
		}
		st.State, st.TimeoutMillis, st.StartTimestamp = string(d.State), d.TimeoutMs, d.StartMs
		st.ProducerID, st.ProducerEpoch = d.ProducerID, d.ProducerEpoch
		topics, parts := byTopic(d.Partitions)
		for _, topic := range topics {
			t := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
			t.Topic, t.Partitions = topic, parts[topic]
			st.Topics = append(st.Topics, t)
		}
		resp.TransactionStates = append(resp.TransactionStates, st)
	}
	return resp
}

// kafkaListTransactions answers ListTransactions v0-v1 with the
// transactions this broker coordinates (clients ask every broker): state
// filters by Kafka's names, case-sensitive as Kafka's (an unknown one is
// listed in unknown_state_filters and matches nothing), producer id
// filters, v1's duration filter (KIP-994: running longer than it, when >=
// 0).
func (b *Broker) kafkaListTransactions(_ context.Context, r *kafkawire.Request) kmsg.Response {
	req := r.Msg.(*kmsg.ListTransactionsRequest)
	resp := req.ResponseKind().(*kmsg.ListTransactionsResponse)
	if err := b.txnReady(); err != nil {
		resp.ErrorCode = kafkawire.ErrorCode(err)
		return resp
	}
	var f txn.ListFilter
	for _, s := range req.StateFilters {
		if slices.Contains(txn.States, txn.State(s)) {
			f.States = append(f.States, txn.State(s))
		} else {
			resp.UnknownStateFilters = append(resp.UnknownStateFilters, s)
		}
	}
	if len(req.StateFilters) > 0 && len(f.States) == 0 {
		return resp // only unknown states: nothing matches
	}
	f.ProducerIDs = req.ProducerIDFilters
	if req.Version >= 1 && req.DurationFilterMillis >= 0 {
		f.MinDuration = max(time.Duration(req.DurationFilterMillis)*time.Millisecond, time.Nanosecond)
	}
	list, err := b.txns.List(f)
	if err != nil {
		resp.ErrorCode = kafkawire.ErrorCode(err)
		return resp
	}
	for _, d := range list {
		st := kmsg.NewListTransactionsResponseTransactionState()
		st.TransactionalID, st.ProducerID, st.TransactionState = d.TransactionalID, d.ProducerID, string(d.State)
		resp.TransactionStates = append(resp.TransactionStates, st)
	}
	return resp
}

// isInternalTopic reports whether name is one of the internal topics the
// brokers create and keep themselves.
func isInternalTopic(name string) bool {
	return name == group.OffsetsTopic || name == txn.StateTopic
}
