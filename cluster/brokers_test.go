package main

import (
	"bytes"
	"testing"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

// runBrokers runs `cluster brokers ARGS` and returns stdout and stderr.
func runBrokers(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := (&brokersCommand{stdout: &out, stderr: &errOut}).Run(cmdCtx(t), args)
	return out.String(), errOut.String(), err
}

// `cluster brokers` and `cluster brokers list` print one row per broker,
// sorted by id, with the partitions each leads and holds a replica of.
func TestBrokersList(t *testing.T) {
	b := newMemBroker(t)
	b.brokers = []*tapesv1.BrokerInfo{
		{Id: 4, Address: "127.0.0.1:9404", Alive: true},
		{Id: 1, Address: b.addr, KafkaAddress: "127.0.0.1:9092", Alive: true},
		{Id: 2, Address: "127.0.0.1:9402", KafkaAddress: "127.0.0.1:9093"},
	}
	b.addTopic("orders", 3, 2, nil)
	placement := [][]int32{{1, 2}, {2, 4}, {4, 1}}
	b.replicas = func(_ string, p int32) (int32, []int32) { return placement[p][0], placement[p] }
	header := "ID ADDRESS KAFKA-ADDRESS STATE LEADER REPLICAS"
	want := [][]string{
		{"1", b.addr, "127.0.0.1:9092", "alive", "1", "2"},
		{"2", "127.0.0.1:9402", "127.0.0.1:9093", "down", "1", "2"},
		{"4", "127.0.0.1:9404", "-", "alive", "1", "2"},
	}
	for _, args := range [][]string{{"--bootstrap-server", b.addr}, {"list", "--bootstrap-server", b.addr}} {
		out, _, err := runBrokers(t, args...)
		if err != nil {
			t.Fatalf("brokers %q: %v", args, err)
		}
		got := tableCells(t, out, header)
		if len(got) != len(want) {
			t.Fatalf("brokers %q =\n%s", args, out)
		}
		for i := range want {
			for j := range want[i] {
				if got[i][j] != want[i][j] {
					t.Fatalf("brokers %q row %d = %q, want %q\n%s", args, i, got[i], want[i], out)
				}
			}
		}
	}
	if _, _, err := runBrokers(t, "list", "extra", "--bootstrap-server", b.addr); err == nil {
		t.Fatal("brokers list extra: no error")
	}
	if _, _, err := runBrokers(t, "add-ish"); err == nil {
		t.Fatal("brokers add-ish: no error")
	}
}
