package broker

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	fkerr "github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/group"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/txn"
)

// The transaction coordinator's broker side (issue 13 point 1): its
// __transaction_state replicas, the topic's creation, the coordinator
// lookup, and the markers sent with Kafka's WriteTxnMarkers to each
// partition's leader. The Kafka APIs are in kafka_txn.go. ARCHITECTURE.md
// "Transactions: the coordinator".

const (
	// txnMarkersVersion is the WriteTxnMarkers version sent (v1, flexible;
	// what Kafka's coordinator sends).
	txnMarkersVersion = 1
	// txnMarkersTimeout bounds one attempt at one leader.
	txnMarkersTimeout = 10 * time.Second
)

// newTxnCoordinator makes the broker's transaction coordinator over its
// replicas of __transaction_state, with the broker's one producer id
// allocator (the idempotent InitProducerId's).
func (b *Broker) newTxnCoordinator() (*txn.Coordinator, error) {
	b.txnMarkers = &kafkaMarkers{b: b}
	return txn.New(txn.Config{
		BrokerID:        int32(b.cfg.ID),
		Partitions:      b.txnPartitions,
		Open:            b.txnLog,
		AllocProducerID: b.allocProducerID,
		Markers:         markersOf{b},
		MaxTimeout:      b.cfg.Transactions.MaxTimeout,
		Tick:            b.cfg.Transactions.AbortTimedOutInterval,
		CompactAfter:    b.cfg.Transactions.StateCompactAfter,
		IDExpiration:    b.cfg.Transactions.IDExpiration,
		Logger:          b.log.With("component", "txn-coordinator"),
	})
}

// markersOf hands the coordinator's markers to b.txnMarkers, which the
// broker's tests replace (setTxnMarkers) to stand in for partition leaders
// that do not serve WriteTxnMarkers.
type markersOf struct{ b *Broker }

func (m markersOf) WriteMarkers(ctx context.Context, mk txn.Marker) []error {
	m.b.mu.Lock()
	w := m.b.txnMarkers
	m.b.mu.Unlock()
	return w.WriteMarkers(ctx, mk)
}

// txnPartitions is the partition count of __transaction_state, 0 while it
// does not exist.
func (b *Broker) txnPartitions() int32 { return b.topicPartitionCount(txn.StateTopic) }

// txnLog returns this broker's replica of __transaction_state-p as a
// txn.Log (the adapter __consumer_offsets uses), nil when it hosts none.
func (b *Broker) txnLog(p int32) txn.Log { return b.localLog(txn.StateTopic, p) }

// topicPartitionCount is the partition count of an internal topic, 0 while
// it does not exist.
func (b *Broker) topicPartitionCount(topic string) int32 {
	var n int32
	b.meta.View(func(s *metadata.State) {
		if t := s.Topics[topic]; t != nil {
			n = int32(len(t.Partitions))
		}
	})
	return n
}

// localLog returns this broker's replica of an internal topic's partition p
// as the coordinators' Log (offsetsLog), nil when it hosts none.
func (b *Broker) localLog(topic string, p int32) group.Log {
	var id metadata.TopicID
	b.meta.View(func(s *metadata.State) {
		if t := s.Topics[topic]; t != nil {
			id = t.ID
		}
	})
	if r := b.replica(topic, id, p); r != nil {
		return offsetsLog{r}
	}
	return nil
}

// byTopic returns the topics of parts in order of first appearance and each
// topic's partitions in order (the shape of Kafka's topic lists).
func byTopic(parts []txn.TopicPartition) ([]string, map[string][]int32) {
	var topics []string
	of := map[string][]int32{}
	for _, tp := range parts {
		if _, ok := of[tp.Topic]; !ok {
			topics = append(topics, tp.Topic)
		}
		of[tp.Topic] = append(of[tp.Topic], tp.Partition)
	}
	return topics, of
}

// ensureTxnTopic creates __transaction_state through the controller (Kafka
// creates it on the first FindCoordinator of a transactional id or
// InitProducerId with one): --transaction-state-partitions partitions,
// replication factor min(--transaction-state-replication-factor, brokers),
// min.insync.replicas 2 from replication factor 3 on (Kafka's
// transaction.state.log.min.isr), kept forever. Several brokers may race
// to create it: TOPIC_ALREADY_EXISTS is success.
func (b *Broker) ensureTxnTopic(ctx context.Context) error {
	rf := min(b.cfg.Transactions.StateTopicReplicationFactor, len(b.peerIDs()))
	configs := map[string]string{
		metadata.ConfigRetentionMs:    "-1",
		metadata.ConfigRetentionBytes: "-1",
		metadata.ConfigSegmentBytes:   strconv.Itoa(offsetsTopicSegmentBytes),
	}
	if rf >= 3 {
		configs[metadata.ConfigMinInsyncReplicas] = "2"
	}
	spec := &tapesv1.TopicSpec{Name: txn.StateTopic, Partitions: b.cfg.Transactions.StateTopicPartitions, ReplicationFactor: int32(rf), Configs: configs}
	err := (&api{b: b}).createTopic(ctx, spec, nil, false)
	if err != nil && !kerr.Is(err, kerr.TopicAlreadyExists) {
		return err
	}
	return nil
}

// partitionLeader returns the leader of topic-p as this broker knows it
// (the controller's, or a newer one its own replica knows), and whether
// the partition exists.
func (b *Broker) partitionLeader(topic string, p int32) (metadata.BrokerID, bool) {
	var (
		ps     metadata.PartitionState
		id     metadata.TopicID
		exists bool
	)
	b.meta.View(func(s *metadata.State) {
		if t := s.Topics[topic]; t != nil && p >= 0 && int(p) < len(t.Partitions) {
			id, ps, exists = t.ID, t.Partitions[p], true
		}
	})
	if !exists {
		return -1, false
	}
	leader := ps.Leader
	if r := b.replica(topic, id, p); r != nil {
		if l, term, ok := r.KnownLeader(); ok && term > ps.Epoch {
			leader = l
		}
	}
	return leader, true
}

// findTxnCoordinator returns the coordinator of transactional id as a
// broker id and its Kafka HOST:PORT: the live leader of the id's
// __transaction_state partition, creating the topic first.
// COORDINATOR_NOT_AVAILABLE while there is none. It may block up to ctx.
func (b *Broker) findTxnCoordinator(ctx context.Context, id string) (int32, string, error) {
	if id == "" {
		return -1, "", kerr.New(kerr.InvalidRequest, "transactional id is empty")
	}
	if b.txnPartitions() == 0 {
		if err := b.ensureTxnTopic(ctx); err != nil {
			return -1, "", kerr.New(kerr.CoordinatorNotAvailable, "creating %s: %v", txn.StateTopic, err)
		}
	}
	n := b.txnPartitions()
	if n == 0 {
		return -1, "", kerr.New(kerr.CoordinatorNotAvailable, "%s is being created", txn.StateTopic)
	}
	p := txn.PartitionFor(id, n)
	leader, _ := b.partitionLeader(txn.StateTopic, p)
	if leader <= 0 || (leader != b.cfg.ID && !b.alive(leader)) {
		return -1, "", b.txnAnswered("FindCoordinator", id, kerr.New(kerr.CoordinatorNotAvailable, "%s-%d (transactional id %s) has no live leader yet (leader %d as broker %d knows it)", txn.StateTopic, p, id, leader, b.cfg.ID))
	}
	var addr string
	b.meta.View(func(s *metadata.State) { addr = s.Brokers[leader].KafkaAddress })
	return int32(leader), addr, nil
}

// kafkaMarkers writes markers with Kafka's WriteTxnMarkers (key 27, v1),
// one request per partition leader, over a connection of its own to that
// leader's Kafka listener (the address registered in the metadata). Its
// method is called from the coordinator's completion goroutines; each
// leader's request runs on its own goroutine and is bounded by
// txnMarkersTimeout. The coordinator retries what failed.
type kafkaMarkers struct{ b *Broker }

func (k *kafkaMarkers) WriteMarkers(ctx context.Context, m txn.Marker) []error {
	errs := make([]error, len(m.Partitions))
	byLeader := map[metadata.BrokerID][]int{}
	for i, tp := range m.Partitions {
		leader, exists := k.b.partitionLeader(tp.Topic, tp.Partition)
		switch {
		case !exists:
			errs[i] = fmt.Errorf("%s: %w", tp, txn.ErrPartitionGone)
		case leader <= 0:
			errs[i] = kerr.New(kerr.LeaderNotAvailable, "%s has no leader", tp)
		default:
			byLeader[leader] = append(byLeader[leader], i)
		}
	}
	var wg sync.WaitGroup
	for leader, idx := range byLeader {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k.writeAt(ctx, leader, m, idx, errs)
		}()
	}
	wg.Wait()
	return errs
}

// writeAt sends the partitions idx of m to leader and fills their errs.
func (k *kafkaMarkers) writeAt(ctx context.Context, leader metadata.BrokerID, m txn.Marker, idx []int, errs []error) {
	fail := func(err error) {
		for _, i := range idx {
			errs[i] = err
		}
	}
	var addr string
	k.b.meta.View(func(s *metadata.State) { addr = s.Brokers[leader].KafkaAddress })
	if addr == "" {
		fail(kerr.New(kerr.BrokerNotAvailable, "broker %d (leader of the partitions) has no Kafka listener", leader))
		return
	}
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	req.Version = txnMarkersVersion
	mk := kmsg.NewWriteTxnMarkersRequestMarker()
	mk.ProducerID, mk.ProducerEpoch, mk.Committed, mk.CoordinatorEpoch = m.ProducerID, m.ProducerEpoch, m.Commit, m.CoordinatorEpoch
	sub := make([]txn.TopicPartition, len(idx))
	for j, i := range idx {
		sub[j] = m.Partitions[i]
	}
	topics, parts := byTopic(sub)
	for _, topic := range topics {
		t := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
		t.Topic, t.Partitions = topic, parts[topic]
		mk.Topics = append(mk.Topics, t)
	}
	req.Markers = []kmsg.WriteTxnMarkersRequestMarker{mk}
	ctx, cancel := context.WithTimeout(ctx, txnMarkersTimeout)
	defer cancel()
	raw, err := kafkaRoundTrip(ctx, addr, req)
	if err != nil {
		fail(fmt.Errorf("WriteTxnMarkers to broker %d at %s: %w", leader, addr, err))
		return
	}
	resp := raw.(*kmsg.WriteTxnMarkersResponse)
	got := map[txn.TopicPartition]int16{}
	for _, rm := range resp.Markers {
		if rm.ProducerID != m.ProducerID {
			continue
		}
		for _, t := range rm.Topics {
			for _, p := range t.Partitions {
				got[txn.TopicPartition{Topic: t.Topic, Partition: p.Partition}] = p.ErrorCode
			}
		}
	}
	for _, i := range idx {
		tp := m.Partitions[i]
		code, ok := got[tp]
		switch {
		case !ok:
			errs[i] = kerr.New(kerr.UnknownServerError, "broker %d did not answer for %s", leader, tp)
		case code != 0:
			errs[i] = markerError(leader, tp, code)
		}
	}
}

// markerError is a partition's WriteTxnMarkers error code as a kerr error.
func markerError(leader metadata.BrokerID, tp txn.TopicPartition, code int16) error {
	name := kerr.UnknownServerError
	switch fe := fkerr.ErrorForCode(code); fe {
	case fkerr.NotLeaderForPartition:
		name = kerr.NotLeaderOrFollower
	default:
		if e, ok := fe.(*fkerr.Error); ok {
			name = kerr.Code(e.Message)
		}
	}
	return kerr.New(name, "marker on %s at broker %d: code %d", tp, leader, code)
}

// kafkaRoundTrip sends req on a new connection to addr and reads its
// response, within ctx. Called from marker goroutines; it blocks.
func kafkaRoundTrip(ctx context.Context, addr string, req kmsg.Request) (kmsg.Response, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	const corr = 1
	if _, err := c.Write(kmsg.NewRequestFormatter(kmsg.FormatterClientID("tapes-txn-coordinator")).AppendRequest(nil, req, corr)); err != nil {
		return nil, err
	}
	br := bufio.NewReader(c)
	var size [4]byte
	if _, err := io.ReadFull(br, size[:]); err != nil {
		return nil, fmt.Errorf("no answer (the broker closes a connection for an API it does not serve): %w", err)
	}
	n := binary.BigEndian.Uint32(size[:])
	if n < 4 || n > 16<<20 {
		return nil, fmt.Errorf("answer of %d bytes", n)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(br, buf); err != nil {
		return nil, err
	}
	if got := int32(binary.BigEndian.Uint32(buf)); got != corr {
		return nil, fmt.Errorf("correlation id %d, want %d", got, corr)
	}
	buf = buf[4:]
	if req.IsFlexible() {
		if len(buf) == 0 {
			return nil, fmt.Errorf("truncated response header")
		}
		buf = buf[1:] // no tagged fields in a response header
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(buf); err != nil {
		return nil, fmt.Errorf("decode %s v%d: %w", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	return resp, nil
}
