package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"

	"github.com/twmb/franz-go/pkg/kmsg"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kafkawire"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// Kafka's wire protocol on this broker (issue 10): ServeKafka serves
// kafkawire with the APIs that are fully served, nothing else, so that
// ApiVersions advertises exactly those and clients fall back or fail cleanly
// for the rest: ApiVersions (kafkawire's own), Metadata, and what each
// registerKafka* call in ServeKafka adds, in its own file (ARCHITECTURE.md
// "Kafka's wire protocol").

// Metadata versions served: v0-v12 (v13 only adds a top-level error code).
const (
	kafkaMetadataMin = 0
	kafkaMetadataMax = 12
)

// ErrKafkaServing: ServeKafka was called twice or after Shutdown.
var ErrKafkaServing = errors.New("broker: Kafka listener already served or broker shut down")

// ServeKafka serves Kafka's protocol on lis until Shutdown, which closes it.
// It is called once, from its own goroutine (brokerd runs it beside Serve);
// it returns nil after Shutdown, or the listener's failure.
func (b *Broker) ServeKafka(lis net.Listener) error {
	b.mu.Lock()
	if b.kafka != nil {
		b.mu.Unlock()
		lis.Close()
		return ErrKafkaServing
	}
	select {
	case <-b.stop:
		b.mu.Unlock()
		lis.Close()
		return ErrKafkaServing
	default:
	}
	srv := kafkawire.NewServer(kafkawire.Config{Logf: func(format string, args ...any) {
		b.log.Debug("kafka: " + fmt.Sprintf(format, args...))
	}})
	srv.Register(kmsg.Metadata.Int16(), kafkaMetadataMin, kafkaMetadataMax, b.kafkaMetadata)
	b.registerKafkaGroups(srv)
	b.registerKafkaFetch(srv)
	b.registerKafkaProduce(srv)
	b.registerKafkaAdmin(srv)
	b.registerKafkaTxn(srv)
	b.registerKafkaWriteTxnMarkers(srv)
	b.registerKafkaTxnOffsetCommit(srv)
	b.kafka = srv
	b.mu.Unlock()
	b.log.Info("kafka listener serving", "listen", lis.Addr().String(), "advertise", b.cfg.KafkaAdvertise)
	err := srv.Serve(lis)
	if errors.Is(err, kafkawire.ErrServerClosed) {
		return nil
	}
	return err
}

// closeKafka stops the Kafka listener and its connections (Shutdown calls
// it first, so that no handler runs on a closing broker). It blocks until
// every connection goroutine has returned.
func (b *Broker) closeKafka() {
	b.mu.Lock()
	srv := b.kafka
	b.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// kafkaMetadata answers Metadata (key 3) from the same view as the gRPC
// Metadata (api.metadata). Called on the connection's request goroutine;
// it does not block.
//
// Topics: v0's empty list and v1+'s null ask for every topic; v1+'s empty
// list for none. allow_auto_topic_creation is ignored: tapes answers as
// Kafka with auto.create.topics.enable=false does, with
// UNKNOWN_TOPIC_OR_PARTITION. A broker that does not serve clients yet, or
// whose metadata may be stale (notReady, metadataStale), closes the
// connection: Metadata before v13 has no top-level error, and every Kafka
// client retries a closed connection's request on another broker, as
// tapes' clients do on gRPC's BROKER_NOT_AVAILABLE.
func (b *Broker) kafkaMetadata(_ context.Context, r *kafkawire.Request) kafkawire.Reply {
	req := r.Msg.(*kmsg.MetadataRequest)
	if why := b.notReady(); why != "" {
		return kafkawire.Close(kerr.New(kerr.BrokerNotAvailable, "%s", why))
	}
	var names []string
	// picks: the distinct entries of req.Topics in order, i for one asked
	// for by id only (v10+), -1-i for one asked for by name.
	var picks []int
	if req.Topics != nil && !(req.Version == 0 && len(req.Topics) == 0) {
		// Kafka answers each topic once, however often it is asked for.
		names = []string{}
		seenName, seenID := map[string]bool{}, map[[16]byte]bool{}
		for i, t := range req.Topics {
			switch {
			case t.Topic == nil && !seenID[t.TopicID]:
				seenID[t.TopicID] = true
				picks = append(picks, i)
			case t.Topic != nil && !seenName[*t.Topic]:
				seenName[*t.Topic] = true
				names = append(names, *t.Topic)
				picks = append(picks, -1-i)
			}
		}
	}
	a := &api{b: b}
	var view *tapesv1.MetadataResponse
	var err *kerr.Error
	if len(picks) > len(names) {
		// Some by id: resolve them from the whole view, then keep what
		// was asked, in request order.
		if view, err = a.metadata(nil); err == nil {
			view.Topics = pickTopics(view.Topics, req.Topics, picks)
		}
	} else {
		view, err = a.metadata(names)
	}
	if err != nil {
		return kafkawire.Close(err)
	}
	return kafkawire.Respond(kafkaMetadataResponse(view))
}

// pickTopics keeps, in request order, the topics of all (every topic) that
// asked names or identifies (picks as kafkaMetadata builds them: i for
// asked[i] by id, -1-i for asked[i] by name); an unknown name gets
// UNKNOWN_TOPIC_OR_PARTITION, an unknown id UNKNOWN_TOPIC_ID.
func pickTopics(all []*tapesv1.TopicMetadata, asked []kmsg.MetadataRequestTopic, picks []int) []*tapesv1.TopicMetadata {
	byName := map[string]*tapesv1.TopicMetadata{}
	byUUID := map[[16]byte]*tapesv1.TopicMetadata{}
	for _, t := range all {
		byName[t.Name] = t
		byUUID[kafkaTopicID(t.TopicId)] = t
	}
	var out []*tapesv1.TopicMetadata
	for _, i := range picks {
		if i < 0 {
			n := *asked[-1-i].Topic
			if t := byName[n]; t != nil {
				out = append(out, t)
			} else {
				out = append(out, &tapesv1.TopicMetadata{Name: n, Error: kerr.New(kerr.UnknownTopicOrPartition, "topic %q does not exist", n).Detail})
			}
			continue
		}
		id := asked[i].TopicID
		if t := byUUID[id]; t != nil && id != [16]byte{} {
			out = append(out, t)
		} else {
			out = append(out, &tapesv1.TopicMetadata{Error: kerr.New(kerr.UnknownTopicID, "no topic has id %x", id).Detail})
		}
	}
	return out
}

// kafkaTopicID is the Kafka topic UUID of a tapes topic id: the id
// big-endian in the last 8 bytes (tapes ids start at 1, so never the
// all-zero UUID Kafka reserves).
func kafkaTopicID(id uint64) [16]byte {
	var u [16]byte
	binary.BigEndian.PutUint64(u[8:], id)
	return u
}

// kafkaEpoch is a Raft term as Kafka's int32 leader epoch: -1 when unknown
// (0: no leader reported yet), capped at MaxInt32 so that it never goes
// backwards.
func kafkaEpoch(term int64) int32 {
	switch {
	case term <= 0:
		return -1
	case term > math.MaxInt32:
		return math.MaxInt32
	}
	return int32(term)
}

// kafkaMetadataResponse translates the broker's view into Kafka's answer
// (the server sets its version). Only live brokers with a Kafka address are
// listed, as Kafka lists its live brokers; a partition whose leader is not
// among them has leader -1 and LEADER_NOT_AVAILABLE, and replicas on
// brokers not live are its offline replicas.
func kafkaMetadataResponse(view *tapesv1.MetadataResponse) *kmsg.MetadataResponse {
	resp := kmsg.NewPtrMetadataResponse()
	resp.ControllerID = view.ControllerId
	listed := map[int32]bool{}
	for _, bi := range view.Brokers {
		host, port, ok := splitKafkaAddress(bi.KafkaAddress)
		if !bi.Alive || !ok {
			continue
		}
		kb := kmsg.NewMetadataResponseBroker()
		kb.NodeID, kb.Host, kb.Port = bi.Id, host, port
		resp.Brokers = append(resp.Brokers, kb)
		listed[bi.Id] = true
	}
	alive := map[int32]bool{}
	for _, bi := range view.Brokers {
		alive[bi.Id] = bi.Alive
	}
	for _, t := range view.Topics {
		kt := kmsg.NewMetadataResponseTopic()
		if t.Name != "" {
			kt.Topic = kmsg.StringPtr(t.Name)
		}
		if t.Error != nil {
			kt.ErrorCode = kafkawire.ErrorCode(&kerr.Error{Detail: t.Error})
			resp.Topics = append(resp.Topics, kt)
			continue
		}
		kt.TopicID = kafkaTopicID(t.TopicId)
		kt.IsInternal = isInternalTopic(t.Name)
		for _, p := range t.Partitions {
			kp := kmsg.NewMetadataResponseTopicPartition()
			kp.Partition = p.Partition
			kp.Leader, kp.LeaderEpoch = p.LeaderId, kafkaEpoch(p.LeaderEpoch)
			// p.Error is LEADER_NOT_AVAILABLE exactly when LeaderId is -1.
			if kp.Leader < 0 || !listed[kp.Leader] {
				kp.Leader = -1
				kp.ErrorCode = kafkawire.ErrorCode(kerr.New(kerr.LeaderNotAvailable, "partition %d has no live leader", p.Partition))
			}
			kp.Replicas = append([]int32{}, p.Replicas...)
			kp.ISR = append([]int32{}, p.Isr...)
			kp.OfflineReplicas = []int32{}
			for _, id := range p.Replicas {
				if !alive[id] {
					kp.OfflineReplicas = append(kp.OfflineReplicas, id)
				}
			}
			kt.Partitions = append(kt.Partitions, kp)
		}
		resp.Topics = append(resp.Topics, kt)
	}
	return resp
}

// splitKafkaAddress splits a registered HOST:PORT; ok is false for "" or a
// value that is not one (registration validates it, old state may lack it).
func splitKafkaAddress(addr string) (string, int32, bool) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return "", 0, false
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil || port == 0 {
		return "", 0, false
	}
	return host, int32(port), true
}
