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

// kafkaProduce answers Produce. Called on the connection's request
// goroutine: it validates every partition's batch and proposes it to its
// partition's Raft group there, in request order (so a pipelining
// producer's batches enter each log in the order it sent them), then waits
// for the acks in a Later, every partition's wait on its own goroutine. A
// Produce with acks=0 gets no answer; as Kafka does, one that a partition
// refused closes the connection instead, so that the client, which reads
// no answer, refreshes its metadata and reconnects (a producer sending to a
// broker that no longer leads would otherwise go on losing every batch).
// Each partition counts in the broker's produce metrics as a gRPC Produce.
func (b *Broker) kafkaProduce(ctx context.Context, r *kafkawire.Request) kafkawire.Reply {
	req := r.Msg.(*kmsg.ProduceRequest)
	start := time.Now()
	timeout := defaultProduceTimeout
	if req.TimeoutMillis > 0 {
		timeout = time.Duration(req.TimeoutMillis) * time.Millisecond
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	a := &api{b: b}
	results := make([][]kafkaPartitionResult, len(req.Topics))
	waits := make([][]replication.ProduceWait, len(req.Topics))
	for i, t := range req.Topics {
		results[i] = make([]kafkaPartitionResult, len(t.Partitions))
		waits[i] = make([]replication.ProduceWait, len(t.Partitions))
		for j, p := range t.Partitions {
			waits[i][j], results[i][j].records, results[i][j].err = b.kafkaProposePartition(pctx, a, req, t.Topic, p)
		}
	}
	if req.Acks == 0 {
		waitAll(pctx, waits, results) // acks=0: each returns at once
		cancel()
		b.observeKafkaProduce(req.Acks, start, results)
		for _, rs := range results {
			for _, pr := range rs {
				if pr.err != nil {
					return kafkawire.Close(pr.err)
				}
			}
		}
		return kafkawire.NoResponse()
	}
	return kafkawire.Later(func() kafkawire.Reply {
		defer cancel()
		waitAll(pctx, waits, results)
		b.observeKafkaProduce(req.Acks, start, results)
		return kafkawire.Respond(kafkaProduceResponse(req, results, b.kafkaEndpoints))
	})
}

// observeKafkaProduce counts each partition of an answered Produce.
func (b *Broker) observeKafkaProduce(acks int16, start time.Time, results [][]kafkaPartitionResult) {
	for _, rs := range results {
		for _, pr := range rs {
			b.metrics.observeProduce(int32(acks), pr.records, start, pr.err)
		}
	}
}

// kafkaProposePartition validates one partition's batch and proposes it,
// returning the wait for its outcome and the batch's record count, or the
// error that refused it.
func (b *Broker) kafkaProposePartition(ctx context.Context, a *api, req *kmsg.ProduceRequest, topic string, p kmsg.ProduceRequestTopicPartition) (replication.ProduceWait, int, error) {
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
	wait, err := r.Propose(ctx, int(req.Acks), batch)
	return wait, int(info.Records), err
}

// waitAll runs the waits of the proposed partitions concurrently and puts
// their outcomes into results.
func waitAll(ctx context.Context, waits [][]replication.ProduceWait, results [][]kafkaPartitionResult) {
	var wg sync.WaitGroup
	for i := range waits {
		for j, wait := range waits[i] {
			if wait == nil {
				continue
			}
			wg.Go(func() {
				res, err := wait(ctx)
				results[i][j] = kafkaPartitionResult{res: res, err: err}
			})
		}
	}
	wg.Wait()
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
