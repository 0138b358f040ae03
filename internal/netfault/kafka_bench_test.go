package netfault

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/kafkawire"
)

// fetchBytes is the size of the records each Fetch answer of kafkaBroker
// carries.
const fetchBytes = 1 << 20

// kafkaBroker serves Metadata (3 brokers, 10 topics of 6 partitions, as a
// small cluster answers) and Fetch (one partition of fetchBytes bytes, which
// a Kafka link passes without decoding) through kafkawire, the broker's own
// server. It returns its address.
func kafkaBroker(tb testing.TB) string {
	tb.Helper()
	srv := kafkawire.NewServer(kafkawire.Config{})
	md := metadataResponse(12)
	for i := range 10 {
		t := kmsg.NewMetadataResponseTopic()
		t.Topic = kmsg.StringPtr("topic-" + strconv.Itoa(i))
		for p := range int32(6) {
			pt := kmsg.NewMetadataResponseTopicPartition()
			pt.Partition, pt.Leader, pt.Replicas, pt.ISR = p, p%3+1, []int32{1, 2, 3}, []int32{1, 2, 3}
			t.Partitions = append(t.Partitions, pt)
		}
		md.Topics = append(md.Topics, t)
	}
	srv.Register(3, 0, 12, func(_ context.Context, req *kafkawire.Request) kafkawire.Reply {
		r := *md
		r.Brokers = append([]kmsg.MetadataResponseBroker(nil), md.Brokers...)
		return kafkawire.Respond(&r)
	})
	records := make([]byte, fetchBytes)
	srv.Register(1, 4, 12, func(_ context.Context, req *kafkawire.Request) kafkawire.Reply {
		r := kmsg.NewPtrFetchResponse()
		t := kmsg.NewFetchResponseTopic()
		t.Topic = "t"
		p := kmsg.NewFetchResponseTopicPartition()
		p.RecordBatches = records
		t.Partitions = append(t.Partitions, p)
		r.Topics = append(r.Topics, t)
		return kafkawire.Respond(r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go srv.Serve(ln)
	tb.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// rawKafka is a minimal client: requests written with kmsg's formatter,
// answers read as frames (size prefix, body).
type rawKafka struct {
	c    net.Conn
	r    *bufio.Reader
	fmt  *kmsg.RequestFormatter
	buf  []byte
	corr int32
}

func dialRaw(tb testing.TB, addr string) *rawKafka {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return &rawKafka{c: c, r: bufio.NewReaderSize(c, 64<<10), fmt: kmsg.NewRequestFormatter()}
}

func (k *rawKafka) send(tb testing.TB, req kmsg.Request) {
	k.corr++
	k.buf = k.fmt.AppendRequest(k.buf[:0], req, k.corr)
	if _, err := k.c.Write(k.buf); err != nil {
		tb.Fatal(err)
	}
}

// recv reads one answer frame and returns its size.
func (k *rawKafka) recv(tb testing.TB) int {
	var size [4]byte
	if _, err := io.ReadFull(k.r, size[:]); err != nil {
		tb.Fatal(err)
	}
	n := int(binary.BigEndian.Uint32(size[:]))
	if _, err := k.r.Discard(n); err != nil {
		tb.Fatal(err)
	}
	return n
}

// benchTargets runs f against the broker directly, through a plain link
// and through a Kafka link (whose resolver answers a fixed address).
func benchTargets(b *testing.B, f func(b *testing.B, addr string)) {
	broker := kafkaBroker(b)
	b.Run("direct", func(b *testing.B) { f(b, broker) })
	b.Run("link", func(b *testing.B) {
		l, err := Listen(broker, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		f(b, l.Addr())
	})
	b.Run("kafka-link", func(b *testing.B) {
		l, err := ListenKafka(broker, nil, func(node int32, _ string, _ int32) (string, error) {
			return "127.0.0.1:" + strconv.Itoa(int(20000+node)), nil
		})
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		f(b, l.Addr())
	})
}

// BenchmarkKafkaMetadata is one Metadata v12 round trip at a time (its
// time per op is the latency), and 16 in flight on one connection
// (Metadata answers/s), each answer rewritten by the Kafka link.
func BenchmarkKafkaMetadata(b *testing.B) {
	req := kmsg.NewPtrMetadataRequest()
	req.SetVersion(12)
	for _, inFlight := range []int{1, 16} {
		b.Run("inflight"+strconv.Itoa(inFlight), func(b *testing.B) {
			benchTargets(b, func(b *testing.B, addr string) {
				k := dialRaw(b, addr)
				n := 0
				for b.Loop() {
					if n == 0 {
						for range inFlight {
							k.send(b, req)
						}
						n = inFlight
					}
					k.recv(b)
					k.send(b, req)
				}
				for range n {
					k.recv(b)
				}
			})
		})
	}
}

// BenchmarkKafkaPassThrough is Fetch answers of 1 MiB passing through
// (4 in flight): bytes/s of what a Kafka link does not rewrite.
func BenchmarkKafkaPassThrough(b *testing.B) {
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(12)
	benchTargets(b, func(b *testing.B, addr string) {
		k := dialRaw(b, addr)
		const inFlight = 4
		for range inFlight {
			k.send(b, req)
		}
		b.SetBytes(fetchBytes)
		for b.Loop() {
			k.recv(b)
			k.send(b, req)
		}
		for range inFlight {
			k.recv(b)
		}
	})
}
