package kafkawire

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	fkerr "github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/recordbatch"
)

// ioTimeout bounds every read and write of the raw-socket tests: generous, as
// the machine may be loaded; no test waits for it to pass.
const ioTimeout = 30 * time.Second

// testServer is a Server on an ephemeral 127.0.0.1 port whose log lines the
// test can read.
type testServer struct {
	*Server
	addr string
	mu   sync.Mutex
	logs []string
}

func (ts *testServer) logf(format string, args ...any) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.logs = append(ts.logs, fmt.Sprintf(format, args...))
}

// logged reports whether a log line contains s, and returns the lines.
func (ts *testServer) logged(s string) (bool, []string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	lines := append([]string(nil), ts.logs...)
	for _, l := range lines {
		if strings.Contains(l, s) {
			return true, lines
		}
	}
	return false, lines
}

func startServer(t *testing.T, cfg Config, register func(ts *testServer)) *testServer {
	t.Helper()
	ts := &testServer{}
	cfg.Logf = ts.logf
	ts.Server = NewServer(cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts.addr = ln.Addr().String()
	if register != nil {
		register(ts)
	}
	served := make(chan error, 1)
	go func() { served <- ts.Serve(ln) }()
	t.Cleanup(func() {
		ts.Close()
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return ts
}

// fixedMetadata answers Metadata with one broker (the server itself, id 1,
// also the controller) and topic "t" of two partitions led by it. It
// records the versions it served and the client software of the connection.
type fixedMetadata struct {
	host string
	port int32

	mu       sync.Mutex
	versions []int16
	software [2]string
}

func newFixedMetadata(t *testing.T, addr string) *fixedMetadata {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	return &fixedMetadata{host: host, port: int32(p)}
}

func (m *fixedMetadata) handle(_ context.Context, r *Request) Reply {
	req := r.Msg.(*kmsg.MetadataRequest)
	m.mu.Lock()
	m.versions = append(m.versions, req.Version)
	m.software[0], m.software[1] = r.Conn.ClientSoftware()
	m.mu.Unlock()
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	b := kmsg.NewMetadataResponseBroker()
	b.NodeID, b.Host, b.Port = 1, m.host, m.port
	resp.Brokers = []kmsg.MetadataResponseBroker{b}
	resp.ClusterID = kmsg.StringPtr("tapes-test")
	resp.ControllerID = 1
	topic := kmsg.NewMetadataResponseTopic()
	topic.Topic = kmsg.StringPtr("t")
	for p := range int32(2) {
		pt := kmsg.NewMetadataResponseTopicPartition()
		pt.Partition, pt.Leader, pt.LeaderEpoch = p, 1, 4
		pt.Replicas, pt.ISR = []int32{1}, []int32{1}
		topic.Partitions = append(topic.Partitions, pt)
	}
	resp.Topics = []kmsg.MetadataResponseTopic{topic}
	return Respond(resp)
}

func (m *fixedMetadata) seen() ([]int16, [2]string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]int16(nil), m.versions...), m.software
}

// TestKgoNegotiatesVersions: franz-go's client does ApiVersions, then
// Metadata at the highest version both sides know, with a flexible header
// (v9+) or a v1 header, and reads the fixed cluster back.
func TestKgoNegotiatesVersions(t *testing.T) {
	kmsgMax := kmsg.NewPtrMetadataRequest().MaxVersion()
	for _, served := range []struct{ min, max int16 }{{0, 12}, {0, 8}, {4, kmsgMax}} {
		t.Run(fmt.Sprintf("metadata v%d-v%d", served.min, served.max), func(t *testing.T) {
			var md *fixedMetadata
			ts := startServer(t, Config{}, func(ts *testServer) {
				md = newFixedMetadata(t, ts.addr)
				ts.Register(3, served.min, served.max, md.handle)
			})
			cl, err := kgo.NewClient(kgo.SeedBrokers(ts.addr))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
			defer cancel()
			req := kmsg.NewPtrMetadataRequest()
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr("t")
			req.Topics = []kmsg.MetadataRequestTopic{rt}
			resp, err := req.RequestWith(ctx, cl)
			if err != nil {
				t.Fatalf("Metadata: %v", err)
			}
			if len(resp.Brokers) != 1 || resp.Brokers[0].Port != md.port || resp.ControllerID != 1 ||
				len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 2 {
				t.Fatalf("metadata %+v", resp)
			}
			versions, software := md.seen()
			want := min(served.max, kmsgMax)
			if len(versions) == 0 || versions[len(versions)-1] != want {
				t.Fatalf("Metadata versions served %v, want the last at v%d", versions, want)
			}
			if software[0] != "kgo" || software[1] == "" {
				t.Fatalf("client software %q, want kgo and its version (KIP-511)", software)
			}
			// The client's view of the negotiation.
			vs, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
			if err != nil {
				t.Fatal(err)
			}
			if len(vs.ApiKeys) != 2 || vs.ApiKeys[0].ApiKey != 3 || vs.ApiKeys[0].MinVersion != served.min ||
				vs.ApiKeys[0].MaxVersion != served.max || vs.ApiKeys[1].ApiKey != 18 || vs.ApiKeys[1].MaxVersion != 4 {
				t.Fatalf("ApiVersions advertised %+v, want Metadata v%d-v%d and ApiVersions v0-v4 only", vs.ApiKeys, served.min, served.max)
			}
		})
	}
}

// rawConn is a hand-driven client connection.
type rawConn struct {
	t  *testing.T
	nc net.Conn
}

func dial(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc}
}

// frame is the wire form of req at version v with correlation id corr.
func frame(req kmsg.Request, v int16, corr int32) []byte {
	req.SetVersion(v)
	return kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw")).AppendRequest(nil, req, corr)
}

func (c *rawConn) write(b []byte) {
	c.t.Helper()
	c.nc.SetWriteDeadline(time.Now().Add(ioTimeout))
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// read reads one response frame as resp (versioned by the caller) and
// returns its correlation id.
func (c *rawConn) read(resp kmsg.Response) int32 {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(ioTimeout))
	var size [4]byte
	if _, err := io.ReadFull(c.nc, size[:]); err != nil {
		c.t.Fatalf("read response size: %v", err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c.nc, body); err != nil {
		c.t.Fatalf("read response: %v", err)
	}
	corr := int32(binary.BigEndian.Uint32(body))
	body = body[4:]
	if resp.IsFlexible() && resp.Key() != apiVersionsKey {
		if body[0] != 0 {
			c.t.Fatalf("response header has %d tagged fields", body[0])
		}
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		c.t.Fatalf("decode %s v%d response: %v", kmsg.NameForKey(resp.Key()), resp.GetVersion(), err)
	}
	return corr
}

// expectClosed reads until the server closes the connection, failing on any
// byte received.
func (c *rawConn) expectClosed() {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(ioTimeout))
	n, err := c.nc.Read(make([]byte, 1))
	if n != 0 || err == nil {
		c.t.Fatalf("read %d bytes (%v), want the connection closed", n, err)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		c.t.Fatalf("connection still open after %v", ioTimeout)
	}
}

// apiVersions does one ApiVersions v3 round trip.
func (c *rawConn) apiVersions(corr int32) *kmsg.ApiVersionsResponse {
	c.t.Helper()
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName, req.ClientSoftwareVersion = "raw", "1.0"
	c.write(frame(req, 3, corr))
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 3
	if got := c.read(resp); got != corr || resp.ErrorCode != 0 {
		c.t.Fatalf("ApiVersions: correlation %d error %d, want %d and 0", got, resp.ErrorCode, corr)
	}
	return resp
}

func metadataFor(topic string) *kmsg.MetadataRequest {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = []kmsg.MetadataRequestTopic{rt}
	return req
}

// TestPipelinedRequestsAnsweredInOrder: the first request's answer is held
// in Later; the two after it are read and handled meanwhile, and still
// answered after it.
func TestPipelinedRequestsAnsweredInOrder(t *testing.T) {
	handled := make(chan string, 3)
	release := make(chan struct{})
	ts := startServer(t, Config{}, func(ts *testServer) {
		md := newFixedMetadata(t, ts.addr)
		ts.Register(3, 0, 12, func(ctx context.Context, r *Request) Reply {
			topic := *r.Msg.(*kmsg.MetadataRequest).Topics[0].Topic
			handled <- topic
			if topic != "slow" {
				return md.handle(ctx, r)
			}
			return Later(func() Reply {
				select {
				case <-release:
				case <-ctx.Done():
					return Close(ctx.Err())
				}
				return md.handle(ctx, r)
			})
		})
	})
	c := dial(t, ts.addr)
	var out []byte
	for i, topic := range []string{"slow", "fast1", "fast2"} {
		out = append(out, frame(metadataFor(topic), 12, int32(100+i))...)
	}
	c.write(out) // one write: the three requests pipelined
	for _, want := range []string{"slow", "fast1", "fast2"} {
		if got := <-handled; got != want {
			t.Fatalf("handled %q, want %q", got, want)
		}
	}
	// fast1 and fast2 are answered; their answers must wait for slow's.
	close(release)
	for i := range 3 {
		resp := kmsg.NewPtrMetadataResponse()
		resp.Version = 12
		if got := c.read(resp); got != int32(100+i) {
			t.Fatalf("response %d has correlation id %d, want %d", i, got, 100+i)
		}
	}
}

// produceHandler validates each partition's batch; acks=0 gets no response.
func produceHandler(batches chan<- recordbatch.Info) HandlerFunc {
	return func(_ context.Context, r *Request) Reply {
		req := r.Msg.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, topic := range req.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic = topic.Topic
			for _, p := range topic.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition = p.Partition
				info, err := recordbatch.Validate(p.Records, req.Version)
				rp.ErrorCode = ErrorCode(err)
				if err == nil {
					batches <- info
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		if req.Acks == 0 {
			return NoResponse()
		}
		return Respond(resp)
	}
}

func produceRequest(acks int16, batch []byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = acks, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "t"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = batch
	rt.Partitions = []kmsg.ProduceRequestTopicPartition{rp}
	req.Topics = []kmsg.ProduceRequestTopic{rt}
	return req
}

// TestAcksZeroProduceGetsNoResponse: the Produce with acks=0 is handled and
// not answered; the Metadata after it is answered next, and a Produce with
// acks=1 after that is answered with its error code.
func TestAcksZeroProduceGetsNoResponse(t *testing.T) {
	batches := make(chan recordbatch.Info, 4)
	ts := startServer(t, Config{}, func(ts *testServer) {
		ts.Register(0, 3, 11, produceHandler(batches))
		ts.Register(3, 0, 12, newFixedMetadata(t, ts.addr).handle)
	})
	c := dial(t, ts.addr)
	batch := recordbatch.Encode(recordbatch.NoProducer, []recordbatch.Record{{Key: []byte("a"), Value: []byte("1")}, {Value: []byte("2")}})
	c.write(frame(produceRequest(0, batch), 9, 1))
	c.write(frame(metadataFor("t"), 12, 2))
	bad := bytes.Clone(batch)
	bad[len(bad)-1] ^= 1 // wrong CRC
	c.write(frame(produceRequest(1, bad), 9, 3))

	md := kmsg.NewPtrMetadataResponse()
	md.Version = 12
	if got := c.read(md); got != 2 {
		t.Fatalf("first response has correlation id %d, want 2 (Metadata): acks=0 was answered", got)
	}
	if info := <-batches; info.Records != 2 {
		t.Fatalf("acks=0 batch: %+v", info)
	}
	pr := kmsg.NewPtrProduceResponse()
	pr.Version = 9
	if got := c.read(pr); got != 3 {
		t.Fatalf("second response has correlation id %d, want 3", got)
	}
	if code := pr.Topics[0].Partitions[0].ErrorCode; code != fkerr.CorruptMessage.Code {
		t.Fatalf("wrong CRC answered %d, want CORRUPT_MESSAGE", code)
	}
}

// TestKgoProducesEveryCodec: franz-go's producer (its own batch encoder and
// compressors) through the server: every batch validates.
func TestKgoProducesEveryCodec(t *testing.T) {
	for _, codec := range []struct {
		name string
		c    kgo.CompressionCodec
		want recordbatch.Codec
	}{
		{"none", kgo.NoCompression(), recordbatch.CodecNone},
		{"gzip", kgo.GzipCompression(), recordbatch.CodecGzip},
		{"snappy", kgo.SnappyCompression(), recordbatch.CodecSnappy},
		{"lz4", kgo.Lz4Compression(), recordbatch.CodecLz4},
		{"zstd", kgo.ZstdCompression(), recordbatch.CodecZstd},
	} {
		t.Run(codec.name, func(t *testing.T) {
			batches := make(chan recordbatch.Info, 16)
			ts := startServer(t, Config{}, func(ts *testServer) {
				ts.Register(0, 3, 11, produceHandler(batches))
				ts.Register(3, 0, 12, newFixedMetadata(t, ts.addr).handle)
			})
			cl, err := kgo.NewClient(kgo.SeedBrokers(ts.addr), kgo.DisableIdempotentWrite(),
				kgo.ProducerBatchCompression(codec.c), kgo.DefaultProduceTopic("t"),
				kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
			defer cancel()
			var recs []*kgo.Record
			for i := range 50 {
				recs = append(recs, &kgo.Record{Key: []byte{byte(i)}, Value: bytes.Repeat([]byte("x"), 200),
					Headers: []kgo.RecordHeader{{Key: "i", Value: []byte(strconv.Itoa(i))}}})
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
			var n int32
			for n < 50 {
				info := <-batches
				if info.Codec != codec.want {
					t.Fatalf("batch compressed with %v, want %v", info.Codec, codec.want)
				}
				n += info.Records
			}
		})
	}
}

// TestBadInputClosesOnlyItsConnection: each bad input is answered with a
// Kafka error or a closed connection, and a connection opened before it
// goes on being served.
func TestBadInputClosesOnlyItsConnection(t *testing.T) {
	size := func(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }
	withBody := func(f []byte, edit func(body []byte)) []byte {
		f = bytes.Clone(f)
		edit(f)
		return f
	}
	// Metadata v0's topics array is not nullable; at v4 it is, but only -1
	// means null. The array length follows the 4-byte size, the 8 bytes of
	// key/version/correlation and the client id (2 + len("raw")).
	const topicsAt = 4 + 8 + 2 + 3
	cases := []struct {
		name   string
		cfg    Config
		send   []byte
		halfUp bool   // close the write side after sending
		log    string // what the server's log must say
	}{
		{name: "frame over 100 MiB", send: size(DefaultMaxRequestBytes + 1), log: "socket.request.max.bytes is 104857600"},
		{name: "frame over a configured limit", cfg: Config{MaxRequestBytes: 1024},
			send: append(size(2000), make([]byte, 100)...), log: "2000 bytes, socket.request.max.bytes is 1024"},
		{name: "negative frame size", send: size(0x80000000), log: "frame size out of range"},
		{name: "truncated frame", send: append(size(100), make([]byte, 10)...), halfUp: true, log: "10 of 100 bytes"},
		{name: "frame shorter than a header", send: append(size(3), 0, 3, 0), log: "shorter than a request header"},
		{name: "unknown API key", send: withBody(frame(metadataFor("t"), 1, 1), func(b []byte) { binary.BigEndian.PutUint16(b[4:], 9999) }),
			log: "unknown API key: 9999"},
		{name: "API key not served", send: frame(kmsg.NewPtrFetchRequest(), 4, 1), log: "1 (Fetch) is not served"},
		{name: "version above the range", send: frame(metadataFor("t"), 13, 1), log: "Metadata version 13, served are v0-v12"},
		{name: "version below the range", send: frame(kmsg.NewPtrListOffsetsRequest(), 0, 1), log: "ListOffsets version 0, served are v1-v7"},
		{name: "negative array length, not nullable", send: withBody(frame(metadataFor("t"), 0, 1), func(b []byte) {
			binary.BigEndian.PutUint32(b[topicsAt:], 0xffffffff)
		}), log: "does not encode back to itself"},
		{name: "array length -2, nullable", send: withBody(frame(metadataFor("t"), 4, 1), func(b []byte) {
			binary.BigEndian.PutUint32(b[topicsAt:], 0xfffffffe)
		}), log: "does not encode back to itself"},
		{name: "body cut short", send: withBody(frame(metadataFor("topic"), 4, 1), func(b []byte) {
			binary.BigEndian.PutUint32(b, binary.BigEndian.Uint32(b)-3)
		})[:len(frame(metadataFor("topic"), 4, 1))-3], log: "malformed request"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, tc.cfg, func(ts *testServer) {
				ts.Register(3, 0, 12, newFixedMetadata(t, ts.addr).handle)
				ts.Register(2, 1, 7, func(context.Context, *Request) Reply { return Close(errors.New("unused")) })
			})
			good := dial(t, ts.addr)
			good.apiVersions(1)
			bad := dial(t, ts.addr)
			bad.write(tc.send)
			if tc.halfUp {
				bad.nc.(*net.TCPConn).CloseWrite()
			}
			bad.expectClosed()
			good.apiVersions(2)
			if ok, lines := ts.logged(tc.log); !ok {
				t.Fatalf("log %q, want a line with %q", lines, tc.log)
			}
		})
	}
}

// TestAnswersBeforeABadRequestAreWritten: a good request pipelined before an
// unknown key is answered, then the connection closes.
func TestAnswersBeforeABadRequestAreWritten(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	c := dial(t, ts.addr)
	req := kmsg.NewPtrApiVersionsRequest()
	bad := frame(kmsg.NewPtrFetchRequest(), 4, 8)
	c.write(append(frame(req, 1, 7), bad...))
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 1
	if got := c.read(resp); got != 7 {
		t.Fatalf("correlation %d, want 7", got)
	}
	c.expectClosed()
}

// TestTooNewAPIVersions: KIP-511. A version above v4 gets UNSUPPORTED_VERSION
// in a v0 body listing ApiVersions' own range, the connection stays open,
// and the client's retry at v3 gets the full list.
func TestTooNewAPIVersions(t *testing.T) {
	ts := startServer(t, Config{}, func(ts *testServer) {
		ts.Register(3, 0, 12, newFixedMetadata(t, ts.addr).handle)
	})
	c := dial(t, ts.addr)
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName, req.ClientSoftwareVersion = "raw", "1.0"
	f := frame(req, 5, 41)
	binary.BigEndian.PutUint16(f[6:], 9) // v9: a version kmsg does not know either
	c.write(f)
	resp := kmsg.NewPtrApiVersionsResponse() // read at v0
	if got := c.read(resp); got != 41 {
		t.Fatalf("correlation %d, want 41", got)
	}
	if resp.ErrorCode != fkerr.UnsupportedVersion.Code || len(resp.ApiKeys) != 1 ||
		resp.ApiKeys[0].ApiKey != 18 || resp.ApiKeys[0].MinVersion != 0 || resp.ApiKeys[0].MaxVersion != 4 {
		t.Fatalf("answer %+v, want UNSUPPORTED_VERSION with ApiVersions v0-v4 alone", resp)
	}
	if full := c.apiVersions(42); len(full.ApiKeys) != 2 {
		t.Fatalf("retry at v3 advertised %+v", full.ApiKeys)
	}
}

// TestAPIVersionsRefusesBadClientSoftware: KIP-511's pattern, as Kafka
// checks it.
func TestAPIVersionsRefusesBadClientSoftware(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	c := dial(t, ts.addr)
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName, req.ClientSoftwareVersion = "bad name!", "1.0"
	c.write(frame(req, 3, 5))
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 3
	c.read(resp)
	if resp.ErrorCode != fkerr.InvalidRequest.Code {
		t.Fatalf("error %d, want INVALID_REQUEST", resp.ErrorCode)
	}
}

// TestCloseEndsBlockedHandlers: Close cancels the ctx of a Later that waits
// for it, and returns once it has.
func TestCloseEndsBlockedHandlers(t *testing.T) {
	started := make(chan struct{})
	ended := make(chan struct{})
	ts := startServer(t, Config{}, func(ts *testServer) {
		ts.Register(3, 0, 12, func(ctx context.Context, r *Request) Reply {
			return Later(func() Reply {
				close(started)
				<-ctx.Done()
				close(ended)
				return Close(ctx.Err())
			})
		})
	})
	c := dial(t, ts.addr)
	c.write(frame(metadataFor("t"), 12, 1))
	<-started
	ts.Close()
	select {
	case <-ended:
	default:
		t.Fatal("Close returned before the blocked handler did")
	}
	c.expectClosed()
}

// TestHandlerPanicClosesItsConnection: a panicking handler (on the request
// goroutine or in Later) closes its connection; the server goes on.
func TestHandlerPanicClosesItsConnection(t *testing.T) {
	ts := startServer(t, Config{}, func(ts *testServer) {
		ts.Register(3, 0, 12, func(_ context.Context, r *Request) Reply {
			if *r.Msg.(*kmsg.MetadataRequest).Topics[0].Topic == "now" {
				panic("boom now")
			}
			return Later(func() Reply { panic("boom later") })
		})
	})
	good := dial(t, ts.addr)
	for _, topic := range []string{"now", "later"} {
		bad := dial(t, ts.addr)
		bad.write(frame(metadataFor(topic), 12, 1))
		bad.expectClosed()
		good.apiVersions(1)
		if ok, lines := ts.logged("Metadata handler panicked: boom " + topic); !ok {
			t.Fatalf("log %q", lines)
		}
	}
}
