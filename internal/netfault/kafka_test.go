package netfault

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/eventually"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// requestFrame encodes r as a client sends it (size prefix included).
func requestFrame(r kmsg.Request, corr int32) []byte {
	return kmsg.NewRequestFormatter(kmsg.FormatterClientID("test")).AppendRequest(nil, r, corr)
}

// responseFrame encodes r as a broker answers (size, correlation id, the
// flexible header's tags but for ApiVersions, body).
func responseFrame(r kmsg.Response, corr int32) []byte {
	b := binary.BigEndian.AppendUint32(make([]byte, 4), uint32(corr))
	if r.IsFlexible() && r.Key() != 18 {
		b = append(b, 0)
	}
	b = r.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// brokersOf returns a response's broker addresses by node id.
func brokersOf(r kmsg.Response) map[int32]string {
	out := map[int32]string{}
	add := func(n int32, h string, p int32) { out[n] = net.JoinHostPort(h, strconv.Itoa(int(p))) }
	switch m := r.(type) {
	case *kmsg.MetadataResponse:
		for _, b := range m.Brokers {
			add(b.NodeID, b.Host, b.Port)
		}
	case *kmsg.FindCoordinatorResponse:
		if m.Version < 4 {
			add(m.NodeID, m.Host, m.Port)
		}
		for _, c := range m.Coordinators {
			add(c.NodeID, c.Host, c.Port)
		}
	}
	return out
}

func metadataResponse(v int16) *kmsg.MetadataResponse {
	m := kmsg.NewPtrMetadataResponse()
	m.SetVersion(v)
	for id := int32(1); id <= 3; id++ {
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port = id, "127.0.0.1", 9090+id
		if id == 2 {
			b.Rack = kmsg.StringPtr("rack-b")
		}
		m.Brokers = append(m.Brokers, b)
	}
	m.ControllerID = 2
	t := kmsg.NewMetadataResponseTopic()
	t.Topic = kmsg.StringPtr("orders")
	p := kmsg.NewMetadataResponseTopicPartition()
	p.Leader, p.LeaderEpoch, p.Replicas, p.ISR = 1, 7, []int32{1, 2, 3}, []int32{1, 2}
	t.Partitions = append(t.Partitions, p)
	m.Topics = append(m.Topics, t)
	return m
}

func findCoordinatorResponse(v int16) *kmsg.FindCoordinatorResponse {
	m := kmsg.NewPtrFindCoordinatorResponse()
	m.SetVersion(v)
	if v < 4 {
		m.NodeID, m.Host, m.Port = 3, "127.0.0.1", 9093
		return m
	}
	for i, g := range []string{"g1", "g2", "gone"} {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key, c.NodeID, c.Host, c.Port = g, int32(i+1), "127.0.0.1", 9091+int32(i)
		if g == "gone" {
			c.NodeID, c.Host, c.Port, c.ErrorCode = -1, "", -1, 15 // COORDINATOR_NOT_AVAILABLE
		}
		m.Coordinators = append(m.Coordinators, c)
	}
	return m
}

// linkPorts is a resolver giving broker N the address 127.0.0.1:2000N,
// recording its calls.
type linkPorts struct{ calls []string }

func (lp *linkPorts) resolve(node int32, host string, port int32) (string, error) {
	lp.calls = append(lp.calls, fmt.Sprintf("%d@%s:%d", node, host, port))
	return fmt.Sprintf("127.0.0.1:%d", 20000+node), nil
}

// through feeds the request frames to a connection's request stream and
// the response frames to its response stream, split into chunks of at
// most chunk bytes at random, and returns what the client receives and
// the whole frames counted each way.
func through(t *testing.T, resolve Resolver, reqs, resps []byte, chunk int) (out []byte, nreq, nresp int) {
	t.Helper()
	kc := newKafkaConn(resolve, discard)
	rq, rs := &requestStream{kc: kc}, &responseStream{kc: kc}
	rnd := rand.New(rand.NewPCG(1, uint64(chunk)))
	split := func(b []byte, f func([]byte)) {
		for len(b) > 0 {
			n := min(len(b), 1+rnd.IntN(chunk))
			// feed may keep a reference until the next call: give
			// it its own copy, as a pump's buffer is reused.
			f(append([]byte(nil), b[:n]...))
			b = b[n:]
		}
	}
	split(reqs, func(b []byte) {
		o, m, err := rq.feed(b)
		if err != nil || !bytes.Equal(o, b) {
			t.Fatalf("request stream changed the bytes (err %v)", err)
		}
		nreq += m
	})
	split(resps, func(b []byte) {
		o, m, err := rs.feed(b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, o...)
		nresp += m
	})
	return out, nreq, nresp
}

// decodeResponse decodes one response frame of key at version.
func decodeResponse(t *testing.T, frame []byte, key, v int16) (kmsg.Response, []byte) {
	t.Helper()
	size := int(binary.BigEndian.Uint32(frame))
	if len(frame) < 4+size {
		t.Fatalf("frame of %d bytes says %d", len(frame), size)
	}
	r := kmsg.ResponseForKey(key)
	r.SetVersion(v)
	body := frame[8 : 4+size]
	if r.IsFlexible() {
		body = body[1:]
	}
	if err := r.ReadFrom(body); err != nil {
		t.Fatalf("%s v%d: %v", kmsg.NameForKey(key), v, err)
	}
	return r, frame[4+size:]
}

// TestKafkaRewriteEveryVersion: every Metadata and FindCoordinator
// version kmsg knows has its brokers' addresses replaced by the
// resolver's, everything else kept, whether it arrives whole or a byte at
// a time; an identity resolver gives back the broker's bytes exactly.
func TestKafkaRewriteEveryVersion(t *testing.T) {
	type c struct {
		req  kmsg.Request
		resp func(v int16) kmsg.Response
	}
	for _, tc := range []c{
		{kmsg.NewPtrMetadataRequest(), func(v int16) kmsg.Response { return metadataResponse(v) }},
		{kmsg.NewPtrFindCoordinatorRequest(), func(v int16) kmsg.Response { return findCoordinatorResponse(v) }},
	} {
		key := tc.req.Key()
		for v := int16(0); v <= tc.req.MaxVersion(); v++ {
			tc.req.SetVersion(v)
			if fc, ok := tc.req.(*kmsg.FindCoordinatorRequest); ok {
				fc.CoordinatorKey, fc.CoordinatorKeys = "g1", []string{"g1", "g2", "gone"}
			}
			req := requestFrame(tc.req, 42)
			orig := tc.resp(v)
			resp := responseFrame(orig, 42)
			for _, chunk := range []int{1, 7, 1 << 20} {
				t.Run(fmt.Sprintf("%s/v%d/chunks%d", kmsg.NameForKey(key), v, chunk), func(t *testing.T) {
					var lp linkPorts
					out, nreq, nresp := through(t, lp.resolve, req, resp, chunk)
					if nreq != 1 || nresp != 1 {
						t.Errorf("counted %d requests and %d responses, want 1 and 1", nreq, nresp)
					}
					got, rest := decodeResponse(t, out, key, v)
					if len(rest) != 0 {
						t.Fatalf("%d bytes after the response", len(rest))
					}
					want := map[int32]string{}
					for n, a := range brokersOf(orig) {
						want[n] = a
						if n >= 0 {
							want[n] = fmt.Sprintf("127.0.0.1:%d", 20000+n)
						}
					}
					if g := brokersOf(got); fmt.Sprint(g) != fmt.Sprint(want) {
						t.Errorf("brokers %v, want %v", g, want)
					}
					// Everything but the addresses is the broker's:
					// rewriting the expected answer the same way
					// gives the same bytes.
					var again linkPorts
					if err := rewriteBrokers(orig, again.resolve); err != nil {
						t.Fatal(err)
					}
					if w := responseFrame(orig, 42); !bytes.Equal(out, w) {
						t.Errorf("rewritten frame differs from the broker's with the addresses replaced:\n got %x\nwant %x", out, w)
					}
					orig = tc.resp(v)

					same, _, _ := through(t, func(_ int32, h string, p int32) (string, error) {
						return net.JoinHostPort(h, strconv.Itoa(int(p))), nil
					}, req, resp, chunk)
					if !bytes.Equal(same, resp) {
						t.Errorf("the same addresses do not give the same bytes (kmsg round trip):\n got %x\nwant %x", same, resp)
					}
				})
			}
		}
	}
}

// TestKafkaPassThrough: requests and answers of other keys (ApiVersions,
// Produce, an unknown key) pass byte for byte, pipelined with rewritten
// ones and split at random, answers matched by correlation id; only the
// Metadata answer changes.
func TestKafkaPassThrough(t *testing.T) {
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(3)
	av.ClientSoftwareName, av.ClientSoftwareVersion = "t", "1"
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(12)
	pr := kmsg.NewPtrProduceRequest()
	pr.SetVersion(9)
	pr.Acks = 0                                                              // no answer
	unknown := []byte{0, 0, 0, 12, 0x03, 0xe7, 0, 0, 0, 0, 0, 5, 1, 2, 3, 4} // key 999, corr 5, 4 body bytes
	unknown[3] = byte(len(unknown) - 4)
	reqs := slicesConcat(requestFrame(av, 1), requestFrame(pr, 2), requestFrame(md, 3), unknown)

	avr := kmsg.NewPtrApiVersionsResponse()
	avr.SetVersion(3)
	avr.ApiKeys = []kmsg.ApiVersionsResponseApiKey{{ApiKey: 3, MinVersion: 0, MaxVersion: 12}}
	mdr := metadataResponse(12)
	unknownResp := []byte{0, 0, 0, 7, 0, 0, 0, 5, 9, 9, 9}
	resps := slicesConcat(responseFrame(avr, 1), responseFrame(mdr, 3), unknownResp)

	for _, chunk := range []int{1, 3, 64, 1 << 20} {
		var lp linkPorts
		out, nreq, nresp := through(t, lp.resolve, reqs, resps, chunk)
		if nreq != 4 || nresp != 3 {
			t.Errorf("chunks of %d: counted %d requests and %d responses, want 4 and 3", chunk, nreq, nresp)
		}
		first := responseFrame(avr, 1)
		if !bytes.HasPrefix(out, first) {
			t.Fatalf("chunks of %d: ApiVersions answer changed", chunk)
		}
		got, rest := decodeResponse(t, out[len(first):], 3, 12)
		if b := brokersOf(got); b[1] != "127.0.0.1:20001" || b[3] != "127.0.0.1:20003" {
			t.Errorf("chunks of %d: Metadata brokers %v not rewritten", chunk, b)
		}
		if !bytes.Equal(rest, unknownResp) {
			t.Errorf("chunks of %d: unknown key's answer %x, want %x", chunk, rest, unknownResp)
		}
		if len(lp.calls) != 3 {
			t.Errorf("chunks of %d: resolver called %v, want once per broker", chunk, lp.calls)
		}
	}
}

func slicesConcat(bs ...[]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

// TestKafkaResolverFailure: a broker the resolver cannot give a link ends
// the connection rather than handing the client the broker's address.
func TestKafkaResolverFailure(t *testing.T) {
	kc := newKafkaConn(func(int32, string, int32) (string, error) { return "", errors.New("no port") }, discard)
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(1)
	if _, _, err := (&requestStream{kc: kc}).feed(requestFrame(md, 9)); err != nil {
		t.Fatal(err)
	}
	if out, _, err := (&responseStream{kc: kc}).feed(responseFrame(metadataResponse(1), 9)); err == nil {
		t.Fatalf("delivered %x, want an error", out)
	}
	kc = newKafkaConn(func(int32, string, int32) (string, error) { return "no-port", nil }, discard)
	(&requestStream{kc: kc}).feed(requestFrame(md, 9))
	if _, _, err := (&responseStream{kc: kc}).feed(responseFrame(metadataResponse(1), 9)); !errors.Is(err, ErrBadResolve) {
		t.Fatalf("err %v, want ErrBadResolve", err)
	}
}

// TestKafkaLinkHoldsThenRewrites: through a Kafka link to a real
// kafkawire server, a Metadata request sent while the link is cut gets no
// answer and nothing is counted as delivered; after the heal the held
// request is answered, its brokers rewritten, and the counters show one
// request and one answer each way.
func TestKafkaLinkHoldsThenRewrites(t *testing.T) {
	var lp linkPorts
	var mu sync.Mutex
	l, err := ListenKafka(kafkaBroker(t), nil, func(n int32, h string, p int32) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		return lp.resolve(n, h, p)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	k := dialRaw(t, l.Addr())
	l.SetMode(Blackhole)
	req := kmsg.NewPtrMetadataRequest()
	req.SetVersion(9) // flexible
	k.send(t, req)
	k.c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := k.r.Peek(1); err == nil {
		t.Fatal("an answer crossed a cut link")
	}
	if st := l.Stats(); st.Requests != 0 || st.BytesForward != 0 || st.Accepted != 1 {
		t.Fatalf("while cut: %+v, want the connection accepted and nothing delivered", st)
	}
	l.SetMode(Pass)
	k.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(k.r, size[:]); err != nil {
		t.Fatalf("after the heal: %v", err)
	}
	frame := make([]byte, 4+binary.BigEndian.Uint32(size[:]))
	copy(frame, size[:])
	if _, err := io.ReadFull(k.r, frame[4:]); err != nil {
		t.Fatal(err)
	}
	got, _ := decodeResponse(t, frame, 3, 9)
	if b := brokersOf(got); b[1] != "127.0.0.1:20001" || b[2] != "127.0.0.1:20002" || b[3] != "127.0.0.1:20003" {
		t.Fatalf("brokers %v, want the resolver's", b)
	}
	// The pump counts once its write has returned, which may be after
	// the client has read the answer.
	eventually.Nil(t, 5*time.Second, "the answer counted", func() error {
		if st := l.Stats(); st.Requests != 1 || st.Responses != 1 || st.Open != 1 || st.BytesBack != int64(len(frame)) {
			return fmt.Errorf("after the heal: %+v, want 1 request, 1 answer of %d bytes", st, len(frame))
		}
		return nil
	})
}
