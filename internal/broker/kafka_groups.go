package broker

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/group"
	"github.com/tapes-dev/tapes/internal/kafkawire"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/metadata"
)

// Kafka's group APIs (issue 10 points 3, 4, 6) on the broker's Kafka
// listener: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
// OffsetCommit, OffsetFetch, DescribeGroups and ListGroups, translated into
// calls of the one group coordinator (internal/group) that the gRPC
// GroupService (groups.go) calls too. Nothing here keeps group state.
// ARCHITECTURE.md "Kafka's wire protocol", "Consumer groups over Kafka".

// The version ranges served (ARCHITECTURE.md "Version ranges served").
var kafkaGroupVersions = []struct {
	key      kmsg.Key
	min, max int16
}{
	{kmsg.FindCoordinator, 0, 6},
	{kmsg.JoinGroup, 0, 9},
	{kmsg.SyncGroup, 0, 5},
	{kmsg.Heartbeat, 0, 4},
	{kmsg.LeaveGroup, 0, 5},
	{kmsg.OffsetCommit, 1, 9},
	{kmsg.OffsetFetch, 1, 9},
	{kmsg.DescribeGroups, 0, 5},
	{kmsg.ListGroups, 0, 4},
}

// FindCoordinator's key types (Kafka's CoordinatorType).
const (
	coordinatorTypeGroup       = 0
	coordinatorTypeTransaction = 1
)

// kafkaGroups serves the group APIs over one coordinator. The broker builds
// it in registerKafkaGroups; the unit tests build it over a coordinator of
// their own with find and partitionExists of their own.
type kafkaGroups struct {
	coord *group.Coordinator
	// find returns the coordinator of group id as a broker id and that
	// broker's Kafka HOST:PORT (creating __consumer_offsets first if
	// needed); COORDINATOR_NOT_AVAILABLE while there is none. It may block
	// up to ctx.
	find func(ctx context.Context, groupID string) (node int32, kafkaAddr string, err error)
	// findTxn is find for a transactional id (Broker.findTxnCoordinator).
	findTxn func(ctx context.Context, transactionalID string) (node int32, kafkaAddr string, err error)
	// partitionExists reports whether topic has partition p (Kafka answers
	// a commit for a partition it does not know UNKNOWN_TOPIC_OR_PARTITION).
	// It must not block.
	partitionExists func(topic string, p int32) bool
	// notReady says why the broker does not serve clients yet ("" once it
	// does); its group calls then answer COORDINATOR_NOT_AVAILABLE.
	notReady func() string
	log      *slog.Logger

	mu sync.Mutex
	// last: per connection id, a channel closed when the connection's
	// latest group call has finished. Each call waits for the previous
	// one of its connection, so a connection's group calls run one at a
	// time in request order, as on Kafka's broker (which reads nothing
	// more from a connection until it has answered), while the request
	// goroutine goes on and other connections are not held up. An entry
	// is removed when its connection closes.
	last map[uint64]chan struct{}
}

// registerKafkaGroups registers the group APIs on srv (ServeKafka calls it
// once, before Serve).
func (b *Broker) registerKafkaGroups(srv *kafkawire.Server) {
	g := &groupAPI{b: b}
	k := &kafkaGroups{
		coord:    b.groups,
		notReady: b.notReady,
		log:      b.log.With("component", "kafka-groups"),
		find: func(ctx context.Context, groupID string) (int32, string, error) {
			fc, err := g.findCoordinator(ctx, groupID)
			if err != nil {
				return -1, "", err
			}
			var addr string
			b.meta.View(func(s *metadata.State) { addr = s.Brokers[metadata.BrokerID(fc.NodeId)].KafkaAddress })
			return fc.NodeId, addr, nil
		},
		findTxn:         b.findTxnCoordinator,
		partitionExists: b.partitionExists,
	}
	k.register(srv)
}

// partitionExists reports whether topic has partition p. It does not block.
func (b *Broker) partitionExists(topic string, p int32) bool {
	ok := false
	b.meta.View(func(s *metadata.State) {
		t := s.Topics[topic]
		ok = t != nil && p >= 0 && int(p) < len(t.Partitions)
	})
	return ok
}

func (k *kafkaGroups) register(srv *kafkawire.Server) {
	k.last = map[uint64]chan struct{}{}
	handlers := map[kmsg.Key]func(context.Context, *kafkawire.Request) kmsg.Response{
		kmsg.FindCoordinator: k.findCoordinator,
		kmsg.JoinGroup:       k.joinGroup,
		kmsg.SyncGroup:       k.syncGroup,
		kmsg.Heartbeat:       k.heartbeat,
		kmsg.LeaveGroup:      k.leaveGroup,
		kmsg.OffsetCommit:    k.offsetCommit,
		kmsg.OffsetFetch:     k.offsetFetch,
		kmsg.DescribeGroups:  k.describeGroups,
		kmsg.ListGroups:      k.listGroups,
	}
	for _, v := range kafkaGroupVersions {
		h := handlers[v.key]
		srv.Register(v.key.Int16(), v.min, v.max, func(ctx context.Context, r *kafkawire.Request) kafkawire.Reply {
			return k.inTurn(ctx, r, h)
		})
	}
}

// inTurn runs h for r in Later, after the connection's previous group call
// has finished (see kafkaGroups.last). Called on the connection's request
// goroutine; it does not block. h may block (JoinGroup and SyncGroup wait
// for the rebalance, OffsetCommit for its acks=all append) and returns once
// ctx (the connection's) is done.
func (k *kafkaGroups) inTurn(ctx context.Context, r *kafkawire.Request, h func(context.Context, *kafkawire.Request) kmsg.Response) kafkawire.Reply {
	id := r.Conn.ID
	done := make(chan struct{})
	k.mu.Lock()
	prev, seen := k.last[id]
	k.last[id] = done
	k.mu.Unlock()
	if !seen {
		context.AfterFunc(ctx, func() {
			k.mu.Lock()
			delete(k.last, id)
			k.mu.Unlock()
		})
	}
	return kafkawire.Later(func() kafkawire.Reply {
		defer close(done)
		if prev != nil {
			select {
			case <-prev:
			case <-ctx.Done():
				return kafkawire.Close(ctx.Err())
			}
		}
		return kafkawire.Respond(h(ctx, r))
	})
}

// check returns nil when this broker serves groupID now, else the error to
// answer without calling the coordinator: COORDINATOR_NOT_AVAILABLE while
// the broker starts, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...
// (group.Coordinator.Check). It does not block.
func (k *kafkaGroups) check(groupID string) error {
	if why := k.notReady(); why != "" {
		return kerr.New(kerr.CoordinatorNotAvailable, "%s", why)
	}
	return k.coord.Check(groupID)
}

// errMessage is err's text for a response's nullable error message.
func errMessage(err error) *string {
	if err == nil {
		return nil
	}
	return kmsg.StringPtr(err.Error())
}

// connHost is the member host the coordinator records: the client's
// address, as the gRPC front end records it.
func connHost(r *kafkawire.Request) string {
	if r.Conn != nil && r.Conn.RemoteAddr != nil {
		return r.Conn.RemoteAddr.String()
	}
	return ""
}

// staticMembershipError answers a JoinGroup naming a group.instance.id:
// tapes' coordinator has no static members (KIP-345). UNSUPPORTED_VERSION
// is what a Kafka broker without static membership answered, and what
// Java's consumer reads as "unset group.instance.id".
func staticMembershipError(group, instance string) error {
	return kerr.New(kerr.UnsupportedVersion, "group %s: static membership is not supported (group.instance.id %q): leave group.instance.id unset", group, instance)
}

// findCoordinator answers FindCoordinator: one key before v4, a batch of
// keys from v4 on. Group keys are answered from the gRPC FindCoordinator
// (the ready leader of the group's __consumer_offsets partition) with that
// broker's Kafka address; transaction keys likewise from the leader of the
// id's __transaction_state partition (Broker.findTxnCoordinator).
func (k *kafkaGroups) findCoordinator(ctx context.Context, r *kafkawire.Request) kmsg.Response {
	req := r.Msg.(*kmsg.FindCoordinatorRequest)
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	keys := req.CoordinatorKeys
	if req.Version < 4 {
		keys = []string{req.CoordinatorKey}
	}
	for _, key := range keys {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key = key
		node, host, port, err := k.coordinatorOf(ctx, req.CoordinatorType, key)
		if err != nil {
			c.NodeID, c.Port = -1, -1
			c.ErrorCode, c.ErrorMessage = kafkawire.ErrorCode(err), errMessage(err)
		} else {
			c.NodeID, c.Host, c.Port = node, host, port
		}
		resp.Coordinators = append(resp.Coordinators, c)
	}
	if req.Version < 4 {
		c := resp.Coordinators[0]
		resp.Coordinators = nil
		resp.NodeID, resp.Host, resp.Port, resp.ErrorCode, resp.ErrorMessage = c.NodeID, c.Host, c.Port, c.ErrorCode, c.ErrorMessage
	}
	return resp
}

// coordinatorOf finds the coordinator of one key of type keyType.
func (k *kafkaGroups) coordinatorOf(ctx context.Context, keyType int8, key string) (int32, string, int32, error) {
	find := k.find
	switch keyType {
	case coordinatorTypeGroup:
	case coordinatorTypeTransaction:
		find = k.findTxn
	default:
		return 0, "", 0, kerr.New(kerr.InvalidRequest, "coordinator type %d (key %q): only group (0) and transaction (1) coordinators exist", keyType, key)
	}
	if why := k.notReady(); why != "" {
		return 0, "", 0, kerr.New(kerr.CoordinatorNotAvailable, "%s", why)
	}
	node, addr, err := find(ctx, key)
	if err != nil {
		return 0, "", 0, err
	}
	host, port, ok := splitKafkaAddress(addr)
	if !ok {
		return 0, "", 0, kerr.New(kerr.CoordinatorNotAvailable, "the coordinator of %s, broker %d, has no Kafka listener (address %q)", key, node, addr)
	}
	return node, host, port, nil
}

// joinGroup answers JoinGroup; it blocks until the rebalance completes (or
// the connection closes). Before v4 a join without member id gets one and
// joins at once (assign_member_id); from v4 on it is MEMBER_ID_REQUIRED with
// the id to join with (KIP-394). v0 has no rebalance timeout: the
// coordinator takes the session timeout, as Kafka does.
func (k *kafkaGroups) joinGroup(ctx context.Context, r *kafkawire.Request) kmsg.Response {
	req := r.Msg.(*kmsg.JoinGroupRequest)
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.Generation, resp.MemberID = -1, req.MemberID
	fail := func(err error) kmsg.Response {
		resp.ErrorCode = kafkawire.ErrorCode(err)
		if ke, ok := kerr.As(err); ok && ke.Code() == kerr.MemberIDRequired {
			resp.MemberID = ke.Detail.MemberId
		}
		if req.Version < 7 {
			resp.Protocol = kmsg.StringPtr("")
		}
		return resp
	}
	if req.InstanceID != nil {
		err := staticMembershipError(req.Group, *req.InstanceID)
		k.log.Info("join refused", "client", r.Header.ClientID, "remote", connHost(r), "err", err)
		return fail(err)
	}
	if err := k.check(req.Group); err != nil {
		return fail(err)
	}
	jr := &tapesv1.JoinGroupRequest{GroupId: req.Group, MemberId: req.MemberID, ClientId: r.Header.ClientID,
		ProtocolType: req.ProtocolType, SessionTimeoutMs: req.SessionTimeoutMillis, RebalanceTimeoutMs: req.RebalanceTimeoutMillis,
		AssignMemberId: req.Version < 4}
	if req.Version == 0 {
		jr.RebalanceTimeoutMs = 0
	}
	for _, p := range req.Protocols {
		jr.Protocols = append(jr.Protocols, &tapesv1.JoinGroupProtocol{Name: p.Name, Metadata: p.Metadata})
	}
	out, err := k.coord.JoinGroup(ctx, jr, connHost(r))
	if err != nil {
		return fail(err)
	}
	resp.Generation, resp.LeaderID, resp.MemberID = out.GenerationId, out.LeaderId, out.MemberId
	resp.Protocol = kmsg.StringPtr(out.ProtocolName)
	resp.ProtocolType = kmsg.StringPtr(out.ProtocolType)
	for _, m := range out.Members {
		km := kmsg.NewJoinGroupResponseMember()
		km.MemberID, km.ProtocolMetadata = m.MemberId, m.Metadata
		resp.Members = append(resp.Members, km)
	}
	return resp
}

// syncGroup answers SyncGroup; it blocks until the leader's assignment is
// committed. v5's protocol type and name are checked by the coordinator
// (INCONSISTENT_GROUP_PROTOCOL).
func (k *kafkaGroups) syncGroup(ctx context.Context, r *kafkawire.Request) kmsg.Response {
	req := r.Msg.(*kmsg.SyncGroupRequest)
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	resp.MemberAssignment = []byte{}
	if err := k.check(req.Group); err != nil {
		resp.ErrorCode = kafkawire.ErrorCode(err)
		return resp
	}
	sr := &tapesv1.SyncGroupRequest{GroupId: req.Group, GenerationId: req.Generation, MemberId: req.MemberID}
	if req.ProtocolType != nil {
		sr.ProtocolType = *req.ProtocolType
	}
	if req.Protocol != nil {
		sr.ProtocolName = *req.Protocol
	}
	for _, a := range req.GroupAssignment {
		sr.Assignments = append(sr.Assignments, &tapesv1.MemberAssignment{MemberId: a.MemberID, Assignment: a.MemberAssignment})
	}
	out, err := k.coord.SyncGroup(ctx, sr)
	if err != nil {
		resp.ErrorCode = kafkawire.ErrorCode(err)
		return resp
	}
	resp.ProtocolType, resp.Protocol = kmsg.StringPtr(out.ProtocolType), kmsg.StringPtr(out.ProtocolName)
	if out.Assignment != nil {
		resp.MemberAssignment = out.Assignment
	}
	return resp
}

// heartbeat answers Heartbeat.
func (k *kafkaGroups) heartbeat(ctx context.Context, r *kafkawire.Request) kmsg.Response {
	req := r.Msg.(*kmsg.HeartbeatRequest)
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	err := k.check(req.Group)
	if err == nil {
		err = k.coord.Heartbeat(ctx, &tapesv1.HeartbeatRequest{GroupId: req.Group, GenerationId: req.Generation, MemberId: req.MemberID})
	}
	resp.ErrorCode = kafkawire.ErrorCode(err)
	return resp
}

// leaveGroup answers LeaveGroup: one member before v3, a batch of members
// from v3 on, each with its own error; group-level errors (NOT_COORDINATOR,
// ...) are the top-level error. A member named only by group.instance.id
// is UNKNOWN_MEMBER_ID: there are no static members.
func (k *kafkaGroups) leaveGroup(ctx context.Context, r *kafkawire.Request) kmsg.Response {
	req := r.Msg.(*kmsg.LeaveGroupRequest)
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	if err := k.check(req.Group); err != nil {
		resp.ErrorCode = kafkawire.ErrorCode(err)
		return resp
	}
	leave := func(memberID string, instance *string) error {
		if memberID == "" && instance != nil {
			return kerr.New(kerr.UnknownMemberID, "group %s has no member with group.instance.id %q (static membership is not supported)", req.Group, *instance)
		}
		return k.coord.LeaveGroup(ctx, &tapesv1.LeaveGroupRequest{GroupId: req.Group, MemberId: memberID})
	}
	if req.Version < 3 {
		resp.ErrorCode = kafkawire.ErrorCode(leave(req.MemberID, nil))
		return resp
	}
	for _, m := range req.Members {
		km := kmsg.NewLeaveGroupResponseMember()
		km.MemberID, km.InstanceID = m.MemberID, m.InstanceID
		km.ErrorCode = kafkawire.ErrorCode(leave(m.MemberID, m.InstanceID))
		resp.Members = append(resp.Members, km)
	}
	return resp
}

// offsetCommit answers OffsetCommit. Partitions of topics (or partitions)
// that do not exist are UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers; the
// others are one coordinator commit, fenced as the gRPC one (generation -1
// without member id only into an Empty group; UNKNOWN_MEMBER_ID,
// ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS), whose outcome every one of
// them gets. v1's per-partition timestamp and v2-v4's retention time are
// ignored (tapes keeps offsets until they are overwritten); v6+'s leader
// epoch is not stored (OffsetFetch answers -1). group.instance.id (v7+)
// fences nothing: no member is static (JoinGroup refuses instance ids), so
// FENCED_INSTANCE_ID cannot arise.
func (k *kafkaGroups) offsetCommit(ctx context.Context, r *kafkawire.Request) kmsg.Response {
	req := r.Msg.(*kmsg.OffsetCommitRequest)
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	cr := &tapesv1.OffsetCommitRequest{GroupId: req.Group, GenerationId: req.Generation, MemberId: req.MemberID}
	split := k.splitCommit(req.Group, len(req.Topics), func(i int) (string, int) { return req.Topics[i].Topic, len(req.Topics[i].Partitions) },
		func(i, j int) (int32, int64, *string) {
			p := req.Topics[i].Partitions[j]
			return p.Partition, p.Offset, p.Metadata
		})
	var code int16
	if cr.Offsets = split.offsets; len(cr.Offsets) > 0 {
		code = kafkawire.ErrorCode(k.coord.OffsetCommit(ctx, cr))
	}
	for i, t := range req.Topics {
		kt := kmsg.NewOffsetCommitResponseTopic()
		kt.Topic = t.Topic
		for j, p := range t.Partitions {
			kp := kmsg.NewOffsetCommitResponseTopicPartition()
			kp.Partition, kp.ErrorCode = p.Partition, split.code(i, j, code)
			kt.Partitions = append(kt.Partitions, kp)
		}
		resp.Topics = append(resp.Topics, kt)
	}
	return resp
}

// commitSplit is how the partitions of an OffsetCommit or a TxnOffsetCommit
// are answered: codes[i][j] is the error of partition j of topic i decided
// before the coordinator's call, unless ours[i][j]: then it is one of
// offsets, which the call commits, and gets its outcome.
type commitSplit struct {
	codes   [][]int16
	ours    [][]bool
	offsets []*tapesv1.OffsetCommitPartition
}

// code is partition j of topic i's error, outcome the call's.
func (s commitSplit) code(i, j int, outcome int16) int16 {
	if s.ours[i][j] {
		return outcome
	}
	return s.codes[i][j]
}

// splitCommit splits the partitions of a commit of groupID (topics of
// them; topic(i) names topic i and counts its partitions, part(i, j) is
// partition j's index, offset and metadata): all get the group's error
// (Check) if there is one, a partition that does not exist
// UNKNOWN_TOPIC_OR_PARTITION, as Kafka's KafkaApis answers; the others go
// to the coordinator. It does not block.
func (k *kafkaGroups) splitCommit(groupID string, topics int, topic func(i int) (string, int), part func(i, j int) (int32, int64, *string)) commitSplit {
	s := commitSplit{codes: make([][]int16, topics), ours: make([][]bool, topics)}
	groupErr := k.check(groupID)
	for i := range topics {
		name, n := topic(i)
		s.codes[i], s.ours[i] = make([]int16, n), make([]bool, n)
		for j := range n {
			p, offset, metadata := part(i, j)
			switch {
			case groupErr != nil:
				s.codes[i][j] = kafkawire.ErrorCode(groupErr)
			case !k.partitionExists(name, p):
				s.codes[i][j] = kafkawire.ErrorCode(kerr.New(kerr.UnknownTopicOrPartition, "%s-%d", name, p))
			default:
				s.ours[i][j] = true
				o := &tapesv1.OffsetCommitPartition{Topic: name, Partition: p, Offset: offset}
				if metadata != nil {
					o.Metadata = *metadata
				}
				s.offsets = append(s.offsets, o)
			}
		}
	}
	return s
}

// fetchedTopic is one topic of an OffsetFetch answer.
type fetchedTopic struct {
	topic string
	parts []*tapesv1.CommittedOffset
	// unstable[i]: parts[i] has a transactional commit pending and
	// require_stable was asked (UNSTABLE_OFFSET_COMMIT, offset -1).
	unstable []bool
}

// fetchGroup reads group's committed offsets: those of asked (in request
// order), or every committed partition (by topic and partition) when all.
// A partition without commit has offset -1; with requireStable, one with a
// transactional commit pending is marked unstable.
func (k *kafkaGroups) fetchGroup(ctx context.Context, groupID string, asked []*tapesv1.TopicPartitions, all, requireStable bool) ([]fetchedTopic, error) {
	if err := k.check(groupID); err != nil {
		return nil, err
	}
	if !all && len(asked) == 0 {
		return nil, nil
	}
	req := &tapesv1.OffsetFetchRequest{GroupId: groupID}
	if !all {
		req.Partitions = asked
	}
	out, pending, err := k.coord.OffsetFetchStable(ctx, req)
	if err != nil {
		return nil, err
	}
	var topics []fetchedTopic
	for i, o := range out.Offsets {
		if n := len(topics); n == 0 || topics[n-1].topic != o.Topic {
			topics = append(topics, fetchedTopic{topic: o.Topic})
		}
		ft := &topics[len(topics)-1]
		unstable := requireStable && pending[i]
		if unstable {
			o = &tapesv1.CommittedOffset{Topic: o.Topic, Partition: o.Partition, Offset: -1}
		}
		ft.parts, ft.unstable = append(ft.parts, o), append(ft.unstable, unstable)
	}
	return topics, nil
}

// offsetFetch answers OffsetFetch: one group before v8 (v1's errors in the
// partitions, v2-v7's at the top), many from v8 on, each with its error.
// Null topics (v2+) ask for every committed partition. With v7+'s
// require_stable, a partition whose transactional commit is pending is
// UNSTABLE_OFFSET_COMMIT (KIP-447: the client retries), without it the
// committed offset is answered. v9's member id
// and epoch are for KIP-848 groups; classic groups do not check them, as
// in Kafka. The leader epoch is -1 (not stored).
func (k *kafkaGroups) offsetFetch(ctx context.Context, r *kafkawire.Request) kmsg.Response {
	req := r.Msg.(*kmsg.OffsetFetchRequest)
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	if req.Version >= 8 {
		for _, g := range req.Groups {
			var asked []*tapesv1.TopicPartitions
			for _, t := range g.Topics {
				asked = append(asked, &tapesv1.TopicPartitions{Topic: t.Topic, Partitions: t.Partitions})
			}
			resp.Groups = append(resp.Groups, k.offsetFetchGroup(ctx, g.Group, asked, g.Topics == nil, false, req.RequireStable))
		}
		return resp
	}
	var asked []*tapesv1.TopicPartitions
	for _, t := range req.Topics {
		asked = append(asked, &tapesv1.TopicPartitions{Topic: t.Topic, Partitions: t.Partitions})
	}
	// v1 has no top-level error: every partition asked carries it.
	kg := k.offsetFetchGroup(ctx, req.Group, asked, req.Version >= 2 && req.Topics == nil, req.Version < 2, req.Version >= 7 && req.RequireStable)
	resp.ErrorCode = kg.ErrorCode
	for _, t := range kg.Topics {
		kt := kmsg.NewOffsetFetchResponseTopic()
		kt.Topic = t.Topic
		for _, p := range t.Partitions {
			kt.Partitions = append(kt.Partitions, kmsg.OffsetFetchResponseTopicPartition{Partition: p.Partition, Offset: p.Offset,
				LeaderEpoch: p.LeaderEpoch, Metadata: p.Metadata, ErrorCode: p.ErrorCode})
		}
		resp.Topics = append(resp.Topics, kt)
	}
	return resp
}

// offsetFetchGroup answers one group of an OffsetFetch in v8's form: the
// offsets of asked (all: every committed partition), or the group's error,
// which errInPartitions puts in each partition asked instead (v1).
// requireStable: see fetchGroup.
func (k *kafkaGroups) offsetFetchGroup(ctx context.Context, groupID string, asked []*tapesv1.TopicPartitions, all, errInPartitions, requireStable bool) kmsg.OffsetFetchResponseGroup {
	kg := kmsg.NewOffsetFetchResponseGroup()
	kg.Group = groupID
	topics, err := k.fetchGroup(ctx, groupID, asked, all, requireStable)
	code := kafkawire.ErrorCode(err)
	switch {
	case err == nil:
	case errInPartitions:
		topics = nil
		for _, t := range asked {
			ft := fetchedTopic{topic: t.Topic}
			for _, p := range t.Partitions {
				ft.parts = append(ft.parts, &tapesv1.CommittedOffset{Topic: t.Topic, Partition: p, Offset: -1})
			}
			topics = append(topics, ft)
		}
	default:
		kg.ErrorCode = code
		return kg
	}
	for _, t := range topics {
		kt := kmsg.NewOffsetFetchResponseGroupTopic()
		kt.Topic = t.topic
		for i, o := range t.parts {
			kp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
			kp.Partition, kp.Offset, kp.LeaderEpoch, kp.Metadata, kp.ErrorCode = o.Partition, o.Offset, -1, kmsg.StringPtr(o.Metadata), code
			if i < len(t.unstable) && t.unstable[i] {
				kp.ErrorCode = kafkawire.ErrorCode(kerr.New(kerr.UnstableOffsetCommit, "group %s: %s-%d has a transactional commit pending", groupID, o.Topic, o.Partition))
			}
			kt.Partitions = append(kt.Partitions, kp)
		}
		kg.Topics = append(kg.Topics, kt)
	}
	return kg
}

// describeGroups answers DescribeGroups: per group its state under Kafka's
// names (an unknown group is Dead without error, as Kafka answers before
// v6), protocol type, protocol, and members with their opaque metadata and
// assignment; a group this broker does not coordinate is NOT_COORDINATOR.
// Authorized operations are "not provided" (-2^31): tapes has no ACLs.
func (k *kafkaGroups) describeGroups(ctx context.Context, r *kafkawire.Request) kmsg.Response {
	req := r.Msg.(*kmsg.DescribeGroupsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, id := range req.Groups {
		kg := kmsg.NewDescribeGroupsResponseGroup()
		kg.Group, kg.AuthorizedOperations = id, math.MinInt32
		err := k.check(id)
		var d *tapesv1.GroupDescription
		if err == nil {
			d, err = k.coord.DescribeGroup(ctx, id)
		}
		if err != nil {
			kg.ErrorCode = kafkawire.ErrorCode(err)
			resp.Groups = append(resp.Groups, kg)
			continue
		}
		kg.State, kg.ProtocolType, kg.Protocol = d.State, d.ProtocolType, d.Protocol
		for _, m := range d.Members {
			km := kmsg.NewDescribeGroupsResponseGroupMember()
			km.MemberID, km.ClientID, km.ClientHost = m.MemberId, m.ClientId, m.Host
			km.ProtocolMetadata, km.MemberAssignment = orEmpty(m.Metadata), orEmpty(m.Assignment)
			kg.Members = append(kg.Members, km)
		}
		resp.Groups = append(resp.Groups, kg)
	}
	return resp
}

func orEmpty(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// listGroups answers ListGroups with the groups this broker coordinates
// (clients ask every broker), v4+ filtered by state (case-insensitive, as
// Kafka parses them).
func (k *kafkaGroups) listGroups(_ context.Context, r *kafkawire.Request) kmsg.Response {
	req := r.Msg.(*kmsg.ListGroupsRequest)
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	if why := k.notReady(); why != "" {
		resp.ErrorCode = kafkawire.ErrorCode(kerr.New(kerr.CoordinatorNotAvailable, "%s", why))
		return resp
	}
	for _, g := range k.coord.ListGroups() {
		if len(req.StatesFilter) > 0 && !slices.ContainsFunc(req.StatesFilter, func(st string) bool { return strings.EqualFold(st, g.State) }) {
			continue
		}
		kg := kmsg.NewListGroupsResponseGroup()
		kg.Group, kg.ProtocolType, kg.GroupState = g.GroupId, g.ProtocolType, g.State
		resp.Groups = append(resp.Groups, kg)
	}
	return resp
}
