package launch

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/tapes-dev/tapes/internal/netns"
)

// DefaultBrokers is the size of a new cluster when Options.Brokers is 0.
const DefaultBrokers = 3

// DefaultStopTimeout is how long Stop and Close wait after SIGTERM before
// they send SIGKILL, when Options.StopTimeout is 0.
const DefaultStopTimeout = 10 * time.Second

// Options describes the cluster to start.
type Options struct {
	// Dir is the cluster directory: DIR/cluster.json, DIR/broker-N/ (data),
	// DIR/logs/broker-N.log, DIR/launcher.lock. It is created if missing.
	Dir string
	// Brokers is the number of brokers (ids 1..N). 0 means as many as
	// DIR/cluster.json lists, or DefaultBrokers for a new cluster. A
	// directory that already holds a cluster of another size is an error.
	Brokers int
	// BrokerdPath is the brokerd binary; "" means FindBinary("brokerd").
	BrokerdPath string
	// BrokerArgs are extra flags for every brokerd, placed after the ones the
	// launcher sets (so that, for single-valued flags, they win).
	BrokerArgs []string
	// Env is extra environment (KEY=VALUE) for every brokerd, on top of the
	// launcher's own.
	Env []string
	// Host is the address brokers listen on; default 127.0.0.1. When it is
	// a wildcard (0.0.0.0, ::) brokers are advertised on loopback.
	Host string
	// StopTimeout bounds the wait after SIGTERM before SIGKILL; default
	// DefaultStopTimeout.
	StopTimeout time.Duration
	// Links puts a fault-injection link (a loopback proxy, see
	// internal/netfault) on every ordered pair of processes: broker i
	// reaches broker j only through link i->j, and a process started with
	// StartProcess reaches each broker through its own link. Off, brokers
	// dial each other directly.
	Links bool
	// Network, when set, runs broker-N in the host of that name (a
	// network namespace of its own, see internal/netns), listening on
	// its own address at NetnsPort (gRPC) and NetnsKafkaPort (Kafka)
	// with --listen and --kafka-listen instead of sockets the launcher
	// binds. Brokers then dial each other directly, host to host, so
	// that faults between them are IP-level ones (netns.Host.Drop);
	// with Links, producers and consumers still get links of their own.
	// The caller creates the network and closes it after Close.
	Network *netns.Network
	// Logger receives the launcher's own records: "starting broker" and
	// "waiting for cluster" at Info, port changes and forced kills at Warn,
	// exits at Debug. nil discards them.
	Logger *slog.Logger
}

// withDefaults fills the defaults, makes Dir absolute and finds brokerd.
func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" {
		return o, fmt.Errorf("launch: no cluster directory given")
	}
	abs, err := filepath.Abs(o.Dir)
	if err != nil {
		return o, fmt.Errorf("launch: cluster directory %s: %w", o.Dir, err)
	}
	o.Dir = abs
	if o.Brokers < 0 {
		return o, fmt.Errorf("launch: %d brokers: need at least 1", o.Brokers)
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = DefaultStopTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Network != nil && o.Host != "127.0.0.1" {
		return o, fmt.Errorf("launch: Host %s and Network: brokers listen on their hosts' addresses", o.Host)
	}
	if o.BrokerdPath == "" {
		if o.BrokerdPath, err = FindBinary("brokerd"); err != nil {
			return o, fmt.Errorf("launch: %w", err)
		}
	}
	return o, nil
}
