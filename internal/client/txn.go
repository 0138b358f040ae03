package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// Transactions over gRPC (issue 13 point 3): a transactional producer on
// the broker's TransactionService, the same coordinator Kafka clients use.
//
// The API (eosd and the experiments build on it):
//
//	p, err := c.NewTransactionalProducer(ctx, id, timeout) // fences earlier incarnations of id
//	p.Begin()
//	resp, err := p.Produce(ctx, topic, partition, records) // acks=all; partition added on first use
//	err = p.SendOffsets(ctx, group, generation, memberID, offsets) // applied only on commit
//	err = p.Commit(ctx) // or p.Abort(ctx)
//	errors.Is(err, client.ErrProducerFenced) // a newer incarnation exists: stop, do not retry
//	c.FindTransactionCoordinator(ctx, id) // FindCoordinator key type 1
//
// A TxnProducer belongs to one goroutine: its methods must not be called
// concurrently (the sequence numbers and the transaction's partitions are
// its state). ProducerID and Epoch may be read from any goroutine after
// NewTransactionalProducer returned.

// ErrProducerFenced is wrapped by every TxnProducer error once a newer
// producer with the same transactional id has initialised (the broker's
// PRODUCER_FENCED or INVALID_PRODUCER_EPOCH). The producer is then
// useless: its open transaction is aborted by the coordinator.
var ErrProducerFenced = errors.New("producer fenced by a newer incarnation of its transactional id")

// ErrNoTransaction is returned by Produce, SendOffsets, Commit and Abort
// outside Begin ... Commit/Abort, and by Begin inside one.
var ErrNoTransaction = errors.New("transaction state")

// TxnProducer is a transactional producer (see the API above).
type TxnProducer struct {
	c       *Client
	id      string
	timeout time.Duration
	// ProducerID and Epoch are what InitTransactionalProducerId gave.
	ProducerID int64
	Epoch      int32
	seq        map[txnTP]int32
	added      map[txnTP]bool
	groups     map[string]bool
	open       bool
	fenced     error
}

type txnTP struct {
	topic     string
	partition int32
}

// NewTransactionalProducer finds id's transaction coordinator and
// initialises a producer for id with transaction timeout timeout
// (transaction.timeout.ms): a new epoch, fencing every earlier producer
// with id and aborting its open transaction. Retriable errors
// (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS
// while the previous transaction completes) are retried with the client's
// Backoff until ctx ends.
func (c *Client) NewTransactionalProducer(ctx context.Context, id string, timeout time.Duration) (*TxnProducer, error) {
	if id == "" {
		return nil, kerr.New(kerr.InvalidRequest, "transactional id is empty")
	}
	p := &TxnProducer{c: c, id: id, timeout: timeout, seq: map[txnTP]int32{}}
	var resp *tapesv1.InitTransactionalProducerIdResponse
	err := p.call(ctx, "init producer id", func(ctx context.Context, tc tapesv1.TransactionServiceClient) (err error) {
		resp, err = tc.InitTransactionalProducerId(ctx, &tapesv1.InitTransactionalProducerIdRequest{TransactionalId: id,
			TransactionTimeoutMs: int32(timeout / time.Millisecond), ProducerId: -1, ProducerEpoch: -1})
		return err
	})
	if err != nil {
		return nil, err
	}
	p.ProducerID, p.Epoch = resp.ProducerId, resp.ProducerEpoch
	return p, nil
}

// FindTransactionCoordinator asks any broker which broker coordinates
// transactional id (FindCoordinator key type 1); the first call for a
// cluster creates __transaction_state. Retries until ctx ends while no
// coordinator is available.
func (c *Client) FindTransactionCoordinator(ctx context.Context, id string) (*tapesv1.FindCoordinatorResponse, error) {
	return c.findCoordinator(ctx, coordKey{keyTxn, id})
}

// TransactionalID is the producer's transactional id.
func (p *TxnProducer) TransactionalID() string { return p.id }

// call runs call against the transaction coordinator, retrying what
// coordinatorConnCall retries and CONCURRENT_TRANSACTIONS; a fencing error
// is returned wrapping ErrProducerFenced and sticks.
func (p *TxnProducer) call(ctx context.Context, op string, call func(context.Context, tapesv1.TransactionServiceClient) error) error {
	if p.fenced != nil {
		return p.fenced
	}
	err := p.c.coordinatorConnCall(ctx, fmt.Sprintf("%s (transactional id %s)", op, p.id), coordKey{keyTxn, p.id}, 0,
		func(err error) bool { return kerr.CodeOf(err) == kerr.ConcurrentTransactions },
		func(ctx context.Context, cc *grpc.ClientConn) error {
			return call(ctx, tapesv1.NewTransactionServiceClient(cc))
		})
	return p.check(err)
}

// check turns a fencing error into one wrapping ErrProducerFenced, kept
// for every later call.
func (p *TxnProducer) check(err error) error {
	switch kerr.CodeOf(err) {
	case kerr.ProducerFenced, kerr.InvalidProducerEpoch:
		p.fenced = fmt.Errorf("transactional id %s, producer %d epoch %d: %w (%w)", p.id, p.ProducerID, p.Epoch, ErrProducerFenced, err)
		p.open = false
		return p.fenced
	}
	return err
}

// Begin starts a transaction (locally: the coordinator learns of it with
// the first partition added).
func (p *TxnProducer) Begin() error {
	if p.fenced != nil {
		return p.fenced
	}
	if p.open {
		return fmt.Errorf("begin: a transaction is already open: %w", ErrNoTransaction)
	}
	p.open, p.added, p.groups = true, map[txnTP]bool{}, map[string]bool{}
	return nil
}

// Produce appends records to topic/partition inside the open transaction
// with acks=all, adding the partition to the transaction first when it is
// its first use. Retries keep the batch's sequence numbers, so a retried
// batch is written once.
func (p *TxnProducer) Produce(ctx context.Context, topic string, partition int32, records []*tapesv1.Record) (*tapesv1.ProduceResponse, error) {
	if p.fenced != nil {
		return nil, p.fenced
	}
	if !p.open {
		return nil, fmt.Errorf("produce to %s-%d: no transaction open (Begin): %w", topic, partition, ErrNoTransaction)
	}
	tp := txnTP{topic, partition}
	if !p.added[tp] {
		err := p.call(ctx, "add partition", func(ctx context.Context, tc tapesv1.TransactionServiceClient) error {
			_, err := tc.AddPartitionsToTxn(ctx, &tapesv1.AddPartitionsToTxnRequest{TransactionalId: p.id, ProducerId: p.ProducerID,
				ProducerEpoch: p.Epoch, Partitions: []*tapesv1.TxnPartition{{Topic: topic, Partition: partition}}})
			return err
		})
		if err != nil {
			return nil, err
		}
		p.added[tp] = true
	}
	resp, err := p.c.Produce(ctx, &tapesv1.ProduceRequest{Topic: topic, Partition: partition, Acks: -1, Records: records,
		ProducerId: p.ProducerID, ProducerEpoch: p.Epoch, BaseSequence: p.seq[tp], Transactional: true})
	if err != nil {
		return nil, p.check(err)
	}
	p.seq[tp] += int32(len(records))
	return resp, nil
}

// SendOffsets commits a consumer group's offsets inside the open
// transaction (Kafka's sendOffsetsToTransaction): the group's
// __consumer_offsets partition joins the transaction (AddOffsetsToTxn),
// then the group coordinator holds the offsets (TxnOffsetCommit) until the
// transaction commits; an abort drops them. generation -1 and memberID ""
// fence nothing; a consumer's own generation and member id make a
// commit from a member that lost its partitions ILLEGAL_GENERATION /
// UNKNOWN_MEMBER_ID.
func (p *TxnProducer) SendOffsets(ctx context.Context, group string, generation int32, memberID string, offsets []*tapesv1.OffsetCommitPartition) error {
	if p.fenced != nil {
		return p.fenced
	}
	if !p.open {
		return fmt.Errorf("send offsets of group %s: no transaction open (Begin): %w", group, ErrNoTransaction)
	}
	if !p.groups[group] {
		err := p.call(ctx, "add offsets", func(ctx context.Context, tc tapesv1.TransactionServiceClient) error {
			_, err := tc.AddOffsetsToTxn(ctx, &tapesv1.AddOffsetsToTxnRequest{TransactionalId: p.id, ProducerId: p.ProducerID,
				ProducerEpoch: p.Epoch, GroupId: group})
			return err
		})
		if err != nil {
			return err
		}
		p.groups[group] = true
	}
	err := p.c.coordinatorConnCall(ctx, fmt.Sprintf("transactional offset commit (group %s, transactional id %s)", group, p.id),
		coordKey{keyGroup, group}, 0, nil, func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := tapesv1.NewTransactionServiceClient(cc).TxnOffsetCommit(ctx, &tapesv1.TxnOffsetCommitRequest{TransactionalId: p.id,
				GroupId: group, ProducerId: p.ProducerID, ProducerEpoch: p.Epoch, GenerationId: generation, MemberId: memberID, Offsets: offsets})
			return err
		})
	return p.check(err)
}

// Commit commits the open transaction: it returns once the coordinator
// has durably decided to commit (the markers follow; read_committed
// readers see the records once the marker reaches each partition).
func (p *TxnProducer) Commit(ctx context.Context) error { return p.end(ctx, true) }

// Abort aborts the open transaction: its records are never visible to
// read_committed readers, its offsets never applied.
func (p *TxnProducer) Abort(ctx context.Context) error { return p.end(ctx, false) }

func (p *TxnProducer) end(ctx context.Context, commit bool) error {
	if p.fenced != nil {
		return p.fenced
	}
	if !p.open {
		return fmt.Errorf("end transaction: no transaction open (Begin): %w", ErrNoTransaction)
	}
	if len(p.added) == 0 && len(p.groups) == 0 {
		p.open = false // nothing reached the coordinator: nothing to end
		return nil
	}
	err := p.call(ctx, "end transaction", func(ctx context.Context, tc tapesv1.TransactionServiceClient) error {
		_, err := tc.EndTxn(ctx, &tapesv1.EndTxnRequest{TransactionalId: p.id, ProducerId: p.ProducerID, ProducerEpoch: p.Epoch, Commit: commit})
		return err
	})
	if err == nil {
		p.open = false
	}
	return err
}
