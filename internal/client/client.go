package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// Errors of the client itself (the broker's errors are *kerr.Error).
var (
	// ErrClosed is returned by calls on a Client after Close.
	ErrClosed = errors.New("client: closed")
	// ErrNoBootstrap means Config.Bootstrap lists no address.
	ErrNoBootstrap = errors.New("client: no bootstrap broker address")
	// ErrUnreachable is matched (errors.Is) by the *UnreachableError a call
	// returns when no broker has answered the Client and every address
	// refused connections for Config.UnreachableAfter.
	ErrUnreachable = errors.New("no broker answers")
)

// UnreachableError says that no broker answers at any of Addrs: the
// cluster is probably not running. Hint, from Config.UnreachableHint, says
// what to do about it.
type UnreachableError struct {
	Addrs []string
	Hint  string
	// Last is the last attempt's error (connection refused, for each address).
	Last error
}

func (e *UnreachableError) Error() string {
	s := "no broker answers at " + strings.Join(e.Addrs, ", ")
	if e.Hint != "" {
		s += ": " + e.Hint
	}
	return s
}

// Is makes errors.Is(err, ErrUnreachable) hold.
func (e *UnreachableError) Is(target error) bool { return target == ErrUnreachable }

// Defaults for the zero values of Config.
const (
	DefaultRequestTimeout = 10 * time.Second
	DefaultMetadataMaxAge = 30 * time.Second
	DefaultRetryBackoff   = 100 * time.Millisecond
	// maxRetryBackoff caps the growing backoff (unless RetryBackoff is larger).
	maxRetryBackoff = time.Second
)

// Config configures a Client. Only Bootstrap is required.
type Config struct {
	// Bootstrap lists broker addresses (host:port) used to find the cluster.
	Bootstrap []string
	// RequestTimeout bounds one attempt of one request (default 10s); Fetch
	// adds its max_wait_ms on top.
	RequestTimeout time.Duration
	// MetadataMaxAge is how long cached metadata is trusted before it is
	// refreshed (default 30s).
	MetadataMaxAge time.Duration
	// RetryBackoff is the first wait between attempts (default 100ms); it
	// doubles up to about one second.
	RetryBackoff time.Duration
	// DialOptions are added after the client's own (insecure transport
	// credentials and a reconnect backoff capped at one second), so they can
	// override them.
	DialOptions []grpc.DialOption
	// Logger receives retry decisions at debug level; nil discards them.
	Logger *slog.Logger
	// AddressMap makes the client dial another address in place of a
	// broker's (address -> address to dial): how `cluster up` puts a
	// fault-injection link between a process it starts and each broker.
	// nil: taken from $TAPES_ADDRESS_MAP ("ADDR=DIAL,ADDR=DIAL"), if set.
	AddressMap map[string]string
	// UnreachableAfter, when positive, makes a call fail with
	// *UnreachableError once every address it tried has refused the
	// connection (gRPC Unavailable) for this long while no broker has ever
	// answered this Client: a cluster that is not running is reported in
	// seconds rather than after the caller's whole deadline. Once any broker
	// has answered, calls retry until their context ends (a cluster that
	// restarts). Zero: never.
	UnreachableAfter time.Duration
	// UnreachableHint is appended to the *UnreachableError's message, e.g.
	// "is the cluster running? `cluster up --dir D`".
	UnreachableHint string
	// OnRetry, when set, is called before each backoff of every retry loop
	// of the client, on the goroutine of the call that retries, with what it
	// waits for: how CLIs show progress and daemons log a periodic warning.
	// It must not block.
	OnRetry func(Retry)
}

// AddressMapEnv is the environment variable New reads when
// Config.AddressMap is nil.
const AddressMapEnv = "TAPES_ADDRESS_MAP"

// ParseAddressMap parses "ADDR=DIAL,ADDR=DIAL".
func ParseAddressMap(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		from, to, ok := strings.Cut(kv, "=")
		if !ok || from == "" || to == "" {
			return nil, fmt.Errorf("client: address map entry %q: want ADDR=DIAL", kv)
		}
		out[from] = to
	}
	return out, nil
}

// Client talks to a tapes cluster. It dials brokers lazily, on first use.
// All its methods are safe for concurrent use.
type Client struct {
	cfg Config
	log *slog.Logger

	connMu sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool

	// answered becomes true at the first answer (a success or a Kafka
	// error) from any broker; see Config.UnreachableAfter.
	answered atomic.Bool

	meta   metadataCache
	coords coordinators
	// refreshMu serialises metadata refreshes, so that callers that find the
	// cache stale at the same time cause a single refresh.
	refreshMu sync.Mutex
}

// New returns a Client for the cluster at cfg.Bootstrap. It does not
// contact any broker.
func New(cfg Config) (*Client, error) {
	var boot []string
	for _, a := range cfg.Bootstrap {
		if a != "" {
			boot = append(boot, a)
		}
	}
	if len(boot) == 0 {
		return nil, ErrNoBootstrap
	}
	cfg.Bootstrap = boot
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.MetadataMaxAge <= 0 {
		cfg.MetadataMaxAge = DefaultMetadataMaxAge
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = DefaultRetryBackoff
	}
	if cfg.AddressMap == nil {
		if env := os.Getenv(AddressMapEnv); env != "" {
			m, err := ParseAddressMap(env)
			if err != nil {
				return nil, fmt.Errorf("$%s: %w", AddressMapEnv, err)
			}
			cfg.AddressMap = m
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Client{cfg: cfg, log: log, conns: map[string]*grpc.ClientConn{}}
	c.meta.init()
	return c, nil
}

// Close closes every broker connection. Calls in flight fail; later calls
// return ErrClosed.
func (c *Client) Close() error {
	c.connMu.Lock()
	defer c.connMu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	for addr, cc := range c.conns {
		if err := cc.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", addr, err))
		}
	}
	c.conns = nil
	return errors.Join(errs...)
}

// conn returns the (lazily connecting) connection to addr.
func (c *Client) conn(addr string) (*grpc.ClientConn, error) {
	c.connMu.Lock()
	defer c.connMu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	bo := grpcbackoff.DefaultConfig
	bo.BaseDelay = c.cfg.RetryBackoff
	bo.MaxDelay = max(maxRetryBackoff, c.cfg.RetryBackoff)
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// gRPC's default reconnect backoff grows to two minutes: a broker
		// that restarts would stay unreachable that long.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: c.cfg.RequestTimeout}),
	}, c.cfg.DialOptions...)
	target := addr
	if via, ok := c.cfg.AddressMap[addr]; ok {
		target = via
	}
	cc, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	c.conns[addr] = cc
	return cc, nil
}

// Broker returns a BrokerService client for one broker, for tests and tools
// that need a specific broker rather than routing. The address comes from
// metadata (refreshed when the id is unknown); an id the cluster does not
// list is BROKER_NOT_AVAILABLE.
func (c *Client) Broker(ctx context.Context, brokerID int32) (tapesv1.BrokerServiceClient, error) {
	cc, err := c.brokerConn(ctx, brokerID)
	if err != nil {
		return nil, err
	}
	return tapesv1.NewBrokerServiceClient(cc), nil
}

// DescribeReplicas asks one broker for the state of every partition replica
// it hosts (Raft state, indexes, high watermark, and on leaders the ISR and
// follower progress). It makes a single attempt: a diagnostic should show a
// dead broker, not wait for it.
func (c *Client) DescribeReplicas(ctx context.Context, brokerID int32) (*tapesv1.DescribeReplicasResponse, error) {
	cc, err := c.brokerConn(ctx, brokerID)
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	resp, err := tapesv1.NewControllerServiceClient(cc).DescribeReplicas(actx, &tapesv1.DescribeReplicasRequest{})
	if err != nil {
		return nil, fmt.Errorf("describe replicas on broker %d: %w", brokerID, c.convert(err))
	}
	return resp, nil
}

func (c *Client) brokerConn(ctx context.Context, brokerID int32) (*grpc.ClientConn, error) {
	addr, ok := c.meta.brokerAddr(brokerID)
	if !ok {
		if _, err := c.Brokers(ctx); err != nil {
			return nil, err
		}
		if addr, ok = c.meta.brokerAddr(brokerID); !ok {
			return nil, kerr.New(kerr.BrokerNotAvailable, "broker %d is not in the cluster metadata", brokerID)
		}
	}
	return c.conn(addr)
}
