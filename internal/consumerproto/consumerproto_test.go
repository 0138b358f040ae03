package consumerproto

import (
	"bytes"
	"encoding/hex"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/assign"
)

func tps(topic string, ps ...int32) []assign.TopicPartition {
	var out []assign.TopicPartition
	for _, p := range ps {
		out = append(out, assign.TopicPartition{Topic: topic, Partition: p})
	}
	return out
}

// TestDecodeSubscriptionEveryVersion decodes member metadata of versions
// 0-3 as kmsg (and so franz-go, whose consumer encodes with it) writes it,
// with the fields each version has: v0 topics and user data (old clients),
// v1 owned partitions (librdkafka's cooperative clients), v2 generation,
// v3 rack (the Java client since 3.x).
func TestDecodeSubscriptionEveryVersion(t *testing.T) {
	rack := "rack-a"
	for v := int16(0); v <= 4; v++ {
		m := kmsg.NewConsumerMemberMetadata()
		m.Version = v
		m.Topics = []string{"orders", "payments"}
		m.UserData = []byte{0, 0, 0, 7}
		m.OwnedPartitions = []kmsg.ConsumerMemberMetadataOwnedPartition{{Topic: "payments", Partitions: []int32{1}}, {Topic: "orders", Partitions: []int32{2, 0}}}
		m.Generation = 7
		m.Rack = &rack
		s, err := DecodeSubscription(m.AppendTo(nil))
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		wantOwned := []assign.TopicPartition(nil)
		wantGen, wantRack := int32(-1), ""
		if v >= 1 {
			wantOwned = append(tps("orders", 0, 2), tps("payments", 1)...)
		}
		if v >= 2 {
			wantGen = 7
		}
		if v >= 3 {
			wantRack = rack
		}
		if s.Version != v || !slices.Equal(s.Topics, m.Topics) || !bytes.Equal(s.UserData, m.UserData) ||
			!slices.Equal(s.Owned, wantOwned) || s.Generation != wantGen || s.Rack != wantRack {
			t.Errorf("v%d decodes to %+v; want owned %v generation %d rack %q", v, s, wantOwned, wantGen, wantRack)
		}
	}
}

// TestDecodeSubscriptionBytes decodes literal bytes (not written by kmsg):
// a v0 subscription with null user data, as kafka-python sends it, and a v1
// one with user data and owned partitions.
func TestDecodeSubscriptionBytes(t *testing.T) {
	v0, _ := hex.DecodeString("0000" + "00000001" + "0006" + hex.EncodeToString([]byte("orders")) + "ffffffff")
	s, err := DecodeSubscription(v0)
	if err != nil || s.Version != 0 || !slices.Equal(s.Topics, []string{"orders"}) || s.UserData != nil || s.Owned != nil || s.Generation != -1 {
		t.Fatalf("v0: %+v %v", s, err)
	}
	v1, _ := hex.DecodeString("0001" + "00000001" + "0001" + "74" + "00000002" + "abcd" +
		"00000001" + "0001" + "74" + "00000002" + "00000003" + "00000001")
	s, err = DecodeSubscription(v1)
	if err != nil || s.Version != 1 || !slices.Equal(s.Topics, []string{"t"}) || !bytes.Equal(s.UserData, []byte{0xab, 0xcd}) ||
		!slices.Equal(s.Owned, tps("t", 1, 3)) || s.Generation != -1 {
		t.Fatalf("v1: %+v %v", s, err)
	}
	for _, bad := range [][]byte{nil, {0}, v1[:len(v1)-2], {0, 0, 0xff, 0xff, 0xff, 0xfe}} {
		if _, err := DecodeSubscription(bad); err == nil {
			t.Errorf("%x decodes", bad)
		}
	}
}

// TestEncodeSubscription: what consumerd sends reads back through kmsg as
// v3 with every field.
func TestEncodeSubscription(t *testing.T) {
	b := EncodeSubscription(Subscription{Topics: []string{"orders"}, UserData: CooperativeUserData(5),
		Owned: append(tps("orders", 3, 1), tps("a", 0)...), Generation: 5, Rack: "r1"})
	var m kmsg.ConsumerMemberMetadata
	if err := m.ReadFrom(b); err != nil {
		t.Fatal(err)
	}
	if m.Version != 3 || !slices.Equal(m.Topics, []string{"orders"}) || !bytes.Equal(m.UserData, []byte{0, 0, 0, 5}) ||
		m.Generation != 5 || m.Rack == nil || *m.Rack != "r1" || len(m.OwnedPartitions) != 2 ||
		m.OwnedPartitions[0].Topic != "a" || !slices.Equal(m.OwnedPartitions[1].Partitions, []int32{1, 3}) {
		t.Fatalf("kmsg reads %+v", m)
	}
	// Nothing owned, no rack: an empty owned array and a null rack.
	s, err := DecodeSubscription(EncodeSubscription(Subscription{Topics: []string{"orders"}, Generation: -1}))
	if err != nil || s.Owned != nil || s.Rack != "" || s.Generation != -1 || s.UserData != nil {
		t.Fatalf("%+v %v", s, err)
	}
}

// TestAssignmentRoundTrip: assignments encode at the member's version
// (capped at 3) and decode from kmsg's encoding of any version; empty
// bytes are an empty assignment.
func TestAssignmentRoundTrip(t *testing.T) {
	want := append(tps("orders", 0, 2), tps("payments", 1)...)
	for v := int16(0); v <= 5; v++ {
		b := EncodeAssignment([]assign.TopicPartition{want[2], want[1], want[0]}, v)
		var m kmsg.ConsumerMemberAssignment
		if err := m.ReadFrom(b); err != nil {
			t.Fatal(err)
		}
		if m.Version != min(v, 3) || len(m.Topics) != 2 || m.Topics[0].Topic != "orders" || !slices.Equal(m.Topics[0].Partitions, []int32{0, 2}) {
			t.Fatalf("v%d: kmsg reads %+v", v, m)
		}
		km := kmsg.NewConsumerMemberAssignment()
		km.Version = v
		km.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: "payments", Partitions: []int32{1}}, {Topic: "orders", Partitions: []int32{2, 0}}}
		km.UserData = []byte("ud")
		a, err := DecodeAssignment(km.AppendTo(nil))
		if err != nil || a.Version != v || !slices.Equal(a.Partitions, want) || string(a.UserData) != "ud" {
			t.Fatalf("v%d decodes to %+v %v", v, a, err)
		}
	}
	if a, err := DecodeAssignment(nil); err != nil || a.Partitions != nil {
		t.Fatalf("empty: %+v %v", a, err)
	}
	if a, err := DecodeAssignment(EncodeAssignment(nil, 3)); err != nil || a.Partitions != nil || a.Version != 3 {
		t.Fatalf("none: %+v %v", a, err)
	}
	if _, err := DecodeAssignment([]byte{0, 0, 0, 0, 0, 9}); err == nil {
		t.Fatal("a truncated assignment decodes")
	}
}
