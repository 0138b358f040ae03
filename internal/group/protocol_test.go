package group

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/assign"
	"github.com/tapes-dev/tapes/internal/consumerproto"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// protocols returns one JoinGroupProtocol per name, each with metadata
// naming it and the member, to tell them apart.
func protocols(member string, names ...string) []*tapesv1.JoinGroupProtocol {
	var out []*tapesv1.JoinGroupProtocol
	for _, n := range names {
		out = append(out, &tapesv1.JoinGroupProtocol{Name: n, Metadata: []byte(member + "/" + n)})
	}
	return out
}

// TestProtocolVote: the protocol is Kafka's vote (each member's first
// protocol every member supports; most votes wins), not the leader's
// preference; a tie goes to the leader's preference.
func TestProtocolVote(t *testing.T) {
	for _, c := range []struct {
		name    string
		members map[string][]string // "a" leads
		want    string
	}{
		{"majority beats the leader's preference", map[string][]string{
			"a": {"cooperative-sticky", "range"}, "b": {"range", "cooperative-sticky"}, "c": {"range", "cooperative-sticky"}}, "range"},
		{"a protocol not everyone supports gets no vote", map[string][]string{
			"a": {"roundrobin", "range", "cooperative-sticky"}, "b": {"roundrobin", "cooperative-sticky", "range"},
			"c": {"cooperative-sticky", "range"}}, "cooperative-sticky"},
		{"tie: the leader's preference", map[string][]string{
			"a": {"range", "cooperative-sticky"}, "b": {"cooperative-sticky", "range"}}, "range"},
		{"tie, other order", map[string][]string{
			"a": {"cooperative-sticky", "range"}, "b": {"range", "cooperative-sticky"}}, "cooperative-sticky"},
		{"three-way tie", map[string][]string{
			"a": {"x", "y", "z"}, "b": {"y", "z", "x"}, "c": {"z", "x", "y"}}, "x"},
		{"one member", map[string][]string{"a": {"range", "cooperative-sticky"}}, "range"},
		{"no common protocol", map[string][]string{"a": {"range"}, "b": {"cooperative-sticky"}}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newGroup("g")
			g.leader = "a"
			for id, names := range c.members {
				g.members[id] = &member{id: id, protocols: protocols(id, names...)}
			}
			// The outcome must not depend on map order.
			for range 20 {
				if got := g.chooseProtocol(); got != c.want {
					t.Fatalf("chose %q, want %q", got, c.want)
				}
			}
		})
	}
}

// joinWith is e.join with the member's own protocol type and protocols.
func (e *env) joinWith(memberID, protocolType string, ps []*tapesv1.JoinGroupProtocol) chan joinOutcome {
	ch := make(chan joinOutcome, 1)
	req := joinReq(memberID)
	req.ProtocolType, req.Protocols = protocolType, ps
	go func() {
		resp, err := e.c.JoinGroup(ctx(e.t), req, "h")
		ch <- joinOutcome{resp, err}
	}()
	for i := 0; i < 1000 && !e.joining(memberID) && len(ch) == 0; i++ {
		time.Sleep(time.Millisecond)
	}
	return ch
}

// memberID gets a member id through MEMBER_ID_REQUIRED.
func (e *env) memberID() string {
	e.t.Helper()
	_, err := e.c.JoinGroup(ctx(e.t), joinReq(""), "h")
	ke, ok := kerr.As(err)
	if !ok || ke.Code() != kerr.MemberIDRequired {
		e.t.Fatalf("first join: %v", err)
	}
	return ke.Detail.MemberId
}

// TestOpaqueBytesRoundTrip: two members with different protocol lists
// join; the leader gets every member's metadata for the voted protocol, as
// sent; its SyncGroup's assignment bytes reach each member unchanged, with
// the protocol type and name; DescribeGroups shows both.
func TestOpaqueBytesRoundTrip(t *testing.T) {
	e := newEnv(t, &memLog{term: 1})
	a := e.memberID()
	ra := wait(t, e.joinWith(a, "consumer", protocols(a, "cooperative-sticky", "range")))
	if ra.err != nil {
		t.Fatal(ra.err)
	}
	if _, err := e.c.SyncGroup(ctx(t), &tapesv1.SyncGroupRequest{GroupId: "g", GenerationId: 1, MemberId: a,
		Assignments: []*tapesv1.MemberAssignment{{MemberId: a, Assignment: []byte{0, 1}}}}); err != nil {
		t.Fatal(err)
	}
	b := e.memberID()
	jb := e.joinWith(b, "consumer", protocols(b, "range"))
	e.waitState(PreparingRebalance)
	ja := e.joinWith(a, "consumer", protocols(a, "cooperative-sticky", "range"))
	ra, rb := wait(t, ja), wait(t, jb)
	if ra.err != nil || rb.err != nil {
		t.Fatal(ra.err, rb.err)
	}
	if ra.resp.ProtocolName != "range" || ra.resp.ProtocolType != "consumer" || rb.resp.ProtocolName != "range" || ra.resp.LeaderId != a {
		t.Fatalf("join answers %+v / %+v; want protocol range of type consumer, leader %s", ra.resp, rb.resp, a)
	}
	got := map[string]string{}
	for _, m := range ra.resp.Members {
		got[m.MemberId] = string(m.Metadata)
	}
	if got[a] != a+"/range" || got[b] != b+"/range" || len(got) != 2 {
		t.Fatalf("leader got metadata %q; want each member's for range", got)
	}
	// Bytes no consumer would send: the coordinator must not look.
	assignA, assignB := []byte{0xff, 0, 0xfe}, []byte("not a consumer assignment")
	done := make(chan *tapesv1.SyncGroupResponse, 1)
	go func() {
		resp, err := e.c.SyncGroup(ctx(t), &tapesv1.SyncGroupRequest{GroupId: "g", GenerationId: 2, MemberId: b})
		if err != nil {
			t.Error(err)
		}
		done <- resp
	}()
	resp, err := e.c.SyncGroup(ctx(t), &tapesv1.SyncGroupRequest{GroupId: "g", GenerationId: 2, MemberId: a, ProtocolType: "consumer", ProtocolName: "range",
		Assignments: []*tapesv1.MemberAssignment{{MemberId: a, Assignment: assignA}, {MemberId: b, Assignment: assignB}}})
	if err != nil || !bytes.Equal(resp.Assignment, assignA) || resp.ProtocolName != "range" || resp.ProtocolType != "consumer" {
		t.Fatalf("leader's sync: %+v %v", resp, err)
	}
	if rb := wait(t, done); !bytes.Equal(rb.GetAssignment(), assignB) {
		t.Fatalf("follower got %q, want %q", rb.GetAssignment(), assignB)
	}
	d, err := e.c.DescribeGroup(ctx(t), "g")
	if err != nil || d.Protocol != "range" || d.ProtocolType != "consumer" || len(d.Members) != 2 {
		t.Fatalf("describe %+v %v", d, err)
	}
	for _, m := range d.Members {
		want := map[string][]byte{a: assignA, b: assignB}[m.MemberId]
		if !bytes.Equal(m.Assignment, want) || string(m.Metadata) != m.MemberId+"/range" {
			t.Errorf("described member %s: metadata %q assignment %q", m.MemberId, m.Metadata, m.Assignment)
		}
	}
	// A Stable re-sync answers the same bytes again.
	resp, err = e.c.SyncGroup(ctx(t), &tapesv1.SyncGroupRequest{GroupId: "g", GenerationId: 2, MemberId: b})
	if err != nil || !bytes.Equal(resp.Assignment, assignB) {
		t.Fatalf("re-sync: %+v %v", resp, err)
	}
}

// TestInconsistentGroupProtocol: a member of another protocol type, or with
// no protocol every member supports, is refused; so is a SyncGroup naming
// another protocol; the group goes on.
func TestInconsistentGroupProtocol(t *testing.T) {
	e := newEnv(t, &memLog{term: 1})
	a := e.memberID()
	if r := wait(t, e.joinWith(a, "consumer", protocols(a, "range", "cooperative-sticky"))); r.err != nil {
		t.Fatal(r.err)
	}
	for _, c := range []struct {
		name         string
		protocolType string
		names        []string
	}{
		{"other protocol type", "connect", []string{"range"}},
		{"no protocol type", "", []string{"range"}},
		{"no common protocol", "consumer", []string{"roundrobin", "sticky"}},
		{"no protocols", "consumer", nil},
	} {
		req := joinReq("")
		req.ProtocolType, req.Protocols = c.protocolType, protocols("x", c.names...)
		_, err := e.c.JoinGroup(ctx(t), req, "h")
		if !kerr.Is(err, kerr.InconsistentGroupProtocol) {
			t.Errorf("%s: %v; want INCONSISTENT_GROUP_PROTOCOL", c.name, err)
		}
	}
	for _, c := range []struct{ typ, name string }{{"connect", ""}, {"", "cooperative-sticky"}} {
		_, err := e.c.SyncGroup(ctx(t), &tapesv1.SyncGroupRequest{GroupId: "g", GenerationId: 1, MemberId: a, ProtocolType: c.typ, ProtocolName: c.name})
		wantCode(t, err, kerr.InconsistentGroupProtocol)
	}
	if _, err := e.c.SyncGroup(ctx(t), &tapesv1.SyncGroupRequest{GroupId: "g", GenerationId: 1, MemberId: a, ProtocolType: "consumer", ProtocolName: "range"}); err != nil {
		t.Fatal(err)
	}
	// A member sharing one protocol is welcome.
	b := e.memberID()
	jb := e.joinWith(b, "consumer", protocols(b, "roundrobin", "cooperative-sticky"))
	e.waitState(PreparingRebalance)
	ra := wait(t, e.joinWith(a, "consumer", protocols(a, "range", "cooperative-sticky")))
	if rb := wait(t, jb); ra.err != nil || rb.err != nil || ra.resp.ProtocolName != "cooperative-sticky" {
		t.Fatalf("joins %+v %v / %v", ra.resp, ra.err, rb.err)
	}
}

// TestLoadsTypedFormatRecord: a group record as the typed format wrote it
// (subscription and assignment as protobuf fields) loads, and its member
// carries on: its metadata and assignment come out in Kafka's consumer
// protocol.
func TestLoadsTypedFormatRecord(t *testing.T) {
	key := `{"kind":"group","group":"g","partition":0}`
	value := `{"protocolType":"consumer","protocol":"cooperative-sticky","generationId":4,"leaderId":"c-1",` +
		`"members":[{"memberId":"c-1","clientId":"c","host":"127.0.0.1","sessionTimeoutMs":3000,"rebalanceTimeoutMs":5000,` +
		`"subscription":{"topics":["orders"],"owned":[{"topic":"orders","partitions":[2,0]}],"generation":3},` +
		`"assignment":[{"topic":"orders","partitions":[0,1,2]}]}]}`
	offset := `{"kind":"offset","group":"g","topic":"orders","partition":1}`
	l := &memLog{term: 1, recs: []Record{{Key: []byte(key), Value: []byte(value)}, {Key: []byte(offset), Value: []byte(`{"offset":"17"}`)}}}
	e := newEnv(t, l)
	d, err := e.c.DescribeGroup(ctx(t), "g")
	if err != nil || d.State != string(Stable) || d.GenerationId != 4 || d.Protocol != "cooperative-sticky" || len(d.Members) != 1 {
		t.Fatalf("loaded %+v %v", d, err)
	}
	sub, err := consumerproto.DecodeSubscription(d.Members[0].Metadata)
	if err != nil {
		t.Fatal(err)
	}
	want := []assign.TopicPartition{{Topic: "orders", Partition: 0}, {Topic: "orders", Partition: 2}}
	if len(sub.Topics) != 1 || sub.Topics[0] != "orders" || sub.Generation != 3 || !slices.Equal(sub.Owned, want) {
		t.Fatalf("metadata decodes to %+v", sub)
	}
	a, err := consumerproto.DecodeAssignment(d.Members[0].Assignment)
	if err != nil || len(a.Partitions) != 3 {
		t.Fatalf("assignment decodes to %+v %v", a, err)
	}
	if err := e.heartbeat("c-1", 4); err != nil {
		t.Fatal(err)
	}
	resp, err := e.c.SyncGroup(ctx(t), &tapesv1.SyncGroupRequest{GroupId: "g", GenerationId: 4, MemberId: "c-1"})
	if err != nil || !bytes.Equal(resp.Assignment, d.Members[0].Assignment) {
		t.Fatalf("re-sync %v %v", resp, err)
	}
	if got := e.offsetsOf("g", 1)[1]; got != 17 {
		t.Fatalf("offset %d", got)
	}
	// Its next generation is written in today's format, and loads again.
	if err := e.commit("c-1", 4, 18); err != nil {
		t.Fatal(err)
	}
	r := wait(t, e.joinWith("c-1", "consumer", protocols("c-1", "cooperative-sticky")))
	if r.err != nil || r.resp.GenerationId != 5 {
		t.Fatalf("rejoin %+v %v", r.resp, r.err)
	}
	if _, err := e.sync("c-1", 5, map[string][]int32{"c-1": {0, 1, 2}}); err != nil {
		t.Fatal(err)
	}
	last := l.recs[len(l.recs)-1]
	if bytes.Contains(last.Value, []byte(`"subscription"`)) || !bytes.Contains(last.Value, []byte(`"memberAssignment"`)) {
		t.Fatalf("new group record %s", last.Value)
	}
	l.setTerm(2)
	e2 := newEnv(t, l)
	d, err = e2.c.DescribeGroup(ctx(t), "g")
	if err != nil || d.GenerationId != 5 || len(d.Members) != 1 || string(d.Members[0].Assignment) != string(partitionBytes([]int32{0, 1, 2})) {
		t.Fatalf("reloaded %+v %v", d, err)
	}
}

// TestJoinWithAssignedMemberID: a join without member id that asks for one
// (Kafka's JoinGroup v0-v3, before KIP-394) joins at once and learns its id
// from the answer; without asking it gets MEMBER_ID_REQUIRED.
func TestJoinWithAssignedMemberID(t *testing.T) {
	e := newEnv(t, &memLog{term: 1})
	req := joinReq("")
	req.AssignMemberId = true
	resp, err := e.c.JoinGroup(ctx(t), req, "h")
	if err != nil || resp.MemberId == "" || resp.LeaderId != resp.MemberId || resp.GenerationId != 1 || len(resp.Members) != 1 {
		t.Fatalf("join: %+v %v; want generation 1 led by the new member", resp, err)
	}
	if _, err := e.sync(resp.MemberId, 1, map[string][]int32{resp.MemberId: {0}}); err != nil {
		t.Fatal(err)
	}
	if err := e.heartbeat(resp.MemberId, 1); err != nil {
		t.Fatal(err)
	}
	_, err = e.c.JoinGroup(ctx(t), joinReq(""), "h")
	wantCode(t, err, kerr.MemberIDRequired)
}
