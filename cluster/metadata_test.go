package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCommandsAskOnlyForTheTopicsTheyShow (issue 15.1): on a cluster with
// topics orders and other, produce, consume and describe of orders send
// Metadata requests that name orders alone (or no topic), never every
// topic; topics list, which shows every name, is the one that asks for all.
func TestCommandsAskOnlyForTheTopicsTheyShow(t *testing.T) {
	b := newMemBroker(t)
	b.addTopic("orders", 3, 1, nil)
	b.addTopic("other", 2, 1, nil)
	onlyOrders := func(what string) {
		t.Helper()
		reqs := b.requestedMetadata()
		if len(reqs) == 0 {
			t.Errorf("%s sent no metadata request", what)
		}
		for _, req := range reqs {
			if !slices.Equal(req.GetTopics(), []string{"orders"}) && !req.GetNoTopics() {
				t.Errorf("%s sent metadata request %v, want topics [orders] or no_topics", what, req)
			}
		}
	}

	if summary, err := runProduce(t, b.addr, strings.NewReader("one\ntwo"), "--topic", "orders"); err != nil {
		t.Fatalf("produce: %v (%s)", err, summary)
	}
	onlyOrders("produce --topic orders")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, errOut, err := runConsume(t, ctx, b.addr, "--topic", "orders", "--from-beginning", "--until-end"); err != nil {
		t.Fatalf("consume: %v (%s%s)", err, out, errOut)
	}
	onlyOrders("consume --topic orders")

	if out, errOut, err := runTopics(t, b.addr, "describe", "orders"); err != nil {
		t.Fatalf("describe: %v (%s%s)", err, out, errOut)
	}
	onlyOrders("topics describe orders")

	if out, errOut, err := runTopics(t, b.addr, "list"); err != nil || !strings.Contains(out, "other") {
		t.Fatalf("list: %q, %v (%s)", out, err, errOut)
	}
	for _, req := range b.requestedMetadata() {
		if len(req.GetTopics()) != 0 || req.GetNoTopics() {
			t.Errorf("topics list sent %v, want every topic", req)
		}
	}
}
