package broker

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kafkawire"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/metadata"
)

// Kafka's admin APIs on the broker's Kafka listener (issue 10 point 3):
// CreateTopics, DeleteTopics, DescribeConfigs and DeleteRecords, through
// the same broker core as gRPC's (api.createClientTopic, api.DeleteTopics,
// api.DeleteRecords: the controller quorum decides, any broker may receive
// the request and forwards its proposal to the controller's leader), and
// ListOffsets (kafka_listoffsets.go). ARCHITECTURE.md "Kafka's admin APIs
// and ListOffsets" has the translation tables.

// Versions served (ARCHITECTURE.md "Version ranges served").
const (
	kafkaCreateTopicsMin, kafkaCreateTopicsMax       = 2, 7
	kafkaDeleteTopicsMin, kafkaDeleteTopicsMax       = 1, 5 // v6 names topics by id
	kafkaDescribeConfigsMin, kafkaDescribeConfigsMax = 1, 4
	kafkaDeleteRecordsMin, kafkaDeleteRecordsMax     = 0, 2
)

// defaultAdminTimeout bounds an admin request whose timeout_ms is 0 or
// negative (Kafka's clients always send one; 60 s by default in Java's).
const defaultAdminTimeout = 30 * time.Second

// registerKafkaAdmin registers the admin APIs and ListOffsets on srv
// (ServeKafka calls it once, before Serve).
func (b *Broker) registerKafkaAdmin(srv *kafkawire.Server) {
	srv.Register(kmsg.CreateTopics.Int16(), kafkaCreateTopicsMin, kafkaCreateTopicsMax, b.kafkaCreateTopics)
	srv.Register(kmsg.DeleteTopics.Int16(), kafkaDeleteTopicsMin, kafkaDeleteTopicsMax, b.kafkaDeleteTopics)
	srv.Register(kmsg.DescribeConfigs.Int16(), kafkaDescribeConfigsMin, kafkaDescribeConfigsMax, b.kafkaDescribeConfigs)
	srv.Register(kmsg.DeleteRecords.Int16(), kafkaDeleteRecordsMin, kafkaDeleteRecordsMax, b.kafkaDeleteRecords)
	b.registerKafkaListOffsets(srv)
}

// adminContext is ctx bounded by a request's timeout_ms (defaultAdminTimeout
// when it is not positive).
func adminContext(ctx context.Context, timeoutMs int32) (context.Context, context.CancelFunc) {
	d := defaultAdminTimeout
	if timeoutMs > 0 {
		d = time.Duration(timeoutMs) * time.Millisecond
	}
	return context.WithTimeout(ctx, d)
}

// kafkaErrorMessage is the message of err for a response's error_message:
// tapes' message without the Kafka name (the code carries it); nil for nil.
func kafkaErrorMessage(err error) *string {
	if err == nil {
		return nil
	}
	if ke, ok := kerr.As(err); ok {
		return kmsg.StringPtr(ke.Detail.GetMessage())
	}
	return kmsg.StringPtr(err.Error())
}

// clientGate is why this broker refuses client requests now (starting, or
// metadata possibly stale) as the retriable BROKER_NOT_AVAILABLE, or nil.
// The gRPC API answers the same through gateClientCalls and api.metadata.
func (b *Broker) clientGate() error {
	if why := b.notReady(); why != "" {
		return kerr.New(kerr.BrokerNotAvailable, "%s; retry, or ask another broker", why)
	}
	if why := b.metadataStale(); why != "" {
		return kerr.New(kerr.BrokerNotAvailable, "broker %d %s: its metadata may be stale; ask another broker", b.cfg.ID, why)
	}
	return nil
}

// kafkaCreateTopics answers CreateTopics (key 19, v2-v7). Each topic goes
// through api.createClientTopic, one after the other, in Later (proposals
// wait for the controller quorum). A name given twice in one request is
// INVALID_REQUEST for each of its entries, as Kafka answers.
func (b *Broker) kafkaCreateTopics(ctx context.Context, r *kafkawire.Request) kafkawire.Reply {
	req := r.Msg.(*kmsg.CreateTopicsRequest)
	return kafkawire.Later(func() kafkawire.Reply {
		ctx, cancel := adminContext(ctx, req.TimeoutMillis)
		defer cancel()
		resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
		times := map[string]int{}
		for _, t := range req.Topics {
			times[t.Topic]++
		}
		gate := b.clientGate()
		a := &api{b: b}
		for _, t := range req.Topics {
			rt := kmsg.NewCreateTopicsResponseTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = t.Topic, -1, -1
			err := gate
			var spec *tapesv1.TopicSpec
			var manual [][]metadata.BrokerID
			if err == nil && times[t.Topic] > 1 {
				err = kerr.New(kerr.InvalidRequest, "topic %q is named %d times in one CreateTopics request", t.Topic, times[t.Topic])
			}
			if err == nil {
				spec, manual, err = kafkaTopicSpec(t, b.cfg.DefaultPartitions, b.cfg.DefaultReplicationFactor)
			}
			if err == nil {
				err = a.createClientTopic(ctx, spec, manual, req.ValidateOnly)
			}
			if err != nil {
				rt.ErrorCode, rt.ErrorMessage = kafkawire.ErrorCode(err), kafkaErrorMessage(err)
				resp.Topics = append(resp.Topics, rt)
				continue
			}
			// v5+: what the topic is (or, validate_only, would be).
			rt.NumPartitions, rt.ReplicationFactor = spec.Partitions, int16(spec.ReplicationFactor)
			if !req.ValidateOnly {
				b.meta.View(func(s *metadata.State) {
					if tp := s.Topics[spec.Name]; tp != nil {
						rt.TopicID = kafkaTopicID(uint64(tp.ID))
					}
				})
			}
			for _, c := range topicConfigEntries(spec.Configs, nil) {
				rc := kmsg.NewCreateTopicsResponseTopicConfig()
				rc.Name, rc.Value, rc.ReadOnly, rc.Source = c.Name, c.Value, c.ReadOnly, int8(c.Source)
				rt.Configs = append(rt.Configs, rc)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return kafkawire.Respond(resp)
	})
}

// kafkaTopicSpec translates one CreateTopics entry: -1 partitions or
// replication factor take the broker's defaults; a replica assignment comes
// back as manual (partition p's replicas at index p), with the counts it
// implies. Errors are Kafka's: INVALID_REQUEST for an assignment together
// with counts, INVALID_REPLICA_ASSIGNMENT for one that is not partitions
// 0..n-1 each once with the same number of distinct replicas, INVALID_CONFIG
// for a config given twice or without a value (the rest is checked by
// metadata.ParseTopicConfig in createTopic).
func kafkaTopicSpec(t kmsg.CreateTopicsRequestTopic, defPartitions, defRF int32) (*tapesv1.TopicSpec, [][]metadata.BrokerID, error) {
	spec := &tapesv1.TopicSpec{Name: t.Topic, Partitions: t.NumPartitions, ReplicationFactor: int32(t.ReplicationFactor)}
	if len(t.Configs) > 0 {
		spec.Configs = map[string]string{}
	}
	for _, c := range t.Configs {
		if _, dup := spec.Configs[c.Name]; dup {
			return nil, nil, kerr.New(kerr.InvalidConfig, "topic %q: config %q is given twice", t.Topic, c.Name)
		}
		if c.Value == nil {
			return nil, nil, kerr.New(kerr.InvalidConfig, "topic %q: config %q has a null value", t.Topic, c.Name)
		}
		spec.Configs[c.Name] = *c.Value
	}
	if len(t.ReplicaAssignment) == 0 {
		if spec.Partitions == -1 {
			spec.Partitions = defPartitions
		}
		if spec.ReplicationFactor == -1 {
			spec.ReplicationFactor = defRF
		}
		return spec, nil, nil
	}
	if t.NumPartitions != -1 || t.ReplicationFactor != -1 {
		return nil, nil, kerr.New(kerr.InvalidRequest, "topic %q: a replica assignment and num_partitions %d / replication_factor %d both given; send -1 for both with an assignment",
			t.Topic, t.NumPartitions, t.ReplicationFactor)
	}
	manual := make([][]metadata.BrokerID, len(t.ReplicaAssignment))
	for _, ra := range t.ReplicaAssignment {
		p := ra.Partition
		switch {
		case p < 0 || int(p) >= len(manual):
			return nil, nil, kerr.New(kerr.InvalidReplicaAssignment, "topic %q: assignment for partition %d: %d partitions assigned, so they must be 0..%d", t.Topic, p, len(manual), len(manual)-1)
		case manual[p] != nil:
			return nil, nil, kerr.New(kerr.InvalidReplicaAssignment, "topic %q: partition %d assigned twice", t.Topic, p)
		case len(ra.Replicas) == 0:
			return nil, nil, kerr.New(kerr.InvalidReplicaAssignment, "topic %q: partition %d assigned no replicas", t.Topic, p)
		case len(ra.Replicas) != len(t.ReplicaAssignment[0].Replicas):
			return nil, nil, kerr.New(kerr.InvalidReplicaAssignment, "topic %q: partition %d has %d replicas, partition %d has %d: every partition needs the same count",
				t.Topic, p, len(ra.Replicas), t.ReplicaAssignment[0].Partition, len(t.ReplicaAssignment[0].Replicas))
		}
		reps := make([]metadata.BrokerID, len(ra.Replicas))
		for i, id := range ra.Replicas {
			if slices.Contains(ra.Replicas[:i], id) {
				return nil, nil, kerr.New(kerr.InvalidReplicaAssignment, "topic %q: partition %d names broker %d twice (%v)", t.Topic, p, id, ra.Replicas)
			}
			reps[i] = metadata.BrokerID(id)
		}
		manual[p] = reps
	}
	spec.Partitions, spec.ReplicationFactor = int32(len(manual)), int32(len(manual[0]))
	return spec, manual, nil
}

// checkManualAssignment checks that every broker a manual assignment names
// is live and registered (avail); one still starting is the retriable
// BROKER_NOT_AVAILABLE, any other INVALID_REPLICA_ASSIGNMENT. createTopic
// calls it inside the metadata view.
func checkManualAssignment(manual [][]metadata.BrokerID, avail, starting []metadata.BrokerID) ([][]metadata.BrokerID, error) {
	for p, reps := range manual {
		for _, id := range reps {
			switch {
			case slices.Contains(avail, id):
			case slices.Contains(starting, id):
				return nil, kerr.New(kerr.BrokerNotAvailable, "partition %d names broker %d, which is still starting; retry", p, id)
			default:
				return nil, kerr.New(kerr.InvalidReplicaAssignment, "partition %d names broker %d, which is not a live registered broker (live: %s)", p, id, metadata.JoinIDs(avail))
			}
		}
	}
	return manual, nil
}

// kafkaDeleteTopics answers DeleteTopics (key 20, v1-v5: by name) through
// api.DeleteTopics (which refuses __consumer_offsets with
// INVALID_TOPIC_EXCEPTION), in Later. A name given twice is INVALID_REQUEST.
func (b *Broker) kafkaDeleteTopics(ctx context.Context, r *kafkawire.Request) kafkawire.Reply {
	req := r.Msg.(*kmsg.DeleteTopicsRequest)
	return kafkawire.Later(func() kafkawire.Reply {
		ctx, cancel := adminContext(ctx, req.TimeoutMillis)
		defer cancel()
		times := map[string]int{}
		for _, n := range req.TopicNames {
			times[n]++
		}
		errs := map[string]error{}
		var names []string
		gate := b.clientGate()
		for n, k := range times {
			switch {
			case gate != nil:
				errs[n] = gate
			case k > 1:
				errs[n] = kerr.New(kerr.InvalidRequest, "topic %q is named %d times in one DeleteTopics request", n, k)
			default:
				names = append(names, n)
			}
		}
		if len(names) > 0 {
			slices.Sort(names)
			res, _ := (&api{b: b}).DeleteTopics(ctx, &tapesv1.DeleteTopicsRequest{Names: names})
			for _, tr := range res.Results {
				errs[tr.Name] = kerr.FromDetail(tr.Error)
			}
		}
		resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
		for _, n := range req.TopicNames {
			rt := kmsg.NewDeleteTopicsResponseTopic()
			rt.Topic = kmsg.StringPtr(n)
			rt.ErrorCode, rt.ErrorMessage = kafkawire.ErrorCode(errs[n]), kafkaErrorMessage(errs[n])
			resp.Topics = append(resp.Topics, rt)
		}
		return kafkawire.Respond(resp)
	})
}

// kafkaDeleteRecords answers DeleteRecords (key 21, v0-v2) through
// api.DeleteRecords for each partition, concurrently, in Later: the
// partition's leader moves its log start on every replica through Raft;
// offset -1 is the high watermark; a follower answers
// NOT_LEADER_OR_FOLLOWER, an offset past the high watermark or below -1
// OFFSET_OUT_OF_RANGE; the low watermark is -1 on error, as Kafka's.
func (b *Broker) kafkaDeleteRecords(ctx context.Context, r *kafkawire.Request) kafkawire.Reply {
	req := r.Msg.(*kmsg.DeleteRecordsRequest)
	return kafkawire.Later(func() kafkawire.Reply {
		ctx, cancel := adminContext(ctx, req.TimeoutMillis)
		defer cancel()
		resp := req.ResponseKind().(*kmsg.DeleteRecordsResponse)
		gate := b.clientGate()
		a := &api{b: b}
		done := make(chan struct{})
		pending := 0
		for _, t := range req.Topics {
			rt := kmsg.NewDeleteRecordsResponseTopic()
			rt.Topic = t.Topic
			rt.Partitions = make([]kmsg.DeleteRecordsResponseTopicPartition, len(t.Partitions))
			resp.Topics = append(resp.Topics, rt)
			for i, p := range t.Partitions {
				out := &resp.Topics[len(resp.Topics)-1].Partitions[i]
				*out = kmsg.NewDeleteRecordsResponseTopicPartition()
				out.Partition, out.LowWatermark = p.Partition, -1
				if gate != nil {
					out.ErrorCode = kafkawire.ErrorCode(gate)
					continue
				}
				pending++
				go func(topic string, p kmsg.DeleteRecordsRequestTopicPartition) {
					defer func() { done <- struct{}{} }()
					dr, err := a.DeleteRecords(ctx, &tapesv1.DeleteRecordsRequest{Topic: topic, Partition: p.Partition, Offset: p.Offset})
					if err != nil {
						out.ErrorCode = kafkawire.ErrorCode(kerr.FromStatus(err))
						return
					}
					out.LowWatermark = dr.LowWatermark
				}(t.Topic, p)
			}
		}
		for range pending {
			<-done
		}
		return kafkawire.Respond(resp)
	})
}

// configEntry is one config as DescribeConfigs (and CreateTopics v5+)
// answers it.
type configEntry struct {
	Name     string
	Value    *string
	ReadOnly bool
	Source   kmsg.ConfigSource
	Type     kmsg.ConfigType
	Doc      string
	Synonyms []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym
}

// topicConfigDoc: what each topic config does in tapes, and the broker
// config Kafka falls back to when the topic does not set it.
var topicConfigDoc = map[string]struct{ broker, doc string }{
	metadata.ConfigMinInsyncReplicas: {"min.insync.replicas", "Fewest in-sync replicas (the leader included) an acks=all produce needs; fewer is NOT_ENOUGH_REPLICAS."},
	metadata.ConfigRetentionMs:       {"log.retention.ms", "Records older than this (ms) are deleted, a whole segment at a time; -1 keeps them."},
	metadata.ConfigRetentionBytes:    {"log.retention.bytes", "Oldest segments are deleted while a partition's log is larger than this (bytes); -1 sets no limit."},
	metadata.ConfigSegmentBytes:      {"log.segment.bytes", "A partition's log rolls to a new segment file past this size (bytes)."},
	metadata.ConfigMaxMessageBytes:   {"message.max.bytes", "Largest record batch a produce may carry (bytes); a larger one is RECORD_TOO_LARGE."},
}

// topicConfigEntries lists every topic config tapes knows (only the names
// in want, when want is not nil), in name order: TOPIC_CONFIG (Kafka's
// DYNAMIC_TOPIC_CONFIG) with the topic's value where configs sets it,
// DEFAULT_CONFIG with tapes' default otherwise. Synonyms: the topic's own
// value, then the broker config of the same meaning with its default (tapes
// has no broker-level override). Topic configs are read-only: tapes serves
// no AlterConfigs.
func topicConfigEntries(configs map[string]string, want []string) []configEntry {
	set, _ := metadata.ParseTopicConfig(configs)
	def := metadata.DefaultTopicConfig()
	var out []configEntry
	for _, k := range metadata.TopicConfigKeys() {
		if want != nil && !slices.Contains(want, k) {
			continue
		}
		dv, _ := def.Value(k)
		doc := topicConfigDoc[k]
		e := configEntry{Name: k, Value: kmsg.StringPtr(dv), ReadOnly: true, Source: kmsg.ConfigSourceDefaultConfig, Type: kmsg.ConfigTypeLong, Doc: doc.doc}
		if _, ok := configs[k]; ok {
			v, _ := set.Value(k)
			e.Value, e.Source = kmsg.StringPtr(v), kmsg.ConfigSourceDynamicTopicConfig
			e.Synonyms = append(e.Synonyms, configSynonym(k, v, kmsg.ConfigSourceDynamicTopicConfig))
		}
		e.Synonyms = append(e.Synonyms, configSynonym(doc.broker, dv, kmsg.ConfigSourceDefaultConfig))
		out = append(out, e)
	}
	return out
}

func configSynonym(name, value string, src kmsg.ConfigSource) kmsg.DescribeConfigsResponseResourceConfigConfigSynonym {
	s := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
	s.Name, s.Value, s.Source = name, kmsg.StringPtr(value), src
	return s
}

// brokerConfigEntries lists the settings of this broker that have a Kafka
// name, with their true values: STATIC_BROKER_CONFIG where the broker's
// configuration differs from tapes' default (DefaultConfig), DEFAULT_CONFIG
// where it does not or where tapes has no setting (the topic defaults,
// socket.request.max.bytes, auto.create.topics.enable). All read-only.
func (b *Broker) brokerConfigEntries(want []string) []configEntry {
	c, d := b.cfg, DefaultConfig()
	ms := func(v time.Duration) string { return strconv.FormatInt(v.Milliseconds(), 10) }
	def := metadata.DefaultTopicConfig()
	tv := func(k string) string { v, _ := def.Value(k); return v }
	type item struct {
		name, value, dflt string
		typ               kmsg.ConfigType
		doc               string
	}
	id := strconv.Itoa(int(c.ID))
	items := []item{
		{"broker.id", id, "", kmsg.ConfigTypeInt, "This broker's id (brokerd --id)."},
		{"node.id", id, "", kmsg.ConfigTypeInt, "This broker's id (brokerd --id); the same as broker.id."},
		{"num.partitions", strconv.Itoa(int(c.DefaultPartitions)), strconv.Itoa(int(d.DefaultPartitions)), kmsg.ConfigTypeInt, "Partitions of a topic created by Kafka's CreateTopics with num_partitions -1."},
		{"default.replication.factor", strconv.Itoa(int(c.DefaultReplicationFactor)), strconv.Itoa(int(d.DefaultReplicationFactor)), kmsg.ConfigTypeInt, "Replication factor of a topic created by Kafka's CreateTopics with replication_factor -1."},
		{"auto.create.topics.enable", "false", "false", kmsg.ConfigTypeBoolean, "tapes never creates a topic because a client asked for its metadata."},
		{"socket.request.max.bytes", strconv.Itoa(kafkawire.DefaultMaxRequestBytes), strconv.Itoa(kafkawire.DefaultMaxRequestBytes), kmsg.ConfigTypeInt, "A Kafka request frame larger than this closes the connection."},
		{"replica.lag.time.max.ms", ms(c.ReplicaLagTimeMax), ms(d.ReplicaLagTimeMax), kmsg.ConfigTypeLong, "A follower not caught up with the leader for this long leaves the ISR."},
		{"log.retention.check.interval.ms", ms(c.RetentionCheckInterval), ms(d.RetentionCheckInterval), kmsg.ConfigTypeLong, "How often each partition's retention is applied."},
		{"auto.leader.rebalance.enable", strconv.FormatBool(c.PreferredLeaderDelay > 0), strconv.FormatBool(d.PreferredLeaderDelay > 0), kmsg.ConfigTypeBoolean, "Whether leadership goes back to a partition's caught-up preferred replica."},
		{"broker.heartbeat.interval.ms", ms(c.HeartbeatInterval), ms(d.HeartbeatInterval), kmsg.ConfigTypeInt, "How often this broker tells every peer it is alive."},
		{"broker.session.timeout.ms", ms(c.SessionTimeout), ms(d.SessionTimeout), kmsg.ConfigTypeInt, "A broker not heard from for this long is taken for dead."},
		{"offsets.topic.num.partitions", strconv.Itoa(int(c.Groups.OffsetsTopicPartitions)), strconv.Itoa(int(d.Groups.OffsetsTopicPartitions)), kmsg.ConfigTypeInt, "Partitions of __consumer_offsets."},
		{"offsets.topic.replication.factor", strconv.Itoa(c.Groups.OffsetsTopicReplicationFactor), strconv.Itoa(d.Groups.OffsetsTopicReplicationFactor), kmsg.ConfigTypeShort, "Replication factor of __consumer_offsets (at most the brokers in the cluster)."},
		{"group.min.session.timeout.ms", ms(c.Groups.MinSessionTimeout), ms(d.Groups.MinSessionTimeout), kmsg.ConfigTypeInt, "Shortest session timeout a group member may ask for."},
		{"group.max.session.timeout.ms", ms(c.Groups.MaxSessionTimeout), ms(d.Groups.MaxSessionTimeout), kmsg.ConfigTypeInt, "Longest session timeout a group member may ask for."},
		{"group.initial.rebalance.delay.ms", ms(c.Groups.InitialRebalanceDelay), ms(d.Groups.InitialRebalanceDelay), kmsg.ConfigTypeInt, "How long a new group waits for more members before its first rebalance."},
	}
	if c.KafkaAdvertise != "" {
		items = append(items, item{"advertised.listeners", "PLAINTEXT://" + c.KafkaAdvertise, "", kmsg.ConfigTypeList, "The Kafka address this broker registers (brokerd --kafka-advertise)."})
	}
	for _, k := range metadata.TopicConfigKeys() {
		doc := topicConfigDoc[k]
		items = append(items, item{doc.broker, tv(k), tv(k), kmsg.ConfigTypeLong, "Default of the topic config " + k + ": " + doc.doc})
	}
	slices.SortFunc(items, func(x, y item) int {
		switch {
		case x.name < y.name:
			return -1
		case x.name > y.name:
			return 1
		}
		return 0
	})
	var out []configEntry
	for _, it := range items {
		if want != nil && !slices.Contains(want, it.name) {
			continue
		}
		src := kmsg.ConfigSourceStaticBrokerConfig
		if it.value == it.dflt {
			src = kmsg.ConfigSourceDefaultConfig
		}
		out = append(out, configEntry{Name: it.name, Value: kmsg.StringPtr(it.value), ReadOnly: true, Source: src, Type: it.typ, Doc: it.doc,
			Synonyms: []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym{configSynonym(it.name, it.value, src)}})
	}
	return out
}

// kafkaDescribeConfigs answers DescribeConfigs (key 32, v1-v4) from this
// broker's metadata; it does not block. Topic resources: every topic config
// tapes knows (topicConfigEntries); an unknown topic is
// UNKNOWN_TOPIC_OR_PARTITION. Broker resources: this broker's own settings
// (brokerConfigEntries) for its id; the empty name (Kafka's cluster-wide
// dynamic defaults) has none; another id is INVALID_REQUEST, as Kafka
// answers (ask that broker). Other resource types are INVALID_REQUEST.
// config_names selects (names tapes does not know are left out, as Kafka
// does); synonyms and documentation only when asked.
func (b *Broker) kafkaDescribeConfigs(_ context.Context, r *kafkawire.Request) kafkawire.Reply {
	req := r.Msg.(*kmsg.DescribeConfigsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	gate := b.clientGate()
	for _, res := range req.Resources {
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = res.ResourceType, res.ResourceName
		entries, err := b.describeResource(res, gate)
		if err != nil {
			rr.ErrorCode, rr.ErrorMessage = kafkawire.ErrorCode(err), kafkaErrorMessage(err)
			resp.Resources = append(resp.Resources, rr)
			continue
		}
		rr.Configs = []kmsg.DescribeConfigsResponseResourceConfig{}
		for _, e := range entries {
			rc := kmsg.NewDescribeConfigsResponseResourceConfig()
			rc.Name, rc.Value, rc.ReadOnly, rc.Source, rc.ConfigType = e.Name, e.Value, e.ReadOnly, e.Source, e.Type
			rc.IsDefault = e.Source == kmsg.ConfigSourceDefaultConfig
			if req.IncludeSynonyms {
				rc.ConfigSynonyms = e.Synonyms
			}
			if req.IncludeDocumentation {
				rc.Documentation = kmsg.StringPtr(e.Doc)
			}
			rr.Configs = append(rr.Configs, rc)
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return kafkawire.Respond(resp)
}

// describeResource is one DescribeConfigs resource's entries, or its error
// (gate: clientGate's answer, for the resources that need current metadata).
func (b *Broker) describeResource(res kmsg.DescribeConfigsRequestResource, gate error) ([]configEntry, error) {
	switch res.ResourceType {
	case kmsg.ConfigResourceTypeTopic:
		if gate != nil {
			return nil, gate
		}
		var configs map[string]string
		var found bool
		b.meta.View(func(s *metadata.State) {
			if t := s.Topics[res.ResourceName]; t != nil {
				found, configs = true, maps.Clone(t.Configs)
			}
		})
		if !found {
			return nil, kerr.New(kerr.UnknownTopicOrPartition, "topic %q does not exist", res.ResourceName)
		}
		return topicConfigEntries(configs, res.ConfigNames), nil
	case kmsg.ConfigResourceTypeBroker:
		switch res.ResourceName {
		case "":
			return nil, nil
		case strconv.Itoa(int(b.cfg.ID)):
			return b.brokerConfigEntries(res.ConfigNames), nil
		}
		return nil, kerr.New(kerr.InvalidRequest, "broker resource %q: this is broker %d; ask that broker (or %q for cluster-wide defaults: none)", res.ResourceName, b.cfg.ID, "")
	}
	return nil, kerr.New(kerr.InvalidRequest, "config resource type %s (%d) is not served: tapes describes topics (%d) and brokers (%d)",
		res.ResourceType, int8(res.ResourceType), int8(kmsg.ConfigResourceTypeTopic), int8(kmsg.ConfigResourceTypeBroker))
}
