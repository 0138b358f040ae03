package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	fkerr "github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/eventually"
	"github.com/tapes-dev/tapes/internal/group"
	"github.com/tapes-dev/tapes/internal/kafkawire"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// groupMemLog is one __consumer_offsets partition in memory; held, its
// reads block until release is closed (a coordinator still loading).
type groupMemLog struct {
	mu   sync.Mutex
	recs []group.Record
	hold chan struct{}
	// gate, when set, holds every Append until it is closed.
	gate chan struct{}
}

func (l *groupMemLog) Term() uint64 { return 1 }

func (l *groupMemLog) Append(ctx context.Context, recs []group.Record) (int64, error) {
	l.mu.Lock()
	gate := l.gate
	l.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	base := int64(len(l.recs))
	l.recs = append(l.recs, recs...)
	return base, nil
}

func (l *groupMemLog) DeleteRecords(context.Context, int64) (int64, error) { return 0, nil }

func (l *groupMemLog) Read(ctx context.Context, offset int64) ([]group.Record, int64, int64, error) {
	if l.hold != nil {
		select {
		case <-l.hold:
		case <-ctx.Done():
			return nil, offset, 0, ctx.Err()
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	end := int64(len(l.recs))
	out := append([]group.Record(nil), l.recs[offset:]...)
	for i := range out {
		out[i].Offset = offset + int64(i)
	}
	return out, end, end, nil
}

// groupsFixture is a kafkawire server with the group APIs over a real
// coordinator of 3 __consumer_offsets partitions: 0 led here, 1 led
// elsewhere (NOT_COORDINATOR), 2 led here but still loading.
type groupsFixture struct {
	t    *testing.T
	addr string
	// groups of each partition.
	here, elsewhere, loading string
	release                  chan struct{}
	log0                     *groupMemLog // partition 0's
	mu                       sync.Mutex
	notReady                 string
}

func newGroupsFixture(t *testing.T) *groupsFixture {
	f := &groupsFixture{t: t, release: make(chan struct{})}
	f.log0 = &groupMemLog{}
	logs := map[int32]group.Log{0: f.log0, 2: &groupMemLog{hold: f.release}}
	coord, err := group.New(group.Config{BrokerID: 1, Partitions: func() int32 { return 3 },
		Open:              func(p int32) group.Log { return logs[p] },
		MinSessionTimeout: time.Second, MaxSessionTimeout: time.Minute, Tick: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; f.here == "" || f.elsewhere == "" || f.loading == ""; i++ {
		id := fmt.Sprintf("g%d", i)
		switch group.PartitionFor(id, 3) {
		case 0:
			f.here = id
		case 1:
			f.elsewhere = id
		case 2:
			f.loading = id
		}
	}
	srv := kafkawire.NewServer(kafkawire.Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	k := &kafkaGroups{coord: coord, log: slog.New(slog.DiscardHandler),
		notReady: func() string { f.mu.Lock(); defer f.mu.Unlock(); return f.notReady },
		find: func(_ context.Context, id string) (int32, string, error) {
			if group.PartitionFor(id, 3) == 1 {
				return 2, "h2:9092", nil
			}
			return 1, f.addr, nil
		},
		findTxn: func(_ context.Context, id string) (int32, string, error) {
			if id == "" {
				return -1, "", kerr.New(kerr.InvalidRequest, "transactional id is empty")
			}
			return 3, "h3:9093", nil
		},
		partitionExists: func(topic string, p int32) bool { return topic == "orders" && p >= 0 && p < 3 },
	}
	k.register(srv)
	k.registerTxnOffsetCommit(srv)
	go srv.Serve(ln)
	t.Cleanup(func() { close(f.release); srv.Close() })
	eventually.Nil(t, 10*time.Second, "partition 0 loaded", func() error { return coord.Check(f.here) })
	return f
}

// onPartition0 returns a group id starting with prefix that this
// fixture's broker coordinates (__consumer_offsets partition 0).
func onPartition0(prefix string) string {
	for id := prefix; ; id += "x" {
		if group.PartitionFor(id, 3) == 0 {
			return id
		}
	}
}

// kconn is a raw Kafka client connection: requests at exactly the version
// given.
type kconn struct {
	t    *testing.T
	c    net.Conn
	corr int32
}

func (f *groupsFixture) dial() *kconn {
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	return &kconn{t: f.t, c: c}
}

// send writes req at version v and returns its correlation id.
func (k *kconn) send(req kmsg.Request, v int16) int32 {
	k.t.Helper()
	req.SetVersion(v)
	k.corr++
	if _, err := k.c.Write(kmsg.NewRequestFormatter(kmsg.FormatterClientID("test")).AppendRequest(nil, req, k.corr)); err != nil {
		k.t.Fatal(err)
	}
	return k.corr
}

// recv reads the answer to the request sent with corr into resp (the
// request's response kind).
func (k *kconn) recv(corr int32, req kmsg.Request) kmsg.Response {
	k.t.Helper()
	k.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(k.c, size[:]); err != nil {
		k.t.Fatalf("reading the answer to %s v%d: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	b := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(k.c, b); err != nil {
		k.t.Fatal(err)
	}
	if got := int32(binary.BigEndian.Uint32(b)); got != corr {
		k.t.Fatalf("answer with correlation id %d, want %d", got, corr)
	}
	b = b[4:]
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if resp.IsFlexible() {
		b = b[1:] // no tagged fields in the response header
	}
	if err := resp.ReadFrom(b); err != nil {
		k.t.Fatalf("decoding %s v%d: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	return resp
}

func (k *kconn) do(req kmsg.Request, v int16) kmsg.Response {
	k.t.Helper()
	return k.recv(k.send(req, v), req)
}

func wantCode(t *testing.T, what string, code int16, want error) {
	t.Helper()
	var w int16
	if want != nil {
		w = want.(*fkerr.Error).Code
	}
	if code != w {
		t.Fatalf("%s: error %v, want %v", what, fkerr.ErrorForCode(code), want)
	}
}

// join joins group as a consumer offering range (metadata meta) at version
// v, going through MEMBER_ID_REQUIRED from v4 on; it returns the answer.
func (k *kconn) join(group, memberID string, meta []byte, v int16) *kmsg.JoinGroupResponse {
	k.t.Helper()
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group, req.MemberID, req.ProtocolType = group, memberID, "consumer"
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 10000, 10000
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name, p.Metadata = "range", meta
	req.Protocols = append(req.Protocols, p)
	resp := k.do(req, v).(*kmsg.JoinGroupResponse)
	if memberID == "" && v >= 4 {
		wantCode(k.t, fmt.Sprintf("first JoinGroup v%d", v), resp.ErrorCode, fkerr.MemberIDRequired)
		if resp.MemberID == "" || resp.Generation != -1 {
			k.t.Fatalf("MEMBER_ID_REQUIRED v%d: %+v", v, resp)
		}
		req.MemberID = resp.MemberID
		resp = k.do(req, v).(*kmsg.JoinGroupResponse)
	}
	return resp
}

func (k *kconn) sync(group, memberID string, gen int32, assign map[string][]byte, v int16) *kmsg.SyncGroupResponse {
	k.t.Helper()
	req := kmsg.NewPtrSyncGroupRequest()
	req.Group, req.MemberID, req.Generation = group, memberID, gen
	for id, a := range assign {
		ga := kmsg.NewSyncGroupRequestGroupAssignment()
		ga.MemberID, ga.MemberAssignment = id, a
		req.GroupAssignment = append(req.GroupAssignment, ga)
	}
	return k.do(req, v).(*kmsg.SyncGroupResponse)
}

func (k *kconn) heartbeat(group, memberID string, gen int32, v int16) int16 {
	k.t.Helper()
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.MemberID, req.Generation = group, memberID, gen
	return k.do(req, v).(*kmsg.HeartbeatResponse).ErrorCode
}

// TestKafkaFindCoordinator: every version finds a group's coordinator with
// its Kafka host and port; transaction keys are INVALID_REQUEST with a
// message (v1+); v4+ answers a batch of keys one by one; a broker still
// starting answers COORDINATOR_NOT_AVAILABLE.
func TestKafkaFindCoordinator(t *testing.T) {
	f := newGroupsFixture(t)
	c := f.dial()
	host, port, _ := splitKafkaAddress(f.addr)
	for v := int16(0); v <= 6; v++ {
		req := kmsg.NewPtrFindCoordinatorRequest()
		if v < 4 {
			req.CoordinatorKey = f.here
			resp := c.do(req, v).(*kmsg.FindCoordinatorResponse)
			if resp.ErrorCode != 0 || resp.NodeID != 1 || resp.Host != host || resp.Port != port {
				t.Fatalf("v%d: %+v", v, resp)
			}
			req.CoordinatorKey = f.elsewhere
			if resp := c.do(req, v).(*kmsg.FindCoordinatorResponse); resp.NodeID != 2 || resp.Host != "h2" || resp.Port != 9092 {
				t.Fatalf("v%d elsewhere: %+v", v, resp)
			}
			if v >= 1 {
				req.CoordinatorType = coordinatorTypeTransaction
				resp := c.do(req, v).(*kmsg.FindCoordinatorResponse)
				if resp.ErrorCode != 0 || resp.NodeID != 3 || resp.Host != "h3" || resp.Port != 9093 {
					t.Fatalf("v%d transaction key: %+v", v, resp)
				}
				req.CoordinatorType = 2
				resp = c.do(req, v).(*kmsg.FindCoordinatorResponse)
				wantCode(t, "key type 2", resp.ErrorCode, fkerr.InvalidRequest)
				if resp.ErrorMessage == nil || !bytes.Contains([]byte(*resp.ErrorMessage), []byte("type 2")) || resp.NodeID != -1 {
					t.Fatalf("v%d key type 2: %+v", v, resp)
				}
			}
			continue
		}
		req.CoordinatorKeys = []string{f.here, f.elsewhere}
		resp := c.do(req, v).(*kmsg.FindCoordinatorResponse)
		if len(resp.Coordinators) != 2 || resp.Coordinators[0].Key != f.here || resp.Coordinators[0].NodeID != 1 ||
			resp.Coordinators[0].Port != port || resp.Coordinators[1].NodeID != 2 || resp.Coordinators[1].ErrorCode != 0 {
			t.Fatalf("v%d: %+v", v, resp.Coordinators)
		}
		req.CoordinatorType = coordinatorTypeTransaction
		req.CoordinatorKeys = []string{"txn-a", ""}
		resp = c.do(req, v).(*kmsg.FindCoordinatorResponse)
		if len(resp.Coordinators) != 2 || resp.Coordinators[0].NodeID != 3 || resp.Coordinators[0].Port != 9093 {
			t.Fatalf("v%d transaction keys: %+v", v, resp.Coordinators)
		}
		wantCode(t, "an empty transactional id", resp.Coordinators[1].ErrorCode, fkerr.InvalidRequest)
	}
	f.mu.Lock()
	f.notReady = "broker 1 is starting"
	f.mu.Unlock()
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorKey = f.here
	wantCode(t, "while starting", c.do(req, 3).(*kmsg.FindCoordinatorResponse).ErrorCode, fkerr.CoordinatorNotAvailable)
}

// TestKafkaGroupMembership: JoinGroup (every version), SyncGroup,
// Heartbeat and LeaveGroup against the coordinator: v0-v3 joins get a
// member id at once, v4+ through MEMBER_ID_REQUIRED; the leader gets the
// members' metadata and hands out opaque assignments; errors are the
// coordinator's (INVALID_SESSION_TIMEOUT, ILLEGAL_GENERATION,
// UNKNOWN_MEMBER_ID, INCONSISTENT_GROUP_PROTOCOL, NOT_COORDINATOR,
// COORDINATOR_LOAD_IN_PROGRESS); group.instance.id is refused.
func TestKafkaGroupMembership(t *testing.T) {
	f := newGroupsFixture(t)
	c := f.dial()
	for v := int16(0); v <= 9; v++ {
		syncV, hbV, leaveV := min(v, 5), min(v, 4), min(v, 5)
		g := onPartition0(fmt.Sprintf("join-v%d", v))
		meta := []byte{0, 3, 'm', byte(v)}
		resp := c.join(g, "", meta, v)
		if resp.ErrorCode != 0 || resp.MemberID == "" || resp.LeaderID != resp.MemberID || resp.Generation < 1 ||
			resp.Protocol == nil || *resp.Protocol != "range" || len(resp.Members) != 1 || !bytes.Equal(resp.Members[0].ProtocolMetadata, meta) {
			t.Fatalf("JoinGroup v%d: %+v", v, resp)
		}
		if v >= 7 && (resp.ProtocolType == nil || *resp.ProtocolType != "consumer") {
			t.Fatalf("JoinGroup v%d protocol type %v", v, resp.ProtocolType)
		}
		me, gen := resp.MemberID, resp.Generation
		s := c.sync(g, me, gen, map[string][]byte{me: []byte("assignment")}, syncV)
		if s.ErrorCode != 0 || string(s.MemberAssignment) != "assignment" {
			t.Fatalf("SyncGroup v%d: %+v", syncV, s)
		}
		if syncV >= 5 && (s.Protocol == nil || *s.Protocol != "range" || *s.ProtocolType != "consumer") {
			t.Fatalf("SyncGroup v5 protocol: %+v", s)
		}
		wantCode(t, "heartbeat", c.heartbeat(g, me, gen, hbV), nil)
		wantCode(t, "stale heartbeat", c.heartbeat(g, me, gen-1, hbV), fkerr.IllegalGeneration)
		wantCode(t, "unknown member", c.heartbeat(g, "nobody", gen, hbV), fkerr.UnknownMemberID)
		if syncV >= 5 {
			req := kmsg.NewPtrSyncGroupRequest()
			req.Group, req.MemberID, req.Generation, req.Protocol = g, me, gen, kmsg.StringPtr("roundrobin")
			wantCode(t, "SyncGroup v5 other protocol", c.do(req, 5).(*kmsg.SyncGroupResponse).ErrorCode, fkerr.InconsistentGroupProtocol)
		}
		leave := kmsg.NewPtrLeaveGroupRequest()
		leave.Group = g
		if leaveV < 3 {
			leave.MemberID = me
			wantCode(t, "LeaveGroup", c.do(leave, leaveV).(*kmsg.LeaveGroupResponse).ErrorCode, nil)
		} else {
			m1, m2 := kmsg.NewLeaveGroupRequestMember(), kmsg.NewLeaveGroupRequestMember()
			m1.MemberID, m2.MemberID = me, "nobody"
			leave.Members = []kmsg.LeaveGroupRequestMember{m1, m2}
			lr := c.do(leave, leaveV).(*kmsg.LeaveGroupResponse)
			if lr.ErrorCode != 0 || len(lr.Members) != 2 || lr.Members[0].ErrorCode != 0 || lr.Members[0].MemberID != me ||
				lr.Members[1].ErrorCode != fkerr.UnknownMemberID.Code {
				t.Fatalf("LeaveGroup v%d: %+v", leaveV, lr)
			}
		}
		wantCode(t, "heartbeat after leaving", c.heartbeat(g, me, gen, hbV), fkerr.UnknownMemberID)
	}

	// Bad joins.
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group, req.ProtocolType, req.SessionTimeoutMillis = f.here, "consumer", 100
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name = "range"
	req.Protocols = []kmsg.JoinGroupRequestProtocol{p}
	wantCode(t, "session timeout below the minimum", c.do(req, 3).(*kmsg.JoinGroupResponse).ErrorCode, fkerr.InvalidSessionTimeout)
	req.SessionTimeoutMillis, req.InstanceID = 10000, kmsg.StringPtr("static-1")
	wantCode(t, "group.instance.id", c.do(req, 5).(*kmsg.JoinGroupResponse).ErrorCode, fkerr.UnsupportedVersion)
	req.InstanceID, req.Group = nil, f.elsewhere
	wantCode(t, "join elsewhere", c.do(req, 9).(*kmsg.JoinGroupResponse).ErrorCode, fkerr.NotCoordinator)
	req.Group = f.loading
	wantCode(t, "join while loading", c.do(req, 9).(*kmsg.JoinGroupResponse).ErrorCode, fkerr.CoordinatorLoadInProgress)
	wantCode(t, "heartbeat while loading", c.heartbeat(f.loading, "m", 1, 4), fkerr.CoordinatorLoadInProgress)
}

// TestKafkaJoinLongPollKeepsOrder: a JoinGroup that waits for the other
// member to rejoin answers later without holding up other connections, and
// the answers on its own connection stay in request order (the ListGroups
// sent after it is answered after it).
func TestKafkaJoinLongPollKeepsOrder(t *testing.T) {
	f := newGroupsFixture(t)
	a, b := f.dial(), f.dial()
	ra := a.join(f.here, "", []byte("a"), 9)
	wantCode(t, "first join", ra.ErrorCode, nil)
	wantCode(t, "first sync", a.sync(f.here, ra.MemberID, ra.Generation, map[string][]byte{ra.MemberID: []byte("all")}, 5).ErrorCode, nil)

	// b joins on connection b: it waits for a to rejoin. Then a ListGroups
	// on the same connection.
	jb := kmsg.NewPtrJoinGroupRequest()
	jb.Group, jb.ProtocolType, jb.SessionTimeoutMillis, jb.RebalanceTimeoutMillis = f.here, "consumer", 10000, 30000
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name, p.Metadata = "range", []byte("b")
	jb.Protocols = []kmsg.JoinGroupRequestProtocol{p}
	corrJoin := b.send(jb, 3) // v3: a member id at once, then the wait
	list := kmsg.NewPtrListGroupsRequest()
	corrList := b.send(list, 0)

	// Connection a is not held up: its heartbeat learns of the rebalance,
	// and its rejoin completes the join for both.
	eventually.Nil(t, 10*time.Second, "a's heartbeat to learn of the rebalance", func() error {
		if code := a.heartbeat(f.here, ra.MemberID, ra.Generation, 4); code != fkerr.RebalanceInProgress.Code {
			return fmt.Errorf("heartbeat: %v", fkerr.ErrorForCode(code))
		}
		return nil
	})
	ra2 := a.join(f.here, ra.MemberID, []byte("a"), 9)
	if ra2.ErrorCode != 0 || ra2.Generation != ra.Generation+1 || len(ra2.Members) != 2 {
		t.Fatalf("a's rejoin: %+v", ra2)
	}
	rb := b.recv(corrJoin, jb).(*kmsg.JoinGroupResponse)
	if rb.ErrorCode != 0 || rb.Generation != ra2.Generation || rb.MemberID == "" || rb.LeaderID != ra.MemberID || len(rb.Members) != 0 {
		t.Fatalf("b's join: %+v", rb)
	}
	lr := b.recv(corrList, list).(*kmsg.ListGroupsResponse)
	if len(lr.Groups) != 1 || lr.Groups[0].Group != f.here {
		t.Fatalf("ListGroups: %+v", lr)
	}
}

func commitReq(group, member string, gen int32, offsets map[string][]int64) *kmsg.OffsetCommitRequest {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.MemberID, req.Generation = group, member, gen
	topics := make([]string, 0, len(offsets))
	for tp := range offsets {
		topics = append(topics, tp)
	}
	slices.Sort(topics)
	for _, tp := range topics {
		kt := kmsg.NewOffsetCommitRequestTopic()
		kt.Topic = tp
		for p, o := range offsets[tp] {
			kp := kmsg.NewOffsetCommitRequestTopicPartition()
			kp.Partition, kp.Offset, kp.Metadata = int32(p), o, kmsg.StringPtr(fmt.Sprintf("m%d", o))
			kt.Partitions = append(kt.Partitions, kp)
		}
		req.Topics = append(req.Topics, kt)
	}
	return req
}

// commitCodes returns every partition's error of an OffsetCommit answer,
// topic by topic.
func commitCodes(resp *kmsg.OffsetCommitResponse) []error {
	var out []error
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			out = append(out, fkerr.ErrorForCode(p.ErrorCode))
		}
	}
	return out
}

// TestKafkaOffsetCommitFetch: OffsetCommit v1-v9 is fenced as the gRPC
// commit (generation -1 only into an Empty group; then UNKNOWN_MEMBER_ID,
// ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS while the assignment is
// awaited), partitions that do not exist are UNKNOWN_TOPIC_OR_PARTITION
// while the others commit; OffsetFetch v1-v9 reads them back (v2+ null
// topics: all; v8+ several groups each with its error).
func TestKafkaOffsetCommitFetch(t *testing.T) {
	f := newGroupsFixture(t)
	c := f.dial()
	for v := int16(1); v <= 9; v++ {
		resp := c.do(commitReq(f.here, "", -1, map[string][]int64{"orders": {int64(v), 10 + int64(v)}, "nope": {1}}), v).(*kmsg.OffsetCommitResponse)
		if got := commitCodes(resp); !slices.Equal(got, []error{fkerr.UnknownTopicOrPartition, nil, nil}) {
			t.Fatalf("simple commit v%d: %v", v, got)
		}
		resp = c.do(commitReq(f.elsewhere, "", -1, map[string][]int64{"orders": {1}}), v).(*kmsg.OffsetCommitResponse)
		if got := commitCodes(resp); !slices.Equal(got, []error{fkerr.NotCoordinator}) {
			t.Fatalf("commit elsewhere v%d: %v", v, got)
		}
	}
	// With a member: fenced.
	j := c.join(f.here, "", []byte("m"), 9)
	commit := func(member string, gen int32, v int16) error {
		return commitCodes(c.do(commitReq(f.here, member, gen, map[string][]int64{"orders": {100}}), v).(*kmsg.OffsetCommitResponse))[0]
	}
	for v := int16(1); v <= 9; v++ {
		if err := commit(j.MemberID, j.Generation, v); err != fkerr.RebalanceInProgress {
			t.Fatalf("commit v%d awaiting the assignment: %v", v, err)
		}
	}
	wantCode(t, "sync", c.sync(f.here, j.MemberID, j.Generation, map[string][]byte{j.MemberID: []byte("x")}, 5).ErrorCode, nil)
	for v := int16(1); v <= 9; v++ {
		for _, tc := range []struct {
			member string
			gen    int32
			want   error
		}{{"", -1, fkerr.UnknownMemberID}, {"nobody", j.Generation, fkerr.UnknownMemberID}, {j.MemberID, j.Generation - 1, fkerr.IllegalGeneration}, {j.MemberID, j.Generation, nil}} {
			if err := commit(tc.member, tc.gen, v); err != tc.want {
				t.Fatalf("commit v%d member %q generation %d: %v, want %v", v, tc.member, tc.gen, err, tc.want)
			}
		}
	}

	// OffsetFetch: orders-0 at 100 (the member's), orders-1 at 19 (v9's
	// simple commit), orders-2 never.
	want := map[int32]int64{0: 100, 1: 19, 2: -1}
	for v := int16(1); v <= 9; v++ {
		req := kmsg.NewPtrOffsetFetchRequest()
		check := func(what string, topic string, parts []kmsg.OffsetFetchResponseTopicPartition) {
			t.Helper()
			if topic != "orders" || len(parts) != 3 {
				t.Fatalf("OffsetFetch v%d %s: %s %+v", v, what, topic, parts)
			}
			for _, p := range parts {
				if p.Offset != want[p.Partition] || p.ErrorCode != 0 || (v >= 5 && p.LeaderEpoch != -1) || (p.Offset >= 0 && *p.Metadata != fmt.Sprintf("m%d", p.Offset)) {
					t.Fatalf("OffsetFetch v%d %s: partition %+v", v, what, p)
				}
			}
		}
		if v < 8 {
			rt := kmsg.NewOffsetFetchRequestTopic()
			rt.Topic, rt.Partitions = "orders", []int32{0, 1, 2}
			req.Group, req.Topics = f.here, []kmsg.OffsetFetchRequestTopic{rt}
			resp := c.do(req, v).(*kmsg.OffsetFetchResponse)
			if len(resp.Topics) != 1 || resp.ErrorCode != 0 {
				t.Fatalf("OffsetFetch v%d: %+v", v, resp)
			}
			check("asked", resp.Topics[0].Topic, resp.Topics[0].Partitions)
			if v >= 2 {
				req.Topics = nil
				resp := c.do(req, v).(*kmsg.OffsetFetchResponse)
				if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 2 {
					t.Fatalf("OffsetFetch v%d all: %+v", v, resp)
				}
				req.Group = f.elsewhere
				wantCode(t, "OffsetFetch elsewhere", c.do(req, v).(*kmsg.OffsetFetchResponse).ErrorCode, fkerr.NotCoordinator)
			} else {
				req.Group = f.elsewhere
				resp := c.do(req, v).(*kmsg.OffsetFetchResponse)
				wantCode(t, "OffsetFetch v1 elsewhere", resp.Topics[0].Partitions[0].ErrorCode, fkerr.NotCoordinator)
			}
			continue
		}
		g1, g2, g3 := kmsg.NewOffsetFetchRequestGroup(), kmsg.NewOffsetFetchRequestGroup(), kmsg.NewOffsetFetchRequestGroup()
		rt := kmsg.NewOffsetFetchRequestGroupTopic()
		rt.Topic, rt.Partitions = "orders", []int32{0, 1, 2}
		g1.Group, g1.Topics = f.here, []kmsg.OffsetFetchRequestGroupTopic{rt}
		g2.Group = f.elsewhere
		g3.Group = f.here // null topics: all committed
		req.Groups, req.RequireStable = []kmsg.OffsetFetchRequestGroup{g1, g2, g3}, true
		resp := c.do(req, v).(*kmsg.OffsetFetchResponse)
		if len(resp.Groups) != 3 || resp.Groups[0].ErrorCode != 0 || len(resp.Groups[0].Topics) != 1 ||
			resp.Groups[1].ErrorCode != fkerr.NotCoordinator.Code || resp.Groups[2].ErrorCode != 0 || len(resp.Groups[2].Topics[0].Partitions) != 2 {
			t.Fatalf("OffsetFetch v%d: %+v", v, resp.Groups)
		}
		var parts []kmsg.OffsetFetchResponseTopicPartition
		for _, p := range resp.Groups[0].Topics[0].Partitions {
			parts = append(parts, kmsg.OffsetFetchResponseTopicPartition{Partition: p.Partition, Offset: p.Offset, LeaderEpoch: p.LeaderEpoch, Metadata: p.Metadata, ErrorCode: p.ErrorCode})
		}
		check("group", resp.Groups[0].Topics[0].Topic, parts)
	}
}

// TestKafkaDescribeAndListGroups: DescribeGroups v0-v5 shows the members
// with their metadata and assignment bytes as sent, Kafka's state names
// (Dead for an unknown group, NOT_COORDINATOR for one coordinated
// elsewhere); ListGroups v0-v4 lists this broker's groups, v4 by state.
func TestKafkaDescribeAndListGroups(t *testing.T) {
	f := newGroupsFixture(t)
	c := f.dial()
	j := c.join(f.here, "", []byte("sub-a"), 9)
	empty, unknown := onPartition0("empty"), onPartition0("unknown")
	if got := commitCodes(c.do(commitReq(empty, "", -1, map[string][]int64{"orders": {1}}), 9).(*kmsg.OffsetCommitResponse)); got[0] != nil {
		t.Fatal(got)
	}
	describe := func(v int16, state string, assignment []byte) {
		t.Helper()
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.Groups = []string{f.here, unknown, f.elsewhere}
		resp := c.do(req, v).(*kmsg.DescribeGroupsResponse)
		if len(resp.Groups) != 3 {
			t.Fatalf("DescribeGroups v%d: %+v", v, resp)
		}
		g := resp.Groups[0]
		if g.ErrorCode != 0 || g.Group != f.here || g.State != state || g.ProtocolType != "consumer" || g.Protocol != "range" ||
			len(g.Members) != 1 || g.Members[0].MemberID != j.MemberID || g.Members[0].ClientID != "test" || g.Members[0].ClientHost == "" ||
			string(g.Members[0].ProtocolMetadata) != "sub-a" || !bytes.Equal(g.Members[0].MemberAssignment, assignment) {
			t.Fatalf("DescribeGroups v%d: %+v", v, g)
		}
		if u := resp.Groups[1]; u.ErrorCode != 0 || u.State != "Dead" || len(u.Members) != 0 {
			t.Fatalf("DescribeGroups v%d unknown: %+v", v, u)
		}
		wantCode(t, "DescribeGroups elsewhere", resp.Groups[2].ErrorCode, fkerr.NotCoordinator)
	}
	for v := int16(0); v <= 5; v++ {
		describe(v, "CompletingRebalance", []byte{})
	}
	wantCode(t, "sync", c.sync(f.here, j.MemberID, j.Generation, map[string][]byte{j.MemberID: []byte("assign-a")}, 5).ErrorCode, nil)
	for v := int16(0); v <= 5; v++ {
		describe(v, "Stable", []byte("assign-a"))
	}
	for v := int16(0); v <= 4; v++ {
		resp := c.do(kmsg.NewPtrListGroupsRequest(), v).(*kmsg.ListGroupsResponse)
		var got []string
		for _, g := range resp.Groups {
			got = append(got, g.Group+"/"+g.ProtocolType+"/"+g.GroupState)
		}
		slices.Sort(got)
		want := []string{empty + "//", f.here + "/consumer/"}
		if v >= 4 {
			want = []string{empty + "//Empty", f.here + "/consumer/Stable"}
		}
		if resp.ErrorCode != 0 || !slices.Equal(got, want) {
			t.Fatalf("ListGroups v%d: %v, want %v", v, got, want)
		}
	}
	req := kmsg.NewPtrListGroupsRequest()
	req.StatesFilter = []string{"stable"}
	resp := c.do(req, 4).(*kmsg.ListGroupsResponse)
	if len(resp.Groups) != 1 || resp.Groups[0].Group != f.here {
		t.Fatalf("ListGroups v4 stable: %+v", resp.Groups)
	}
}

// TestKafkaGroupCallsRunInTurn: a connection's group calls take effect in
// request order, as on Kafka's broker: an OffsetFetch pipelined behind an
// OffsetCommit whose append is held sees the commit, though the commit
// waits in Later.
func TestKafkaGroupCallsRunInTurn(t *testing.T) {
	f := newGroupsFixture(t)
	c := f.dial()
	gate := make(chan struct{})
	f.log0.mu.Lock()
	f.log0.gate = gate
	f.log0.mu.Unlock()
	commit := commitReq(f.here, "", -1, map[string][]int64{"orders": {42}})
	corrCommit := c.send(commit, 8)
	fetch := kmsg.NewPtrOffsetFetchRequest()
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = "orders", []int32{0}
	fetch.Group, fetch.Topics = f.here, []kmsg.OffsetFetchRequestTopic{rt}
	corrFetch := c.send(fetch, 7)
	// Time for a front end that ran the fetch at once to answer it from
	// before the commit; a correct one holds it behind the commit.
	time.Sleep(200 * time.Millisecond)
	close(gate)
	if got := commitCodes(c.recv(corrCommit, commit).(*kmsg.OffsetCommitResponse)); got[0] != nil {
		t.Fatalf("commit: %v", got)
	}
	resp := c.recv(corrFetch, fetch).(*kmsg.OffsetFetchResponse)
	if len(resp.Topics) != 1 || resp.Topics[0].Partitions[0].Offset != 42 {
		t.Fatalf("OffsetFetch pipelined behind the commit: %+v, want offset 42", resp.Topics)
	}
}
