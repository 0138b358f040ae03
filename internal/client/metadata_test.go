package client

import (
	"slices"
	"testing"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

// TestRefreshAsksOnlyForTopicsOfInterest (issue 15.1): a client producing
// to topic a never asks for b's metadata, even when the cache goes stale
// and refreshes; once it also produces to b, a refresh asks for both; a
// refresh with nothing of interest asks for brokers only.
func TestRefreshAsksOnlyForTopicsOfInterest(t *testing.T) {
	fc := newFakeCluster(t, 2)
	fc.setTopic("a", 1, 1, 2)
	fc.setTopic("b", 1, 2)
	cl := fc.client()
	ctx := testCtx(t)

	if err := cl.RefreshMetadata(ctx); err != nil {
		t.Fatal(err)
	}
	for _, req := range fc.requestedMetadata() {
		if !req.GetNoTopics() || len(req.GetTopics()) != 0 {
			t.Errorf("refresh with no topic of interest sent %v, want brokers only (no_topics)", req)
		}
	}

	for p := range int32(2) {
		if _, err := cl.Produce(ctx, &tapesv1.ProduceRequest{Topic: "a", Partition: p, Acks: AcksAll}); err != nil {
			t.Fatalf("produce a-%d: %v", p, err)
		}
	}
	// a's leaders move and the cache goes stale (as after a transport
	// failure): the next produce refreshes, still asking for a alone.
	fc.setTopic("a", 2, 2, 1)
	cl.meta.markStale()
	if _, err := cl.Produce(ctx, &tapesv1.ProduceRequest{Topic: "a", Partition: 0, Acks: AcksAll}); err != nil {
		t.Fatalf("produce a-0 after the move: %v", err)
	}
	reqs := fc.requestedMetadata()
	if len(reqs) < 2 {
		t.Fatalf("%d metadata requests for a first lookup and a stale cache, want at least 2", len(reqs))
	}
	for _, req := range reqs {
		if !slices.Equal(req.GetTopics(), []string{"a"}) || req.GetNoTopics() {
			t.Errorf("producing to a sent metadata request %v, want topics [a] only", req)
		}
	}

	if _, err := cl.Partitions(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := cl.RefreshMetadata(ctx); err != nil {
		t.Fatal(err)
	}
	reqs = fc.requestedMetadata()
	if len(reqs) == 0 || !slices.Equal(reqs[len(reqs)-1].GetTopics(), []string{"a", "b"}) {
		t.Errorf("refresh after looking up a and b sent %v, want topics [a b]", reqs)
	}
}

// TestListGroupsAndBrokerLookupAskForBrokersOnly (issue 15.1): ListGroups
// and a lookup of a broker by id need addresses, not topics: their
// Metadata requests carry no_topics, on a cluster that has topics.
func TestListGroupsAndBrokerLookupAskForBrokersOnly(t *testing.T) {
	fc := newFakeCluster(t, 2)
	fc.setTopic("a", 1, 1)
	fc.setTopic("b", 1, 2)
	cl := fc.client()
	ctx := testCtx(t)

	groups, err := cl.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, g := range groups {
		ids = append(ids, g.GetGroupId())
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"g1", "g2"}) {
		t.Errorf("ListGroups = %q, want [g1 g2] (one per broker)", ids)
	}
	// A fresh client knows no broker address yet.
	if _, err := fc.client().Broker(ctx, 2); err != nil {
		t.Fatal(err)
	}
	reqs := fc.requestedMetadata()
	if len(reqs) != 2 {
		t.Errorf("%d metadata requests, want 2 (ListGroups, then broker 2's address)", len(reqs))
	}
	for _, req := range reqs {
		if !req.GetNoTopics() || len(req.GetTopics()) != 0 {
			t.Errorf("metadata request %v, want brokers only (no_topics)", req)
		}
	}
}
