package broker

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/kafkawire"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/recordbatch"
	"github.com/tapes-dev/tapes/internal/replication"
	"github.com/tapes-dev/tapes/internal/storage"
)

// Kafka's Produce (key 0) and InitProducerId (key 22, kafka_initproducerid.go)
// on the same replicas as gRPC's Produce: the batch as the producer sent it
// becomes a storage batch of format version 3, and replication.Replica's
// Propose decides acks, min.insync.replicas, max.message.bytes, leadership
// and the idempotent producer's sequence exactly as for gRPC.

// Produce versions served: v0-v11. v0-v2 are advertised as Kafka 4.0 does
// (librdkafka enables its features from the range); their magic 0/1 batches
// are refused with INVALID_RECORD. v12+ belongs to transactions v2.
const (
	kafkaProduceMin = 0
	kafkaProduceMax = 11
	// kafkaCurrentLeaderSince: Produce v10 answers NOT_LEADER_OR_FOLLOWER
	// with the current leader and its endpoint (KIP-951).
	kafkaCurrentLeaderSince = 10
)

// registerKafkaProduce registers Produce and InitProducerId (ServeKafka
// calls it once, before serving).
func (b *Broker) registerKafkaProduce(srv *kafkawire.Server) {
	srv.Register(kmsg.Produce.Int16(), kafkaProduceMin, kafkaProduceMax, b.kafkaProduce)
	srv.Register(kmsg.InitProducerID.Int16(), kafkaInitProducerIDMin, kafkaInitProducerIDMax, b.kafkaInitProducerID)
}

// kafkaPartitionResult is what one partition of a Produce answers.
type kafkaPartitionResult struct {
	res     replication.ProduceResult
	err     error
	records int // in the batch, for the produce metrics
}

// kafkaProduce answers Produce. On the connection's request goroutine it
// validates every partition's batch and takes the partition's turn on the
// connection (kafkaTurns); then each partition's batch is proposed to its
// Raft group on a goroutine of its own once the connection's previous
// batch to that partition has been proposed, so a pipelining producer's
// batches enter each log in the order it sent them, while the request
// goroutine goes on to the next request and the partitions of a request
// are proposed side by side. (Proposing on the request goroutine, as
// before, held a connection to one Raft hand-over at a time: Propose
// blocks until the group's leader loop takes the entry, which it does
// between log writes; Kafka's producer sends a broker's partitions over
// one connection, gRPC one call per batch; ARCHITECTURE.md "Where the time
// goes".) The acks are awaited in a Later. A Produce with acks=0 gets no
// answer; as Kafka does, one that a partition refused closes the
// connection instead, so that the client, which reads no answer,
// refreshes its metadata and reconnects (a producer sending to a broker
// that no longer leads would otherwise go on losing every batch). Each
// partition counts in the broker's produce metrics as a gRPC Produce.
func (b *Broker) kafkaProduce(ctx context.Context, r *kafkawire.Request) kafkawire.Reply {
	a := &api{b: b}
	prepare := func(req *kmsg.ProduceRequest, topic string, p kmsg.ProduceRequestTopicPartition) (kafkaProposal, int, error) {
		return b.kafkaPreparePartition(a, req, topic, p)
	}
	return produceKafka(ctx, r, prepare, b.observeKafkaProduce, b.kafkaEndpoints)
}

// kafkaProposal proposes a validated batch to its partition (Propose).
type kafkaProposal func(ctx context.Context) (replication.ProduceWait, error)

// produceKafka is kafkaProduce with its parts given: prepare validates one
// partition's batch (on the request goroutine), observe counts the
// answered partitions, endpoints names leaders (kafkaProduceResponse).
func produceKafka(ctx context.Context, r *kafkawire.Request,
	prepare func(req *kmsg.ProduceRequest, topic string, p kmsg.ProduceRequestTopicPartition) (kafkaProposal, int, error),
	observe func(acks int16, start time.Time, results [][]kafkaPartitionResult),
	endpoints func(ids map[int32]bool) []kmsg.ProduceResponseBroker) kafkawire.Reply {
	req := r.Msg.(*kmsg.ProduceRequest)
	start := time.Now()
	timeout := defaultProduceTimeout
	if req.TimeoutMillis > 0 {
		timeout = time.Duration(req.TimeoutMillis) * time.Millisecond
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	// A batch read from the connection is proposed even when the client
	// closes the connection right after sending it (kcat -X acks=0 does:
	// Kafka appends what it has read). The proposal runs on its own
	// goroutine, which may start after the reader has seen the close, so
	// it must not inherit the connection's cancellation, only the deadline;
	// waiting for the outcome still ends with the connection.
	propCtx, propCancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	turns := r.Conn.Local(kafkaTurnsKey{}, func() any { return &kafkaTurns{last: map[kafkaTP]chan struct{}{}} }).(*kafkaTurns)
	results := make([][]kafkaPartitionResult, len(req.Topics))
	var wg sync.WaitGroup
	for i, t := range req.Topics {
		results[i] = make([]kafkaPartitionResult, len(t.Partitions))
		for j, p := range t.Partitions {
			propose, records, err := prepare(req, t.Topic, p)
			if err != nil {
				results[i][j] = kafkaPartitionResult{err: err}
				continue
			}
			tp := kafkaTP{t.Topic, p.Partition}
			prev, mine := turns.take(tp)
			wg.Go(func() {
				results[i][j] = proposeInTurn(propCtx, pctx, turns, tp, prev, mine, propose)
				results[i][j].records = records
			})
		}
	}
	finish := func() {
		wg.Wait()
		cancel()
		propCancel()
		observe(req.Acks, start, results)
	}
	if req.Acks == 0 {
		return kafkawire.Later(func() kafkawire.Reply {
			finish() // acks=0: each wait returns at once
			for _, rs := range results {
				for _, pr := range rs {
					if pr.err != nil {
						return kafkawire.Close(pr.err)
					}
				}
			}
			return kafkawire.NoResponse()
		})
	}
	return kafkawire.Later(func() kafkawire.Reply {
		finish()
		return kafkawire.Respond(kafkaProduceResponse(req, results, endpoints))
	})
}

// proposeInTurn waits for the connection's previous proposal to tp (prev),
// proposes (bounded by ctx, which a closed connection does not cancel),
// hands the turn on (mine) and waits for the outcome (bounded by waitCtx,
// done with the connection). A panic
// in Propose or its wait is this partition's UNKNOWN_SERVER_ERROR (the
// goroutine is not the handler's, whose panics the server catches).
func proposeInTurn(ctx, waitCtx context.Context, turns *kafkaTurns, tp kafkaTP, prev <-chan struct{}, mine chan struct{}, propose kafkaProposal) (pr kafkaPartitionResult) {
	handed := false
	defer func() {
		if !handed {
			turns.done(tp, mine)
		}
		if p := recover(); p != nil {
			pr = kafkaPartitionResult{err: kerr.New(kerr.UnknownServerError, "produce to %s-%d panicked: %v", tp.topic, tp.partition, p)}
		}
	}()
	<-prev // bounded: Propose returns within its ctx's deadline
	if err := ctx.Err(); err != nil {
		return kafkaPartitionResult{err: kerr.New(kerr.RequestTimedOut, "produce to %s-%d: the connection's previous batch to it took the request's time: %v", tp.topic, tp.partition, err)}
	}
	wait, err := propose(ctx)
	turns.done(tp, mine)
	handed = true
	if err != nil {
		return kafkaPartitionResult{err: err}
	}
	res, err := wait(waitCtx)
	return kafkaPartitionResult{res: res, err: err}
}

// kafkaTP names a partition.
type kafkaTP struct {
	topic     string
	partition int32
}

// kafkaTurnsKey is the kafkawire.ConnInfo.Local key of a connection's
// kafkaTurns.
type kafkaTurnsKey struct{}

// kafkaTurns orders one connection's proposals per partition: each batch
// takes a turn (on the request goroutine, in request order) and is
// proposed once the batch before it on the connection, to the same
// partition, has been.
type kafkaTurns struct {
	mu   sync.Mutex
	last map[kafkaTP]chan struct{} // the latest turn's channel, closed when its batch is proposed
}

// take returns the previous turn's channel (closed when none is pending)
// and this turn's, to close with done.
func (q *kafkaTurns) take(tp kafkaTP) (prev <-chan struct{}, mine chan struct{}) {
	mine = make(chan struct{})
	q.mu.Lock()
	defer q.mu.Unlock()
	prev = q.last[tp]
	if prev == nil {
		prev = closedTurn
	}
	q.last[tp] = mine
	return prev, mine
}

// done ends a turn: the next batch to tp may be proposed; the partition is
// forgotten when no later turn was taken.
func (q *kafkaTurns) done(tp kafkaTP, mine chan struct{}) {
	close(mine)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.last[tp] == mine {
		delete(q.last, tp)
	}
}

// closedTurn is the previous turn of a partition with none pending.
var closedTurn = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// observeKafkaProduce counts each partition of an answered Produce.
func (b *Broker) observeKafkaProduce(acks int16, start time.Time, results [][]kafkaPartitionResult) {
	for _, rs := range results {
		for _, pr := range rs {
			b.metrics.observeProduce(int32(acks), pr.records, start, pr.err)
		}
	}
}

// kafkaPreparePartition validates one partition's batch and returns its
// proposal and record count, or the error that refused it.
func (b *Broker) kafkaPreparePartition(a *api, req *kmsg.ProduceRequest, topic string, p kmsg.ProduceRequestTopicPartition) (kafkaProposal, int, error) {
	r, err := a.leaderReplica(topic, p.Partition)
	if err != nil {
		return nil, 0, err
	}
	info, err := recordbatch.Validate(p.Records, req.Version)
	if err != nil {
		return nil, 0, err
	}
	// A transactional batch opens (or continues) its producer's transaction
	// in the partition (replication's producer state); the partition does
	// not check that the coordinator added it (KIP-890 is not served).
	if info.Transactional && info.ProducerID < 0 {
		return nil, 0, kerr.New(kerr.InvalidRecord, "transactional record batch to %s-%d without a producer id", topic, p.Partition)
	}
	// As Kafka's log does before an append: a CreateTime batch with its
	// records' largest timestamp (the request's buffer is ours to change).
	recordbatch.SetMaxTimestamp(p.Records, info.MaxTimestamp)
	batch, err := storage.WrapKafka(p.Records)
	if err != nil {
		return nil, 0, kerr.New(kerr.CorruptMessage, "%v", err)
	}
	acks := int(req.Acks)
	return func(ctx context.Context) (replication.ProduceWait, error) { return r.Propose(ctx, acks, batch) }, int(info.Records), nil
}

// kafkaProduceResponse builds the answer from each partition's outcome, as
// Kafka fills it: on success the base offset, log_append_time -1 (tapes
// keeps CreateTime) and the log start offset; on an error -1 for all three
// and, from v8, the error's text; from v10, for NOT_LEADER_OR_FOLLOWER, the
// current leader and epoch when known, and the endpoints of those leaders
// (endpoints: Broker.kafkaEndpoints).
func kafkaProduceResponse(req *kmsg.ProduceRequest, results [][]kafkaPartitionResult, endpoints func(ids map[int32]bool) []kmsg.ProduceResponseBroker) *kmsg.ProduceResponse {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	leaders := map[int32]bool{}
	for i, t := range req.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = t.Topic
		for j, p := range t.Partitions {
			rp := kafkaProducePartition(p.Partition, results[i][j], req.Version)
			if rp.CurrentLeader.LeaderID >= 0 {
				leaders[rp.CurrentLeader.LeaderID] = true
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if len(leaders) == 0 {
		return resp
	}
	// A leader is named only with its endpoint, as Kafka does; one without
	// a Kafka address is unknown to Kafka clients (-1: they ask Metadata).
	resp.Brokers = endpoints(leaders)
	listed := map[int32]bool{}
	for _, kb := range resp.Brokers {
		listed[kb.NodeID] = true
	}
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			if cl := &resp.Topics[i].Partitions[j].CurrentLeader; cl.LeaderID >= 0 && !listed[cl.LeaderID] {
				cl.LeaderID, cl.LeaderEpoch = -1, -1
			}
		}
	}
	return resp
}

// kafkaProducePartition is one partition's answer.
func kafkaProducePartition(partition int32, pr kafkaPartitionResult, version int16) kmsg.ProduceResponseTopicPartition {
	rp := kmsg.NewProduceResponseTopicPartition()
	rp.Partition = partition
	rp.LogAppendTime = -1
	rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = -1, -1
	if pr.err == nil {
		rp.BaseOffset, rp.LogStartOffset = pr.res.BaseOffset, pr.res.LogStart
		return rp
	}
	rp.ErrorCode = kafkawire.ErrorCode(pr.err)
	rp.BaseOffset, rp.LogStartOffset = -1, -1
	if version >= 8 {
		rp.ErrorMessage = kmsg.StringPtr(pr.err.Error())
	}
	if ke, ok := kerr.As(pr.err); ok && ke.Code() == kerr.NotLeaderOrFollower && version >= kafkaCurrentLeaderSince {
		if id := ke.Detail.LeaderId; id >= 0 {
			rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = id, kafkaEpoch(ke.Detail.LeaderEpoch)
		}
	}
	return rp
}

// kafkaEndpoints lists the Kafka endpoints of the given brokers that are
// registered with a Kafka address; a leader without one is left out (the
// client then asks Metadata).
func (b *Broker) kafkaEndpoints(ids map[int32]bool) []kmsg.ProduceResponseBroker {
	var out []kmsg.ProduceResponseBroker
	b.meta.View(func(s *metadata.State) {
		for _, id := range s.BrokerIDs() {
			if !ids[int32(id)] {
				continue
			}
			host, port, ok := splitKafkaAddress(s.Brokers[id].KafkaAddress)
			if !ok {
				continue
			}
			kb := kmsg.NewProduceResponseBroker()
			kb.NodeID, kb.Host, kb.Port = int32(id), host, port
			out = append(out, kb)
		}
	})
	return out
}
