package systest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	fkerr "github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tapes-dev/tapes/internal/check"
	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/clusterfile"
	"github.com/tapes-dev/tapes/internal/eventually"
	"github.com/tapes-dev/tapes/internal/producer"
)

// kafkaAcks1Arg makes the test binary the acks=1 franz-go producer of
// TestKafkaAcks1LossNamedByCheck (see TestMain).
const kafkaAcks1Arg = "kafka-acks1-producer"

// kafkaAcks1Producer is a franz-go producer with acks=1 (not idempotent):
// with the launcher's {kafka-bootstrap}, a topic and a history path as
// arguments, it sends one record about every 2 ms to partition 0, each
// with an event_id header kacks1-HEX-N, and writes every outcome to the
// history file as producerd does (producer.HistoryLine, one JSON line),
// so that `chaos check` reads it. It runs until killed.
func kafkaAcks1Producer(args []string) int {
	if len(args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: kafka-acks1-producer BOOTSTRAP TOPIC HISTORY")
		return 2
	}
	topic := args[1]
	f, err := os.Create(args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(args[0], ",")...), kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(2*time.Millisecond), kgo.MetadataMinAge(100*time.Millisecond), kgo.RecordDeliveryTimeout(20*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	prefix := fmt.Sprintf("kacks1-%x", time.Now().UnixNano())
	var mu sync.Mutex // one history line at a time
	for n := int64(0); ; n++ {
		id, value := fmt.Sprintf("%s-%d", prefix, n), fmt.Sprintf("acks1-%d", n)
		sent := time.Now().UTC()
		r := &kgo.Record{Partition: 0, Value: []byte(value), Headers: []kgo.RecordHeader{{Key: producer.EventIDHeader, Value: []byte(id)}}}
		cl.Produce(context.Background(), r, func(r *kgo.Record, err error) {
			l := producer.HistoryLine{EventID: id, Value: value, Partition: 0, Offset: -1, Acks: "1", Status: producer.StatusOK, Attempts: 1, SentAt: sent}
			if err == nil {
				at := time.Now().UTC()
				l.Offset, l.AckedAt = r.Offset, &at
			} else {
				// kgo retried it (its attempts are not told): the outcome
				// is unknown unless the broker named a Kafka error.
				name := "REQUEST_TIMED_OUT"
				var ke *fkerr.Error
				if errors.As(err, &ke) {
					name = ke.Message
				}
				l.Status, l.Error, l.Attempts = producer.StatusError, &name, 2
			}
			b, _ := json.Marshal(l)
			mu.Lock()
			f.Write(append(b, '\n'))
			mu.Unlock()
		})
		time.Sleep(2 * time.Millisecond)
	}
}

// TestKafkaAcks1LossNamedByCheck (issue 10: acks=1 loss through the Kafka
// API): a franz-go acks=1 producer started under the launcher (`chaos
// start kacks1 -- PROG {kafka-bootstrap} ...`) writes to orders-0 while
// `chaos isolate --leader-of orders/0` cuts its leader off from the other
// brokers, not from the client. The isolated leader acknowledges records
// no follower has until it steps down; the others elect a new leader;
// after `chaos heal` the old leader follows and truncates them. `chaos
// check` over the producer's history and a full read names those
// acknowledged records as lost writes, with the offsets the old leader
// gave them, and each such offset now holds another record or none.
func TestKafkaAcks1LossNamedByCheck(t *testing.T) {
	dir := clusterUp(t)
	f, err := clusterfile.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	hist := filepath.Join(t.TempDir(), "kacks1.jsonl")
	if code, out := chaosCmd(t, dir, "start", "kacks1", "--", self, kafkaAcks1Arg, "{kafka-bootstrap}", "orders", hist); code != 0 {
		t.Fatalf("chaos start: %d\n%s", code, out)
	}
	defer chaosCmd(t, dir, "kill", "kacks1")
	log := filepath.Join(dir, "logs", "kacks1.log")
	acked := func() []producer.HistoryLine {
		ls, err := producer.ReadHistoryFile(hist)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		var ok []producer.HistoryLine
		for _, l := range ls {
			if l.Status == producer.StatusOK {
				ok = append(ok, l)
			}
		}
		return ok
	}
	waitAcked := func(what string, n int) {
		t.Helper()
		if err := eventually.Wait(60*time.Second, func() error {
			if got := len(acked()); got < n {
				return fmt.Errorf("%d acknowledged records, want %d", got, n)
			}
			return nil
		}); err != nil {
			data, _ := os.ReadFile(log)
			t.Fatalf("%s: %v; producer log:\n%s", what, err, tail(string(data), 4000))
		}
	}
	waitAcked("before the isolation", 200)

	cl, err := client.New(client.Config{Bootstrap: strings.Split(f.Bootstrap, ","), MetadataMaxAge: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	old := highestEpochLeader(cl, "orders", 0)
	if code, out := chaosCmd(t, dir, "isolate", "--leader-of", "orders/0"); code != 0 || !strings.Contains(out, fmt.Sprintf("isolated broker-%d", old)) {
		t.Fatalf("isolate the leader (broker-%d) of orders-0: %d\n%s", old, code, out)
	}
	isolated := len(acked())
	eventually.True(t, 30*time.Second, "orders-0 led by another broker than the isolated one", func() bool {
		l := highestEpochLeader(cl, "orders", 0)
		return l != old && l >= 0
	})
	// The client reaches the new leader while the old one stays cut off.
	waitAcked("while the leader is isolated", isolated+200)
	if code, out := chaosCmd(t, dir, "heal"); code != 0 {
		t.Fatalf("heal: %d\n%s", code, out)
	}
	// After the heal the old leader follows again: it is back in the ISR,
	// having truncated what only it had.
	eventually.Nil(t, 60*time.Second, "the old leader back in the ISR of orders-0", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		md, err := cl.Metadata(ctx, []string{"orders"}, false)
		if err != nil {
			return err
		}
		for _, tm := range md.Topics {
			for _, p := range tm.Partitions {
				if p.Partition == 0 && len(p.Isr) == 3 && p.LeaderId != old {
					return nil
				}
			}
		}
		return fmt.Errorf("orders-0: %v", md.Topics)
	})
	healed := len(acked())
	waitAcked("after the heal", healed+200)
	if code, out := chaosCmd(t, dir, "kill", "kacks1"); code != 0 {
		t.Fatalf("kill the producer: %d\n%s", code, out)
	}

	code, out := chaosCmd(t, dir, "check", "--producer-history", hist, "--topic", "orders", "--expect", "none", "--json")
	if code != 0 {
		t.Fatalf("chaos check: %d\n%s", code, out)
	}
	var res check.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("chaos check --json: %v\n%s", err, out)
	}
	t.Logf("chaos check: %d sent, %d acknowledged, %d in the log, counts %v", res.Sent, res.Acked, res.LogRecords, res.Counts)
	if res.Counts[check.LostWrite] == 0 {
		t.Fatalf("no lost write named after the acks=1 leader's isolation:\n%s", out)
	}
	// Every named loss is an acknowledged record of orders-0 at the
	// offset named, and that offset of the log holds another record now.
	byID := map[string]producer.HistoryLine{}
	for _, l := range acked() {
		byID[l.EventID] = l
	}
	full := e2eFullRead(t, cl, "orders", 0)
	var lost int
	for _, a := range res.Anomalies {
		if a.Kind != check.LostWrite {
			continue
		}
		if a.Partition != 0 || len(a.Offsets) != len(a.EventIDs) || len(a.Offsets) == 0 {
			t.Fatalf("lost write not named with its offsets: %+v", a)
		}
		for i, id := range a.EventIDs {
			l, ok := byID[id]
			if !ok || l.Offset != a.Offsets[i] {
				t.Fatalf("lost write %s at %d: the history acknowledged %+v", id, a.Offsets[i], l)
			}
			if got, ok := full[l.Offset]; ok && got == id {
				t.Fatalf("lost write %s is still at offset %d", id, l.Offset)
			}
			lost++
		}
	}
	t.Logf("chaos check names %d lost acks=1 writes with their offsets (%d acknowledged before the isolation, %d before the heal), e.g. %v",
		res.Counts[check.LostWrite], isolated, healed, res.Anomalies[0])
	if lost == 0 {
		t.Fatalf("no lost write listed:\n%s", out)
	}
}

// e2eFullRead reads partition p of topic from its log start to its high
// watermark and returns each offset's event_id.
func e2eFullRead(t *testing.T, cl *client.Client, topic string, p int32) map[int64]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	log, _, err := check.ReadTopic(ctx, cl, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]string{}
	for _, r := range log[p] {
		out[r.Offset] = r.EventID
	}
	return out
}
