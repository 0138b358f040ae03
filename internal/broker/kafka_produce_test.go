package broker

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	fkerr "github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/kafkawire"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/replication"
)

// TestKafkaProduceResponseMapping: what each outcome answers, per version,
// as Kafka fills a ProduceResponse.
func TestKafkaProduceResponseMapping(t *testing.T) {
	req := kmsg.NewPtrProduceRequest()
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "orders"
	for p := range int32(5) {
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = p
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = []kmsg.ProduceRequestTopic{rt}
	results := [][]kafkaPartitionResult{{
		{res: replication.ProduceResult{BaseOffset: 42, LogStart: 7}},
		{res: replication.ProduceResult{BaseOffset: 3, LogStart: 0, Duplicate: true}},
		{err: kerr.NotLeader(2, "127.0.0.1:1", 9, "broker 1 is not the leader")},
		{err: kerr.NotLeader(3, "", 4, "broker 1 is not the leader")}, // leader 3 has no Kafka listener
		{err: kerr.New(kerr.NotEnoughReplicasAfterAppend, "ISR shrank")},
	}}
	endpoints := func(ids map[int32]bool) []kmsg.ProduceResponseBroker {
		var out []kmsg.ProduceResponseBroker
		if ids[2] {
			kb := kmsg.NewProduceResponseBroker()
			kb.NodeID, kb.Host, kb.Port = 2, "127.0.0.1", 9092
			out = append(out, kb)
		}
		return out
	}
	for _, version := range []int16{3, 7, 8, 9, 10, 11} {
		req.Version = version
		resp := kafkaProduceResponse(req, results, endpoints)
		if resp.Version != version || len(resp.Topics) != 1 || resp.Topics[0].Topic != "orders" || len(resp.Topics[0].Partitions) != 5 {
			t.Fatalf("v%d: %+v", version, resp)
		}
		ps := resp.Topics[0].Partitions
		for i, p := range ps {
			if p.Partition != int32(i) || p.LogAppendTime != -1 {
				t.Fatalf("v%d partition %d: %+v", version, i, p)
			}
		}
		if ps[0].ErrorCode != 0 || ps[0].BaseOffset != 42 || ps[0].LogStartOffset != 7 || ps[0].ErrorMessage != nil {
			t.Fatalf("v%d success: %+v", version, ps[0])
		}
		// A duplicate of an idempotent producer's batch is a success with
		// the original's offset, as Kafka answers it.
		if ps[1].ErrorCode != 0 || ps[1].BaseOffset != 3 {
			t.Fatalf("v%d duplicate: %+v", version, ps[1])
		}
		if ps[2].ErrorCode != fkerr.NotLeaderForPartition.Code || ps[2].BaseOffset != -1 || ps[2].LogStartOffset != -1 {
			t.Fatalf("v%d not leader: %+v", version, ps[2])
		}
		if ps[4].ErrorCode != fkerr.NotEnoughReplicasAfterAppend.Code {
			t.Fatalf("v%d after append: %+v", version, ps[4])
		}
		if got := ps[4].ErrorMessage != nil; got != (version >= 8) {
			t.Fatalf("v%d error message present: %v", version, got)
		}
		// v10+: the current leader when its endpoint is known, else -1;
		// the endpoints of those leaders only.
		wantLeader, wantEpoch, wantBrokers := int32(-1), int32(-1), 0
		if version >= 10 {
			wantLeader, wantEpoch, wantBrokers = 2, 9, 1
		}
		if cl := ps[2].CurrentLeader; cl.LeaderID != wantLeader || cl.LeaderEpoch != wantEpoch {
			t.Fatalf("v%d current leader %+v", version, cl)
		}
		if cl := ps[3].CurrentLeader; cl.LeaderID != -1 || cl.LeaderEpoch != -1 {
			t.Fatalf("v%d current leader without an endpoint %+v", version, cl)
		}
		if len(resp.Brokers) != wantBrokers || (wantBrokers == 1 && (resp.Brokers[0].NodeID != 2 || resp.Brokers[0].Port != 9092)) {
			t.Fatalf("v%d node endpoints %+v", version, resp.Brokers)
		}
		// What a client decodes at that version: the current leader is
		// carried from v10 only (a tagged field).
		again := kmsg.NewPtrProduceResponse()
		again.Version = version
		if err := again.ReadFrom(resp.AppendTo(nil)); err != nil {
			t.Fatalf("v%d does not decode: %v", version, err)
		}
		if cl := again.Topics[0].Partitions[2].CurrentLeader; cl.LeaderID != wantLeader && !(version < 10 && cl.LeaderID == 0) {
			t.Fatalf("v%d decoded current leader %+v", version, cl)
		}
	}
}

// TestKafkaProduceProposesPartitionsSideBySideInTurn: while the first
// request's batch to t-0 is being proposed (its Propose blocked, as when
// the Raft group's leader loop is busy writing), the same request's batch
// to t-1 is proposed, and the connection's next request is read; that
// request's batch to t-0 waits for the first one's to be proposed. The
// answers come back in request order.
func TestKafkaProduceProposesPartitionsSideBySideInTurn(t *testing.T) {
	const within = 30 * time.Second // generous: a loaded machine; the waits are for causes
	proposing := make(chan string, 8)
	release := make(chan struct{})
	var firstDone atomic.Bool
	var outOfTurn atomic.Bool
	prepare := func(req *kmsg.ProduceRequest, topic string, p kmsg.ProduceRequestTopicPartition) (kafkaProposal, int, error) {
		name := fmt.Sprintf("%s-%d %s", topic, p.Partition, p.Records) // Records: the request's tag
		return func(ctx context.Context) (replication.ProduceWait, error) {
			proposing <- name
			switch name {
			case "t-0 first":
				select {
				case <-release:
				case <-ctx.Done():
				}
				firstDone.Store(true)
			case "t-0 second":
				if !firstDone.Load() {
					outOfTurn.Store(true)
				}
			}
			return func(context.Context) (replication.ProduceResult, error) {
				return replication.ProduceResult{BaseOffset: 1}, nil
			}, nil
		}, 1, nil
	}
	srv := kafkawire.NewServer(kafkawire.Config{Logf: t.Logf})
	srv.Register(kmsg.Produce.Int16(), kafkaProduceMin, kafkaProduceMax, func(ctx context.Context, r *kafkawire.Request) kafkawire.Reply {
		return produceKafka(ctx, r, prepare, func(int16, time.Time, [][]kafkaPartitionResult) {}, func(map[int32]bool) []kmsg.ProduceResponseBroker { return nil })
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	request := func(tag string, partitions ...int32) *kmsg.ProduceRequest {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks, req.TimeoutMillis = 9, -1, 60_000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "t"
		for _, p := range partitions {
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Partition, rp.Records = p, []byte(tag)
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = []kmsg.ProduceRequestTopic{rt}
		return req
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(within))
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("test"))
	out := append(f.AppendRequest(nil, request("first", 0, 1), 1), f.AppendRequest(nil, request("second", 0), 2)...)
	if _, err := c.Write(out); err != nil { // pipelined, as a producer with 5 in flight
		t.Fatal(err)
	}
	seen := map[string]bool{}
	timeout := time.After(within)
	for !seen["t-1 first"] || !seen["t-0 first"] {
		select {
		case n := <-proposing:
			seen[n] = true
		case <-timeout:
			t.Fatalf("proposed %v with t-0's first batch held: want t-1's batch of the same request proposed beside it", seen)
		}
	}
	close(release)
	select {
	case n := <-proposing:
		if n != "t-0 second" {
			t.Fatalf("then proposed %q, want t-0 second", n)
		}
	case <-timeout:
		t.Fatal("the second request's batch to t-0 was never proposed")
	}
	if outOfTurn.Load() {
		t.Fatal("the second request's batch to t-0 was proposed before the first one's Propose returned")
	}
	br := bufio.NewReader(c)
	for _, want := range []int32{1, 2} {
		var size [4]byte
		if _, err := io.ReadFull(br, size[:]); err != nil {
			t.Fatal(err)
		}
		body := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(br, body); err != nil {
			t.Fatal(err)
		}
		if corr := int32(binary.BigEndian.Uint32(body)); corr != want {
			t.Fatalf("answer with correlation id %d, want %d (request order)", corr, want)
		}
	}
}
