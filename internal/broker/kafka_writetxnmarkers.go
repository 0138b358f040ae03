package broker

import (
	"context"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/kafkawire"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/replication"
)

// Kafka's WriteTxnMarkers (key 27): the transaction coordinator (on any
// broker) asks the leader of each partition of a transaction to write the
// commit or abort marker there (replication.Replica.WriteMarker). Served
// on the Kafka listener like every client API; tapes has no ACLs
// (PLAINTEXT), so nothing restricts it to brokers. See ARCHITECTURE.md,
// "Transactions inside the partitions".

// WriteTxnMarkers versions served: v0 and v1 (flexible). v2 adds the
// transaction version (KIP-890 transactions v2), not served.
const (
	kafkaWriteTxnMarkersMin = 0
	kafkaWriteTxnMarkersMax = 1
)

// registerKafkaWriteTxnMarkers registers WriteTxnMarkers (ServeKafka).
func (b *Broker) registerKafkaWriteTxnMarkers(srv *kafkawire.Server) {
	srv.Register(kmsg.WriteTxnMarkers.Int16(), kafkaWriteTxnMarkersMin, kafkaWriteTxnMarkersMax, b.kafkaWriteTxnMarkers)
}

// kafkaWriteTxnMarkers answers WriteTxnMarkers. Every partition of every
// marker is written concurrently, in a Later (each waits for its marker to
// commit with acks=all, up to defaultProduceTimeout: REQUEST_TIMED_OUT
// then); each partition answers on its own: 0 once its marker committed,
// UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER (no local replica, not
// the ready leader, the broker not serving yet: the coordinator retries at
// the leader), INVALID_PRODUCER_EPOCH (an epoch older than the producer's
// in that partition), NOT_ENOUGH_REPLICAS(_AFTER_APPEND), or the error's
// own Kafka name.
func (b *Broker) kafkaWriteTxnMarkers(ctx context.Context, r *kafkawire.Request) kafkawire.Reply {
	req := r.Msg.(*kmsg.WriteTxnMarkersRequest)
	resp := req.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
	type job struct {
		m, t, p int // indexes into resp
		topic   string
		marker  replication.Marker
	}
	var jobs []job
	for i, m := range req.Markers {
		rm := kmsg.NewWriteTxnMarkersResponseMarker()
		rm.ProducerID = m.ProducerID
		for j, t := range m.Topics {
			rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
			rt.Topic = t.Topic
			for k, p := range t.Partitions {
				rp := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
				rp.Partition = p
				rt.Partitions = append(rt.Partitions, rp)
				jobs = append(jobs, job{m: i, t: j, p: k, topic: t.Topic, marker: replication.Marker{
					ProducerID: m.ProducerID, ProducerEpoch: m.ProducerEpoch, Commit: m.Committed, CoordinatorEpoch: m.CoordinatorEpoch}})
			}
			rm.Topics = append(rm.Topics, rt)
		}
		resp.Markers = append(resp.Markers, rm)
	}
	notReady := b.notReady()
	return kafkawire.Later(func() kafkawire.Reply {
		wctx, cancel := context.WithTimeout(ctx, defaultProduceTimeout)
		defer cancel()
		a := &api{b: b}
		var wg sync.WaitGroup
		for _, j := range jobs {
			rp := &resp.Markers[j.m].Topics[j.t].Partitions[j.p]
			wg.Go(func() {
				rp.ErrorCode = kafkawire.ErrorCode(b.writeTxnMarker(wctx, a, notReady, j.topic, rp.Partition, j.marker))
			})
		}
		wg.Wait()
		return kafkawire.Respond(resp)
	})
}

// writeTxnMarker writes one partition's marker; nil once it committed.
func (b *Broker) writeTxnMarker(ctx context.Context, a *api, notReady, topic string, partition int32, m replication.Marker) error {
	if notReady != "" {
		return kerr.NotLeader(-1, "", -1, "%s", notReady)
	}
	r, err := a.leaderReplica(topic, partition)
	if err != nil {
		return err
	}
	_, err = r.WriteMarker(ctx, m)
	if kerr.Is(err, kerr.LeaderNotAvailable) {
		// Just elected and catching up: Kafka's coordinator retries
		// NOT_LEADER_OR_FOLLOWER, not this one.
		err = kerr.NotLeader(-1, "", -1, "%v", err)
	}
	if err != nil {
		b.log.Warn("transaction marker not written", "topic", topic, "partition", partition, "producer_id", m.ProducerID,
			"producer_epoch", m.ProducerEpoch, "commit", m.Commit, "err", err)
	}
	return err
}
