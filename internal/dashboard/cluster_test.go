package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/eventually"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// postAction posts an action with the page's token, as a script does, and
// returns the HTTP status and the answer.
func postAction(t *testing.T, base, token string, a map[string]any) (int, map[string]any) {
	t.Helper()
	body, _ := json.Marshal(a)
	req, err := http.NewRequest(http.MethodPost, base+"/api/action", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(TokenHeader, token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%v: answer is not JSON: %v", a, err)
	}
	return resp.StatusCode, out
}

func getState(t *testing.T, base string) (*Snapshot, []Entry) {
	t.Helper()
	resp, err := http.Get(base + "/api/state")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s struct {
		Snapshot
		Timeline []Entry `json:"timeline"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return &s.Snapshot, s.Timeline
}

// waitState polls /api/state until cond holds.
func waitState(t *testing.T, base, what string, d time.Duration, cond func(s *Snapshot) bool) *Snapshot {
	t.Helper()
	var s *Snapshot
	eventually.Nil(t, d, what, func() error {
		s, _ = getState(t, base)
		if cond(s) {
			return nil
		}
		b, _ := json.MarshalIndent(s, "", " ")
		if len(b) > 6000 {
			b = b[:6000]
		}
		return fmt.Errorf("state:\n%s", b)
	})
	return s
}

func mustOK(t *testing.T, base, token string, a map[string]any) string {
	t.Helper()
	code, out := postAction(t, base, token, a)
	if code != http.StatusOK || out["ok"] != true {
		t.Fatalf("%v: %d %v", a, code, out)
	}
	return fmt.Sprint(out["message"])
}

// buildCluster builds the binaries for a real cluster (skipped with
// -short) and returns their directory.
func buildCluster(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real cluster")
	}
	bin, cleanup, err := testcluster.Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	return bin
}

// servePage serves the live page of e's cluster (cfg with its Cluster and
// Client set) on a loopback port until the test ends, and returns its
// address and token.
func servePage(t *testing.T, e *testcluster.Env, cfg Config) (base, token string) {
	t.Helper()
	cl, err := client.New(client.Config{Bootstrap: e.C.Bootstrap(), AddressMap: map[string]string{},
		RequestTimeout: time.Second, MetadataMaxAge: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	cfg.Cluster, cfg.Client = e.C, cl
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis) }()
	// Registered after the cluster's cleanup, so run before it: the page
	// stops first.
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + lis.Addr().String(), srv.Token()
}

// TestLiveCluster: against real brokers, a producer and a consumer
// started through /api/action show in /api/state, with the records on the
// tapes, the group, the sink's counters and the CLI's texts; a reset is
// refused while the consumer is a member and done once it stopped; a
// one-way cut shows on the links.
func TestLiveCluster(t *testing.T) {
	bin := buildCluster(t)
	e := testcluster.StartLinked(t, bin, 3, testcluster.FastBrokerArgs...)
	e.CreateTopic("orders", 3, 3, map[string]string{"min.insync.replicas": "2"})
	base, token := servePage(t, e, Config{Producerd: filepath.Join(bin, "producerd"),
		Consumerd: filepath.Join(bin, "consumerd"), Chaos: filepath.Join(bin, "chaos")})

	s := waitState(t, base, "3 brokers and the tapes of orders", 20*time.Second, func(s *Snapshot) bool {
		return len(s.Brokers) == 3 && len(s.Topics) == 1 && len(s.Topics[0].Partitions) == 3 && s.Topics[0].Partitions[0].Leader > 0
	})
	if !strings.Contains(s.DescribeTopics, "Topic: orders  TopicId:") || !strings.Contains(s.DescribeTopics, "Partition: 2  Leader:") {
		t.Fatalf("describeTopics:\n%s", s.DescribeTopics)
	}

	if msg := mustOK(t, base, token, map[string]any{"action": "producer-start", "rate": 200, "acks": "all", "idempotent": true}); !strings.Contains(msg, "producer-1") {
		t.Fatalf("producer-start: %q", msg)
	}
	if msg := mustOK(t, base, token, map[string]any{"action": "consumer-start", "recordsPerPoll": 10}); !strings.Contains(msg, "consumer-1") {
		t.Fatalf("consumer-start: %q", msg)
	}
	s = waitState(t, base, "the producer, the consumer, the group, the sink", 60*time.Second, func(s *Snapshot) bool {
		if len(s.Producers) != 1 || len(s.Consumers) != 1 || len(s.Groups) != 1 {
			return false
		}
		p, c, g := s.Producers[0], s.Consumers[0], s.Groups[0]
		records := 0
		for _, pp := range s.Topics[0].Partitions {
			records += len(pp.Records)
		}
		return p.Name == "producer-1" && p.State == "running" && p.Acked > 0 && p.Acks == "all" && p.Idempotent &&
			c.Name == "consumer-1" && c.State == "running" && len(c.Partitions) == 3 && c.Processed > 0 && c.Group == "demo" &&
			g.Group == "demo" && len(g.Members) == 1 && g.Members[0].ClientID == "consumer-1" && len(g.Committed["orders"]) > 0 &&
			records > 0 && s.Sink.Delivered != nil && *s.Sink.Delivered > 0 && len(s.Effects) > 0 &&
			s.Sink.ActiveConsumers != nil && *s.Sink.ActiveConsumers == 1 && s.Sink.NeverProcessed != nil &&
			strings.Contains(s.DescribeGroups, "CURRENT-OFFSET") && strings.Contains(s.DescribeGroups, "consumer-1")
	})
	for _, pp := range s.Topics[0].Partitions {
		if len(pp.ReplicaEnds) != 3 || len(pp.ISR) != 3 {
			t.Errorf("orders-%d: replica ends %v, ISR %v", pp.Partition, pp.ReplicaEnds, pp.ISR)
		}
		// No transactions: the LSO is the high watermark, both readers
		// read the same (as of the tape's read, at its own high watermark).
		n := int64(len(pp.Records))
		if n > 0 && (pp.LastStableLag != 0 || pp.LastStableSince != 0 || len(pp.Readers) != 2 || pp.LastStable > pp.HighWatermark ||
			pp.Readers[0] != (TapeReader{Isolation: "read_uncommitted", Position: pp.LastStable, Records: n}) ||
			pp.Readers[1] != (TapeReader{Isolation: "read_committed", Position: pp.LastStable, Records: n})) {
			t.Errorf("orders-%d without transactions: LSO %d lag %d since %d, readers %+v (high watermark %d, %d records)",
				pp.Partition, pp.LastStable, pp.LastStableLag, pp.LastStableSince, pp.Readers, pp.HighWatermark, n)
		}
		for _, r := range pp.Records {
			if r.Control != "" || r.Txn != "" {
				t.Errorf("orders-%d: record %+v marked as a transaction's", pp.Partition, r)
			}
			if r.Offset >= pp.HighWatermark || r.EventID == "" || !strings.HasPrefix(r.EventID, "producer-1-") {
				t.Errorf("orders-%d: record %+v (high watermark %d)", pp.Partition, r, pp.HighWatermark)
			}
		}
	}

	// Members: refused, as the CLI refuses.
	code, out := postAction(t, base, token, map[string]any{"action": "reset-offsets", "group": "demo", "topic": "orders", "partition": 0, "offset": 0})
	if code != http.StatusConflict || !strings.Contains(fmt.Sprint(out["error"]), "reset-offsets: group demo has 1 active member") {
		t.Fatalf("reset-offsets with a member: %d %v", code, out)
	}

	// A one-way cut: what broker-1 sends to broker-2.
	mustOK(t, base, token, map[string]any{"action": "cut", "from": "broker-1", "to": "broker-2", "oneWay": true})
	waitState(t, base, "the one-way cut on the links", 5*time.Second, func(s *Snapshot) bool {
		modes := map[string]string{}
		for _, l := range s.Links {
			modes[l.From+">"+l.To] = l.Mode
		}
		return modes["broker-2>broker-1"] == "drop-back" && modes["broker-1>broker-2"] == "drop-forward" && modes["broker-1>broker-3"] == "pass"
	})
	mustOK(t, base, token, map[string]any{"action": "heal"})

	mustOK(t, base, token, map[string]any{"action": "consumer-stop", "name": "consumer-1"})
	waitState(t, base, "consumer-1 stopped", 20*time.Second, func(s *Snapshot) bool {
		return len(s.Consumers) == 1 && s.Consumers[0].State == "stopped"
	})
	// Without members the reset is done (and clamped to the log).
	msg := mustOK(t, base, token, map[string]any{"action": "reset-offsets", "group": "demo", "topic": "orders", "partition": 0, "offset": 0})
	if !strings.Contains(msg, "orders-0 reset to offset 0") {
		t.Fatalf("reset-offsets: %q", msg)
	}
	waitState(t, base, "the committed offset 0", 10*time.Second, func(s *Snapshot) bool {
		return len(s.Groups) == 1 && s.Groups[0].Committed["orders"][0] == 0
	})

	// The second prediction: A1 then B1, three times, each run's order from
	// the consumers' histories.
	msg = mustOK(t, base, token, map[string]any{"action": "predict-order", "answer": "A1", "runs": 3})
	if !strings.Contains(msg, "you predicted A1 first; A1 was processed first in ") || strings.Count(msg, ": A1 then B1")+strings.Count(msg, ": B1 then A1") != 3 {
		t.Fatalf("predict-order: %q", msg)
	}
	t.Logf("predict-order: %s", msg)

	mustOK(t, base, token, map[string]any{"action": "producer-stop", "name": "producer-1"})
	waitState(t, base, "producer-1 stopped", 20*time.Second, func(s *Snapshot) bool {
		return len(s.Producers) == 1 && s.Producers[0].State == "stopped"
	})
	if _, err := os.Stat(filepath.Join(e.Dir, "histories", "producer-1.jsonl")); err != nil {
		t.Errorf("the producer's history: %v", err)
	}
	_, timeline := getState(t, base)
	var texts []string
	for _, en := range timeline {
		texts = append(texts, en.Kind+": "+en.Text)
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{"fault: producer-1 started", "fault: consumer-1 started", "fault: links: ", "fault: links healed",
		"fault: consumer-1 exited (exit status 0)", "rebalance: group demo generation"} {
		if !strings.Contains(all, want) {
			t.Errorf("the timeline lacks %q:\n%s", want, all)
		}
	}
}
