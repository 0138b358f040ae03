package broker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/kafkawire"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/replication"
	"github.com/tapes-dev/tapes/internal/storage"
)

// Kafka's Fetch (key 1) through the same replicas as the gRPC Fetch: the
// ready leader serves committed batches below its high watermark
// (replication.Replica.FetchBatches), whole, as Kafka record batches. See
// ARCHITECTURE.md "Kafka's wire protocol", "Fetch".

// Fetch versions served: v4 (KIP-896's minimum, Kafka 4.0's) to v12 (v13
// names topics by id).
const (
	kafkaFetchMin = 4
	kafkaFetchMax = 12
)

// Fetch session epochs (KIP-227): a request with either is a full fetch;
// any other is incremental, in a session this broker never creates.
const (
	fetchInitialEpoch = 0
	fetchFinalEpoch   = -1
)

// registerKafkaFetch registers Fetch on the Kafka listener (ServeKafka).
func (b *Broker) registerKafkaFetch(srv *kafkawire.Server) {
	srv.Register(kmsg.Fetch.Int16(), kafkaFetchMin, kafkaFetchMax, b.kafkaFetch)
}

// fetchPart is one partition of a Fetch request.
type fetchPart struct {
	topic     string
	partition int32
	offset    int64
	maxBytes  int   // partition_max_bytes, at least 0
	epoch     int32 // current_leader_epoch (v9+); -1: not checked
	// isolation is the request's isolation level: read_committed reads
	// below the last stable offset only.
	isolation replication.IsolationLevel
	// r is the local replica; nil when lookupErr says why there is none.
	r         *replication.Replica
	lookupErr error
}

// fetchReader reads one partition: (*Replica).FetchBatches for the broker,
// a fake in tests. It must not block beyond disk reads.
type fetchReader func(p *fetchPart, maxBytes int, minOne bool) (replication.BatchFetch, error)

func replicaRead(p *fetchPart, maxBytes int, minOne bool) (replication.BatchFetch, error) {
	return p.r.FetchBatches(p.offset, maxBytes, minOne, p.isolation)
}

// kafkaFetch answers Fetch. Called on the connection's request goroutine:
// it resolves the partitions and reads them once (disk reads, no wait);
// when that answer must wait (max_wait_ms > 0, fewer than min_bytes, no
// partition in error), the wait goes to Later, one goroutine for the whole
// request, woken by a change of any of its partitions (replication.Watch),
// and ends at max_wait_ms (capped at maxFetchWait), when ctx is done (the
// connection or the server closing), or early when min_bytes are there or
// a partition answers an error (it lost leadership, say).
//
// Fetch sessions (v7+) are answered as a Kafka broker with no session cache
// slots does: a full fetch (session epoch 0 or -1) gets session id 0, so
// the client stays sessionless, and its forgotten topics are ignored (they
// name partitions to drop from a session there is not); an incremental
// fetch gets FETCH_SESSION_ID_NOT_FOUND, after which clients fetch in full.
func (b *Broker) kafkaFetch(ctx context.Context, r *kafkawire.Request) kafkawire.Reply {
	req := r.Msg.(*kmsg.FetchRequest)
	if resp := fetchSessionError(req); resp != nil {
		return kafkawire.Respond(resp)
	}
	parts := b.fetchParts(req)
	var replicas []*replication.Replica
	seen := map[*replication.Replica]bool{}
	for i := range parts {
		if rp := parts[i].r; rp != nil && !seen[rp] {
			seen[rp] = true
			replicas = append(replicas, rp)
		}
	}
	wait := min(time.Duration(req.MaxWaitMillis)*time.Millisecond, maxFetchWait)
	w := replication.Watch(replicas) // before the read: no change after it is missed
	a := fetchRound(req, parts, replicaRead)
	if wait <= 0 || len(parts) == 0 || a.done(req.MinBytes) {
		return b.answerKafkaFetch(a)
	}
	return kafkawire.Later(func() kafkawire.Reply {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		for w.Wait(ctx, timer.C) {
			w = replication.Watch(replicas)
			if a = fetchRound(req, parts, replicaRead); a.done(req.MinBytes) {
				return b.answerKafkaFetch(a)
			}
		}
		// Timed out or closing: answer what there is now, as Kafka
		// completes a delayed fetch by reading again.
		return b.answerKafkaFetch(fetchRound(req, parts, replicaRead))
	})
}

// kafkaIsolation is a request's isolation_level: 1 read_committed, any
// other read_uncommitted (Kafka's IsolationLevel.forId refuses others; the
// request decoded, so it is 0 or 1 from every client).
func kafkaIsolation(level int8) replication.IsolationLevel {
	if level == int8(replication.ReadCommitted) {
		return replication.ReadCommitted
	}
	return replication.ReadUncommitted
}

// fetchSessionError is the answer to an incremental fetch (v7+, a session
// epoch other than 0 and -1): FETCH_SESSION_ID_NOT_FOUND, no partitions,
// session id 0; nil for a full fetch.
func fetchSessionError(req *kmsg.FetchRequest) *kmsg.FetchResponse {
	if req.Version < 7 || req.SessionEpoch == fetchInitialEpoch || req.SessionEpoch == fetchFinalEpoch {
		return nil
	}
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	resp.SessionID = 0
	resp.ErrorCode = kafkawire.ErrorCode(kerr.New(kerr.FetchSessionIDNotFound,
		"fetch session %d (epoch %d): this broker keeps no fetch sessions; fetch in full", req.SessionID, req.SessionEpoch))
	return resp
}

// fetchParts resolves the request's partitions, in request order: a topic or
// partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION, one this
// broker holds no replica of NOT_LEADER_OR_FOLLOWER (with the leader the
// metadata names), every partition of a broker that does not serve clients
// yet NOT_LEADER_OR_FOLLOWER (retriable, and an error every client handles
// by refreshing metadata: Apache Kafka's Java consumer throws on
// BROKER_NOT_AVAILABLE or LEADER_NOT_AVAILABLE in a fetch).
func (b *Broker) fetchParts(req *kmsg.FetchRequest) []fetchPart {
	notReady := b.notReady()
	a := &api{b: b}
	var parts []fetchPart
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			fp := fetchPart{topic: t.Topic, partition: p.Partition, offset: p.FetchOffset,
				maxBytes: max(int(p.PartitionMaxBytes), 0), epoch: -1, isolation: kafkaIsolation(req.IsolationLevel)}
			if req.Version >= 9 {
				fp.epoch = p.CurrentLeaderEpoch
			}
			if notReady != "" {
				fp.lookupErr = kerr.NotLeader(-1, "", -1, "%s", notReady)
			} else {
				fp.r, fp.lookupErr = a.leaderReplica(t.Topic, p.Partition)
			}
			parts = append(parts, fp)
		}
	}
	return parts
}

// fetchRound reads every partition once, in request order, and builds the
// response (its version is set by the server). The response's max_bytes
// (v3+) bounds the records of all partitions together, each partition's
// partition_max_bytes its own; as in Kafka (KIP-74) the first batch of the
// first partition with records is returned whole even when larger than
// both, so a consumer always progresses, and later partitions get what
// room is left (their high watermark still).
func fetchRound(req *kmsg.FetchRequest, parts []fetchPart, read fetchReader) fetchAnswer {
	a := fetchAnswer{resp: req.ResponseKind().(*kmsg.FetchResponse)}
	a.resp.SessionID = 0
	room := max(int(req.MaxBytes), 0)
	minOne := true
	i := 0
	for _, t := range req.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = t.Topic
		for range t.Partitions {
			p := &parts[i]
			i++
			rp, err := fetchPartition(req, p, min(p.maxBytes, room), minOne, read)
			a.codes = append(a.codes, kerr.CodeOf(err))
			if err != nil {
				a.failed = true
			}
			if size := len(rp.RecordBatches); size > 0 {
				minOne = false
				room = max(room-size, 0)
				a.bytes += size
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		a.resp.Topics = append(a.resp.Topics, rt)
	}
	return a
}

// fetchAnswer is one fetchRound.
type fetchAnswer struct {
	resp   *kmsg.FetchResponse
	bytes  int         // of records, all partitions
	failed bool        // some partition answered an error
	codes  []kerr.Code // each partition's error name ("" = none), in request order
}

// done: the answer goes out now rather than after a wait.
func (a fetchAnswer) done(minBytes int32) bool { return a.failed || a.bytes >= int(minBytes) }

// fetchPartition reads one partition within limit bytes of records (the
// first batch however large when minOne) and answers it, with the error
// it answers.
func fetchPartition(req *kmsg.FetchRequest, p *fetchPart, limit int, minOne bool, read fetchReader) (kmsg.FetchResponseTopicPartition, error) {
	if p.lookupErr != nil {
		return fetchError(p.partition, p.lookupErr), p.lookupErr
	}
	res, err := read(p, limit, minOne)
	err = fetchLeaderEpoch(p, res, err)
	if kerr.Is(err, kerr.LeaderNotAvailable) {
		// A leader just elected, catching up: retriable, and what every
		// client handles (the Java consumer throws on LEADER_NOT_AVAILABLE).
		err = kerr.NotLeader(-1, "", -1, "%v", err)
	}
	if err != nil {
		return fetchError(p.partition, err), err
	}
	size := 0
	for _, sb := range res.Batches {
		size += len(sb.Batch) + kafkaBatchGrowth + sb.Batch.Count()
	}
	records, err := appendKafkaBatches(make([]byte, 0, size), res.Batches, limit, minOne)
	if err != nil {
		err = kerr.New(kerr.KafkaStorageError, "%s-%d at %d: %v", p.topic, p.partition, p.offset, err)
		return fetchError(p.partition, err), err
	}
	rp := kmsg.NewFetchResponseTopicPartition()
	rp.Partition = p.partition
	rp.HighWatermark = res.HighWatermark
	rp.LastStableOffset = res.LastStable
	rp.LogStartOffset = res.LogStart
	// Kafka's answer: read_committed, the aborted transactions among the
	// batches returned (clients drop their records); read_uncommitted, null.
	rp.AbortedTransactions = nil
	if p.isolation == replication.ReadCommitted {
		rp.AbortedTransactions = make([]kmsg.FetchResponseTopicPartitionAbortedTransaction, 0, len(res.Aborted))
		for _, at := range res.Aborted {
			kat := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
			kat.ProducerID, kat.FirstOffset = at.ProducerID, at.FirstOffset
			rp.AbortedTransactions = append(rp.AbortedTransactions, kat)
		}
	}
	rp.PreferredReadReplica = -1
	rp.RecordBatches = records
	return rp, nil
}

// kafkaBatchGrowth bounds how much larger a stored batch's header becomes
// as Kafka's (61 bytes for 25 or 45), beside one byte per record (each
// record's attributes byte; a length varint may grow by one more).
const kafkaBatchGrowth = 36

// fetchError is a partition's answer with err: Kafka's offsets unknown (-1),
// zero-length records (not null), and for NOT_LEADER_OR_FOLLOWER and
// FENCED_LEADER_EPOCH the current leader (v12+ tagged field) when the
// error knows it (a leader id and its term).
func fetchError(partition int32, err error) kmsg.FetchResponseTopicPartition {
	rp := kmsg.NewFetchResponseTopicPartition()
	rp.Partition = partition
	rp.ErrorCode = kafkawire.ErrorCode(err)
	rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
	rp.AbortedTransactions = nil
	rp.PreferredReadReplica = -1
	rp.RecordBatches = []byte{}
	if ke, ok := kerr.As(err); ok && (ke.Code() == kerr.NotLeaderOrFollower || ke.Code() == kerr.FencedLeaderEpoch) &&
		ke.Detail.LeaderId >= 0 && ke.Detail.LeaderEpoch > 0 {
		rp.CurrentLeader.LeaderID = ke.Detail.LeaderId
		rp.CurrentLeader.LeaderEpoch = kafkaEpoch(ke.Detail.LeaderEpoch)
	}
	return rp
}

// fetchLeaderEpoch applies the request's current_leader_epoch (v9+) to what
// the replica answered, as Kafka checks it before leadership: -1 checks
// nothing; on the leader checkLeaderEpoch against its term (older
// FENCED_LEADER_EPOCH: the client knows a leader that is gone; newer
// UNKNOWN_LEADER_EPOCH: this broker is behind); on a replica that is not
// the leader the same against the term its Raft knows, and
// NOT_LEADER_OR_FOLLOWER when equal. The epoch is the Raft term
// (kafkaEpoch). A partition without a local replica is not checked (Kafka
// does not either).
func fetchLeaderEpoch(p *fetchPart, res replication.BatchFetch, err error) error {
	if p.epoch == -1 {
		return err
	}
	local := kafkaEpoch(int64(res.Term))
	notLeader, _ := kerr.As(err)
	if err != nil {
		if notLeader == nil || notLeader.Code() != kerr.NotLeaderOrFollower || notLeader.Detail.LeaderEpoch <= 0 {
			return err
		}
		local = kafkaEpoch(notLeader.Detail.LeaderEpoch)
	}
	if e := checkLeaderEpoch(p.topic, p.partition, p.epoch, local); e != nil {
		if ke, _ := kerr.As(e); ke.Code() == kerr.FencedLeaderEpoch && notLeader != nil {
			// The current leader, for the answer (v12).
			ke.Detail.LeaderId, ke.Detail.LeaderEpoch = notLeader.Detail.LeaderId, notLeader.Detail.LeaderEpoch
		}
		return e
	}
	return err
}

// appendKafkaBatches appends bs as Kafka record batches while their sizes
// in total stay within limit (the first however large when minOne). A
// stored batch of version 1 or 2 converted is larger than as stored (Kafka's
// 61-byte header, an attributes byte per record), so the storage read,
// bounded by stored sizes, returns at least the batches that fit here.
func appendKafkaBatches(dst []byte, bs []storage.StoredBatch, limit int, minOne bool) ([]byte, error) {
	start := len(dst)
	for i, sb := range bs {
		before := len(dst)
		// A batch stored as Kafka's (storage version 3) goes out verbatim,
		// the producer's bytes; versions 1 and 2 are converted.
		var err error
		if dst, err = sb.Batch.AppendKafka(dst, sb.BaseOffset); err != nil {
			if i > 0 {
				return dst[:before], nil // what came before; the next fetch reports it
			}
			return dst[:start], err
		}
		if len(dst)-start > limit && !(i == 0 && minOne) {
			return dst[:before], nil
		}
	}
	return dst, nil
}

// answerKafkaFetch counts each partition answered as one fetch of
// tapes_fetch_requests_total, by its Kafka error name, as the gRPC Fetch
// counts its one partition, and answers.
func (b *Broker) answerKafkaFetch(a fetchAnswer) kafkawire.Reply {
	for _, c := range a.codes {
		b.metrics.fetch.WithLabelValues(string(c)).Inc()
	}
	return kafkawire.Respond(a.resp)
}
