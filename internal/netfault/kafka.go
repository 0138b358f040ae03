package netfault

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Resolver maps a broker that a Kafka response names (its node id and its
// advertised host and port, as the broker registered them) to the address
// the client must dial instead: the client's own link to that broker,
// created on first sight if need be. It is called on a connection's answer
// goroutine, one call at a time per connection but concurrently across
// connections and links, and may block (it may listen on a new port). An
// error closes the client's connection: a client must never be handed a
// broker's real address, which would let it escape the links.
type Resolver func(nodeID int32, host string, port int32) (string, error)

// ListenKafka starts a link, as Listen does, for connections that speak
// Kafka's protocol from a client to a broker: requests pass byte for byte;
// the answers to Metadata (every version kmsg knows) and FindCoordinator
// (every version, v4+'s batched coordinators too) are decoded with kmsg,
// every broker's host and port replaced by what resolve answers, and
// re-encoded; every other answer passes byte for byte. So a Kafka client
// that follows Metadata to the other brokers keeps crossing its own links.
// Faults act on these links exactly as on Listen's.
func ListenKafka(target string, logger *slog.Logger, resolve Resolver) (*Link, error) {
	if resolve == nil {
		return nil, fmt.Errorf("netfault: ListenKafka %s: no resolver", target)
	}
	l, err := listen(target, logger)
	if err != nil {
		return nil, err
	}
	l.resolve = resolve
	l.start()
	return l, nil
}

// stream sees the bytes of one direction of one connection, in order, as
// they are read. feed returns the bytes to deliver for in (in itself, or a
// buffer of the stream's that is valid until the next call) and how many
// whole messages end in them. An error ends the connection. Each stream is
// used by one pump goroutine only.
type stream interface {
	feed(in []byte) (out []byte, msgs int, err error)
}

// kafkaConn is what the two directions of one Kafka connection share: the
// requests whose answers are to be rewritten, by correlation id.
type kafkaConn struct {
	resolve Resolver
	log     *slog.Logger

	mu sync.Mutex
	// pending holds the key and version of each Metadata and
	// FindCoordinator request read and not yet answered, by correlation
	// id. Only those two keys are kept, so that requests without answers
	// (Produce with acks=0) leave nothing behind. Guarded by mu.
	pending map[int32]keyVersion
}

type keyVersion struct{ key, version int16 }

const (
	metadataKey        = 3
	findCoordinatorKey = 10
)

func newKafkaConn(resolve Resolver, log *slog.Logger) *kafkaConn {
	return &kafkaConn{resolve: resolve, log: log, pending: map[int32]keyVersion{}}
}

func (kc *kafkaConn) expect(corr int32, kv keyVersion) {
	kc.mu.Lock()
	kc.pending[corr] = kv
	kc.mu.Unlock()
}

func (kc *kafkaConn) answered(corr int32) (keyVersion, bool) {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	kv, ok := kc.pending[corr]
	delete(kc.pending, corr)
	return kv, ok
}

// requestStream follows the frames a client sends (size, then key,
// version and correlation id) and notes the Metadata and FindCoordinator
// requests among them. It changes nothing.
type requestStream struct {
	kc *kafkaConn
	// hdr holds the first bytes of the current frame until the header
	// is whole (hn of them); size is the frame's, once read; rest is
	// what is left of the frame after the header.
	hdr        [12]byte
	hn         int
	size, rest int
	// lost: the stream is not Kafka's framing (a negative size): from
	// then on the bytes only pass, as the broker closes the connection.
	lost bool
}

func (s *requestStream) feed(in []byte) ([]byte, int, error) {
	msgs := 0
	for i := 0; i < len(in) && !s.lost; {
		if s.rest > 0 {
			k := min(s.rest, len(in)-i)
			i, s.rest = i+k, s.rest-k
			if s.rest == 0 {
				msgs++
			}
			continue
		}
		if s.hn < 4 {
			k := min(4-s.hn, len(in)-i)
			copy(s.hdr[s.hn:], in[i:i+k])
			s.hn, i = s.hn+k, i+k
			if s.hn < 4 {
				continue
			}
			size := int32(binary.BigEndian.Uint32(s.hdr[:4]))
			if size < 0 {
				s.lost = true
				break
			}
			if s.size = int(size); s.size == 0 {
				s.hn = 0
				msgs++
				continue
			}
		}
		want := 4 + min(s.size, 8)
		k := min(want-s.hn, len(in)-i)
		copy(s.hdr[s.hn:], in[i:i+k])
		s.hn, i = s.hn+k, i+k
		if s.hn < want {
			continue
		}
		if s.size >= 8 {
			r := kbin.Reader{Src: s.hdr[4:12]}
			kv := keyVersion{key: r.Int16(), version: r.Int16()}
			if kv.key == metadataKey || kv.key == findCoordinatorKey {
				s.kc.expect(r.Int32(), kv)
			}
		}
		s.rest, s.hn = s.size-(want-4), 0
		if s.rest == 0 {
			msgs++
		}
	}
	return in, msgs, nil
}

// responseStream follows the frames a broker answers with (size, then
// correlation id) and rewrites the answers to the requests kafkaConn
// noted; every other frame passes as it arrives, without being buffered.
// Kafka answers in request order per connection, but the correlation id
// alone decides here.
type responseStream struct {
	kc *kafkaConn
	// hdr holds size and correlation id until both are read (hn bytes).
	hdr [8]byte
	hn  int
	// rest is what is left of a frame that passes.
	rest int
	// frame accumulates a frame to rewrite (size prefix included) up to
	// want bytes; kv is its request's key and version.
	frame []byte
	want  int
	kv    keyVersion
	// buf is the last frame's storage, reused; out is feed's.
	buf, out []byte
	lost     bool
}

func (s *responseStream) feed(in []byte) ([]byte, int, error) {
	switch {
	case s.lost:
		return in, 0, nil
	case s.rest > len(in):
		s.rest -= len(in) // the common case: inside a frame that passes
		return in, 0, nil
	}
	out, msgs := s.out[:0], 0
	for i := 0; i < len(in); {
		switch {
		case s.lost:
			out, i = append(out, in[i:]...), len(in)
		case s.rest > 0:
			k := min(s.rest, len(in)-i)
			out = append(out, in[i:i+k]...)
			i, s.rest = i+k, s.rest-k
			if s.rest == 0 {
				msgs++
			}
		case s.frame != nil:
			k := min(s.want-len(s.frame), len(in)-i)
			s.frame, i = append(s.frame, in[i:i+k]...), i+k
			if len(s.frame) < s.want {
				continue
			}
			var err error
			if out, err = s.rewrite(out); err != nil {
				return nil, 0, err
			}
			if s.buf, s.frame = s.frame[:0], nil; cap(s.buf) > maxKeptFrame {
				s.buf = nil
			}
			msgs++
		default:
			k := min(len(s.hdr)-s.hn, len(in)-i)
			copy(s.hdr[s.hn:], in[i:i+k])
			s.hn, i = s.hn+k, i+k
			if s.hn < len(s.hdr) {
				continue
			}
			s.hn = 0
			size := int32(binary.BigEndian.Uint32(s.hdr[:4]))
			if size < 4 {
				// Not a response a client can read: pass it and all
				// that follows, and let the client close.
				s.lost = true
				out = append(out, s.hdr[:]...)
				continue
			}
			kv, ok := s.kc.answered(int32(binary.BigEndian.Uint32(s.hdr[4:8])))
			if !ok {
				out = append(out, s.hdr[:]...)
				s.rest = int(size) - 4
				if s.rest == 0 {
					msgs++
				}
				continue
			}
			s.kv, s.want = kv, 4+int(size)
			s.frame = append(s.buf[:0], s.hdr[:]...)
			if len(s.frame) == s.want {
				// A bare correlation id: nothing to decode; the
				// client will refuse it as it would directly.
				out, s.frame = append(out, s.frame...), nil
				msgs++
			}
		}
	}
	s.out = out
	return out, msgs, nil
}

// rewrite appends s.frame to out with its brokers' addresses resolved. A
// frame kmsg cannot decode passes unchanged: the client fails on it as it
// would without the link.
func (s *responseStream) rewrite(out []byte) ([]byte, error) {
	resp := kmsg.ResponseForKey(s.kv.key)
	resp.SetVersion(s.kv.version)
	r := kbin.Reader{Src: s.frame[8:]}
	if resp.IsFlexible() {
		kmsg.SkipTags(&r)
	}
	if !r.Ok() {
		s.kc.log.Warn("link: undecodable Kafka response header passed unchanged", "key", kmsg.NameForKey(s.kv.key), "version", s.kv.version)
		return append(out, s.frame...), nil
	}
	headerEnd := len(s.frame) - len(r.Src)
	// Unsafe: the strings alias s.frame, which is not reused before
	// AppendTo has copied them.
	if err := resp.(unsafeReader).UnsafeReadFrom(r.Src); err != nil {
		s.kc.log.Warn("link: undecodable Kafka response passed unchanged", "key", kmsg.NameForKey(s.kv.key), "version", s.kv.version, "err", err)
		return append(out, s.frame...), nil
	}
	if err := rewriteBrokers(resp, s.kc.resolve); err != nil {
		return nil, err
	}
	at := len(out)
	out = append(out, s.frame[:headerEnd]...)
	out = resp.AppendTo(out)
	binary.BigEndian.PutUint32(out[at:], uint32(len(out)-at-4))
	return out, nil
}

// maxKeptFrame: a larger frame's buffer is left to the GC rather than kept
// for the connection's next answer.
const maxKeptFrame = 1 << 20

// unsafeReader is kmsg's UnsafeReadFrom, which every generated response
// has: strings alias the input instead of being copied.
type unsafeReader interface{ UnsafeReadFrom([]byte) error }

// rewriteBrokers replaces every broker address in a Metadata or
// FindCoordinator response with resolve's answer. Coordinators that are
// errors (node -1, no host) are left as they are.
func rewriteBrokers(resp kmsg.Response, resolve Resolver) error {
	set := func(node int32, host *string, port *int32) error {
		if node < 0 || *host == "" {
			return nil
		}
		addr, err := resolve(node, *host, *port)
		if err != nil {
			return fmt.Errorf("netfault: broker %d at %s: %w", node, net.JoinHostPort(*host, strconv.Itoa(int(*port))), err)
		}
		h, ps, err := net.SplitHostPort(addr)
		p, perr := strconv.ParseUint(ps, 10, 16)
		if err != nil || perr != nil || h == "" {
			return fmt.Errorf("%w: %q for broker %d", ErrBadResolve, addr, node)
		}
		*host, *port = h, int32(p)
		return nil
	}
	switch m := resp.(type) {
	case *kmsg.MetadataResponse:
		for i := range m.Brokers {
			b := &m.Brokers[i]
			if err := set(b.NodeID, &b.Host, &b.Port); err != nil {
				return err
			}
		}
	case *kmsg.FindCoordinatorResponse:
		if m.Version < 4 {
			return set(m.NodeID, &m.Host, &m.Port)
		}
		for i := range m.Coordinators {
			c := &m.Coordinators[i]
			if err := set(c.NodeID, &c.Host, &c.Port); err != nil {
				return err
			}
		}
	}
	return nil
}
