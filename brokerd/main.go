// Command brokerd runs one tapes broker: it hosts partition replicas (one
// Raft group each), takes its seat in the controller quorum and serves the
// client API, all on one gRPC port; with --kafka-listen it also speaks
// Kafka's wire protocol (PLAINTEXT) to Kafka clients on a port of its own.
//
//	brokerd --id 1 --data-dir /var/lib/tapes/1 --listen 10.0.0.1:9092 \
//	        --kafka-listen 10.0.0.1:9093 \
//	        --peers 1=10.0.0.1:9092,2=10.0.0.2:9092,3=10.0.0.3:9092
//
// A broker added to a running cluster names one of its brokers instead of
// the peers (`cluster brokers add` starts it so):
//
//	brokerd --id 4 --data-dir /var/lib/tapes/4 --listen 10.0.0.4:9092 --join 10.0.0.1:9092
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tapes-dev/tapes/internal/broker"
	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/replication"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintf(os.Stderr, "brokerd: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("brokerd", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "brokerd: one tapes broker (partition replicas over Raft, controller seat, client API)\n\nUsage:\n  brokerd --id N --data-dir DIR (--listen HOST:PORT | --listen-fd FD) (--peers 1=HOST:PORT,... | --join HOST:PORT[,HOST:PORT])\n          [--kafka-listen HOST:PORT | --kafka-listen-fd FD] [--kafka-advertise HOST:PORT]\n\nFlags:\n")
		fs.PrintDefaults()
	}
	def := broker.DefaultConfig()
	var (
		id        = fs.Int("id", 0, "this broker's id, a positive integer unique in the cluster (required)")
		dataDir   = fs.String("data-dir", "", "directory for the controller's and every partition's data (required)")
		listen    = fs.String("listen", "", "address to serve gRPC on, e.g. 127.0.0.1:9092")
		listenFD  = fs.Int("listen-fd", -1, "serve on this inherited listening socket instead of --listen (used by `cluster up`)")
		advertise = fs.String("advertise", "", "address clients dial to reach this broker (default: the listening address)")
		kListen   = fs.String("kafka-listen", "", "address to serve Kafka's wire protocol on (PLAINTEXT), e.g. 127.0.0.1:9093 (off when empty)")
		kListenFD = fs.Int("kafka-listen-fd", -1, "serve Kafka's protocol on this inherited listening socket instead of --kafka-listen (used by `cluster up`)")
		kAdvert   = fs.String("kafka-advertise", "", "HOST:PORT Kafka clients dial to reach this broker, listed in Kafka Metadata (default: the Kafka listening address; required when it is a wildcard)")
		peers     = fs.String("peers", "", "every broker of the cluster, this one included, as ID=HOST:PORT,... : how this broker reaches each (required without --join)")
		join      = fs.String("join", "", "join a running cluster through these brokers' gRPC addresses (HOST:PORT,...): on its first start the broker does not bootstrap the controller quorum, it registers its id (refused with DUPLICATE_BROKER_REGISTRATION when taken) and the quorum's leader adds it (as a non-voter, promoted once the quorum has members enough for 3 or 5 voters); the other brokers' addresses come from the metadata, --peers is optional")
		logLevel  = fs.String("log-level", "info", "log level: debug, info, warn or error")
		metrics   = fs.String("metrics-listen", "", "serve Prometheus metrics at http://ADDR/metrics and Go profiles at /debug/pprof/ (e.g. 127.0.0.1:9100; off when empty)")
		pprofAddr = fs.String("pprof-listen", "", "serve Go's net/http/pprof at http://ADDR/debug/pprof/ on a listener of its own (e.g. 127.0.0.1:6060; off when empty)")
	)
	fs.DurationVar(&def.Raft.HeartbeatTimeout, "raft-heartbeat-timeout", def.Raft.HeartbeatTimeout, "Raft heartbeat timeout: a follower that hears nothing for this long starts an election")
	fs.DurationVar(&def.Raft.ElectionTimeout, "raft-election-timeout", def.Raft.ElectionTimeout, "Raft election timeout (at least the heartbeat timeout)")
	fs.DurationVar(&def.Raft.LeaderLeaseTimeout, "raft-leader-lease", def.Raft.LeaderLeaseTimeout, "Raft leader lease: a leader that cannot reach a quorum for this long steps down (at most the heartbeat timeout)")
	fs.DurationVar(&def.Raft.CommitTimeout, "raft-commit-timeout", def.Raft.CommitTimeout, "how often an idle Raft leader sends AppendEntries (this also confirms followers for the ISR)")
	fs.DurationVar(&def.Raft.HeartbeatLinger, "raft-heartbeat-linger", def.Raft.HeartbeatLinger, "how long a Raft heartbeat waits to travel with others to the same broker (fewer messages and wake-ups when idle; 0 sends each at once; not given, with a shorter lease than the default: the longest that lease allows)")
	fs.DurationVar(&def.Raft.SnapshotInterval, "raft-snapshot-interval", def.Raft.SnapshotInterval, "how often Raft checks whether to snapshot and compact its log")
	fs.Uint64Var(&def.Raft.SnapshotThreshold, "raft-snapshot-threshold", def.Raft.SnapshotThreshold, "Raft log entries since the last snapshot that trigger a new one")
	fs.Uint64Var(&def.Raft.TrailingLogs, "raft-trailing-logs", def.Raft.TrailingLogs, "Raft log entries kept after a snapshot (a follower further behind is rebuilt from the snapshot)")
	fs.Func("raft-log", fmt.Sprintf("where new partitions keep their Raft log: wal (one log per broker shared by every partition, appends of all partitions share fsyncs) or bolt (a raft-boltdb file per partition); a partition keeps the one it was created with (default %s)", def.RaftLog), func(v string) error {
		k, err := replication.ParseRaftLogKind(v)
		def.RaftLog = k
		return err
	})
	fs.DurationVar(&def.ReplicaLagTimeMax, "replica-lag-time-max", def.ReplicaLagTimeMax, "replica.lag.time.max.ms: a follower that has not caught up for this long leaves the ISR")
	fs.DurationVar(&def.RetentionCheckInterval, "retention-check-interval", def.RetentionCheckInterval, "how often partition leaders apply retention.ms and retention.bytes")
	fs.DurationVar(&def.PreferredLeaderDelay, "preferred-leader-delay", def.PreferredLeaderDelay, "a leader that is not a partition's preferred replica hands leadership back to it after this long, once it is caught up (0 disables; Kafka's auto.leader.rebalance)")
	fs.DurationVar(&def.HeartbeatInterval, "broker-heartbeat-interval", def.HeartbeatInterval, "how often this broker tells its peers it is alive")
	fs.DurationVar(&def.SessionTimeout, "broker-session-timeout", def.SessionTimeout, "a broker not heard from for this long is shown as dead in Metadata")
	fs.IntVar(&def.MaxPartitionsPerBroker, "max-partitions-per-broker", def.MaxPartitionsPerBroker, "partition replicas (internal topics included) one broker may host; the cluster's limit is this times its brokers; a CreateTopics over either is refused with POLICY_VIOLATION")
	fs.Func("offsets-topic-partitions", fmt.Sprintf("partitions of __consumer_offsets, created when the first group looks for its coordinator (default %d)", def.Groups.OffsetsTopicPartitions), func(v string) error {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n <= 0 {
			return fmt.Errorf("want a positive integer, got %q", v)
		}
		def.Groups.OffsetsTopicPartitions = int32(n)
		return nil
	})
	fs.IntVar(&def.Groups.OffsetsTopicReplicationFactor, "offsets-topic-replication-factor", def.Groups.OffsetsTopicReplicationFactor, "replication factor of __consumer_offsets (capped at the number of brokers)")
	fs.DurationVar(&def.Groups.MinSessionTimeout, "group-min-session-timeout", def.Groups.MinSessionTimeout, "shortest session timeout a consumer may ask for (group.min.session.timeout.ms)")
	fs.DurationVar(&def.Groups.MaxSessionTimeout, "group-max-session-timeout", def.Groups.MaxSessionTimeout, "longest session timeout a consumer may ask for (group.max.session.timeout.ms)")
	fs.DurationVar(&def.Groups.InitialRebalanceDelay, "group-initial-rebalance-delay", def.Groups.InitialRebalanceDelay, "how long the first rebalance of an empty group waits for more members (group.initial.rebalance.delay.ms)")
	fs.Int64Var(&def.Groups.OffsetsCompactAfter, "offsets-compact-after", def.Groups.OffsetsCompactAfter, "records a __consumer_offsets partition may hold before its coordinator rewrites the latest record of each key and moves the log start past the rest (0: never; Kafka runs its log cleaner instead)")
	fs.Func("transaction-state-partitions", fmt.Sprintf("partitions of __transaction_state, created when the first transactional producer looks for its coordinator (default %d; Kafka's transaction.state.log.num.partitions)", def.Transactions.StateTopicPartitions), func(v string) error {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n <= 0 {
			return fmt.Errorf("want a positive integer, got %q", v)
		}
		def.Transactions.StateTopicPartitions = int32(n)
		return nil
	})
	fs.IntVar(&def.Transactions.StateTopicReplicationFactor, "transaction-state-replication-factor", def.Transactions.StateTopicReplicationFactor, "replication factor of __transaction_state (capped at the number of brokers; min.insync.replicas 2 from 3 on)")
	fs.DurationVar(&def.Transactions.MaxTimeout, "transaction-max-timeout", def.Transactions.MaxTimeout, "longest transaction.timeout.ms a producer may ask for (transaction.max.timeout.ms)")
	fs.DurationVar(&def.Transactions.AbortTimedOutInterval, "transaction-abort-check-interval", def.Transactions.AbortTimedOutInterval, "how often the coordinator aborts transactions past their timeout (transaction.abort.timed.out.transaction.cleanup.interval.ms)")
	fs.DurationVar(&def.Transactions.IDExpiration, "transactional-id-expiration", def.Transactions.IDExpiration, "how long a transactional id may go unused (no transaction open, no InitProducerId) before the coordinator removes it (transactional.id.expiration.ms)")
	fs.Int64Var(&def.Transactions.StateCompactAfter, "transaction-state-compact-after", def.Transactions.StateCompactAfter, "records a __transaction_state partition may hold before its coordinator rewrites the latest record of each transactional id and moves the log start past the rest (0: never; Kafka runs its log cleaner instead)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (see --help)", fs.Arg(0))
	}
	lingerSet := false
	fs.Visit(func(f *flag.Flag) { lingerSet = lingerSet || f.Name == "raft-heartbeat-linger" })
	if !lingerSet {
		// The default linger suits the default timeouts; shorter timeouts
		// given without a linger get the longest one they allow.
		def.Raft.HeartbeatLinger = min(def.Raft.HeartbeatLinger, max(0, def.Raft.MaxHeartbeatLinger()))
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: use debug, info, warn or error", *logLevel)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	if *dataDir != "" {
		lock, err := lockDataDir(*dataDir)
		if err != nil {
			return err
		}
		defer lock.Close()
	}
	lis, err := listener("listen", *listen, *listenFD)
	if err != nil {
		return err
	}
	if lis == nil {
		return errors.New("--listen HOST:PORT (or --listen-fd) is required")
	}
	klis, kadvertise, err := kafkaListener(*kListen, *kListenFD, *kAdvert)
	if err != nil {
		lis.Close()
		return err
	}
	var peerMap map[metadata.BrokerID]string
	if *peers != "" || *join == "" {
		if peerMap, err = broker.ParsePeers(*peers); err != nil {
			lis.Close()
			return fmt.Errorf("--peers: %w", err)
		}
	}
	joinAddrs, err := parseJoin(*join)
	if err != nil {
		lis.Close()
		return err
	}
	cfg := def
	cfg.ID = metadata.BrokerID(*id)
	cfg.DataDir = *dataDir
	cfg.Advertise = *advertise
	if cfg.Advertise == "" {
		cfg.Advertise = lis.Addr().String()
	}
	cfg.KafkaAdvertise = kadvertise
	cfg.Peers = peerMap
	cfg.Join = joinAddrs
	cfg.Logger = logger
	b, err := broker.New(cfg)
	if err != nil {
		lis.Close()
		if klis != nil {
			klis.Close()
		}
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 2)
	go func() { served <- b.Serve(lis) }()
	if klis != nil {
		go func() {
			if err := b.ServeKafka(klis); err != nil {
				served <- fmt.Errorf("kafka listener: %w", err)
			}
		}()
	}
	if *metrics != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", b.MetricsHandler())
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		closeHTTP, err := serveHTTP(*metrics, mux, logger, "--metrics-listen", "serving metrics", "/metrics")
		if err != nil {
			b.Shutdown(context.Background())
			return err
		}
		defer closeHTTP()
	}
	if *pprofAddr != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		closeHTTP, err := serveHTTP(*pprofAddr, mux, logger, "--pprof-listen", "serving pprof", "/debug/pprof/")
		if err != nil {
			b.Shutdown(context.Background())
			return err
		}
		defer closeHTTP()
	}
	select {
	case err := <-served:
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
	case <-ctx.Done():
		logger.Info("shutting down")
	}
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := b.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	logger.Info("stopped")
	return nil
}

// serveHTTP serves mux on addr (the value of flag) in the background and
// logs msg with the URL of path; the tests read that line for the port of
// an address ending in :0. It returns the function that closes the server.
func serveHTTP(addr string, mux *http.ServeMux, logger *slog.Logger, flag, msg, path string) (func() error, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(lis)
	logger.Info(msg, "url", "http://"+lis.Addr().String()+path)
	return srv.Close, nil
}

// listener opens --NAME or adopts --NAME-fd; nil (and no error) when
// neither is given.
func listener(name, addr string, fd int) (net.Listener, error) {
	switch {
	case fd >= 0 && strings.TrimSpace(addr) != "":
		return nil, fmt.Errorf("give --%s or --%s-fd, not both", name, name)
	case fd >= 0:
		f := os.NewFile(uintptr(fd), name)
		if f == nil {
			return nil, fmt.Errorf("--%s-fd %d: not an open file", name, fd)
		}
		lis, err := net.FileListener(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("--%s-fd %d: %w", name, fd, err)
		}
		return lis, nil
	case strings.TrimSpace(addr) != "":
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("--%s %s: %w", name, addr, err)
		}
		return lis, nil
	}
	return nil, nil
}

// kafkaListener opens the Kafka listener (--kafka-listen or
// --kafka-listen-fd) and returns it with the address to register
// (--kafka-advertise, else the bound address). Without a listener it
// returns nil, "" (Kafka off), or an error if --kafka-advertise was given.
// A wildcard listening host cannot be dialled, so it needs an explicit
// --kafka-advertise.
func kafkaListener(addr string, fd int, advertise string) (net.Listener, string, error) {
	if advertise != "" {
		if err := checkKafkaAdvertise(advertise); err != nil {
			return nil, "", err
		}
	}
	lis, err := listener("kafka-listen", addr, fd)
	if err != nil || lis == nil {
		if err == nil && advertise != "" {
			err = fmt.Errorf("--kafka-advertise %s needs a Kafka listener: give --kafka-listen HOST:PORT", advertise)
		}
		return nil, "", err
	}
	if advertise != "" {
		return lis, advertise, nil
	}
	bound := lis.Addr().String()
	if ta, ok := lis.Addr().(*net.TCPAddr); ok && ta.IP.IsUnspecified() {
		lis.Close()
		return nil, "", fmt.Errorf("--kafka-listen %s is a wildcard address (bound %s) that Kafka clients cannot dial: give --kafka-advertise HOST:PORT", addr, bound)
	}
	return lis, bound, nil
}

// checkKafkaAdvertise refuses a --kafka-advertise that Kafka clients could
// not dial: not HOST:PORT, no host, a wildcard host, or a port outside
// 1-65535.
func checkKafkaAdvertise(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("--kafka-advertise %q: want HOST:PORT: %w", a, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return fmt.Errorf("--kafka-advertise %q: the host must be one Kafka clients can dial, not empty or a wildcard", a)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("--kafka-advertise %q: the port must be 1-65535", a)
	}
	return nil
}

// parseJoin parses --join HOST:PORT[,HOST:PORT] (empty: none).
func parseJoin(v string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(v, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("--join %q: want HOST:PORT[,HOST:PORT]: %w", v, err)
		}
		out = append(out, a)
	}
	if len(out) == 0 && strings.TrimSpace(v) != "" {
		return nil, fmt.Errorf("--join %q: no address", v)
	}
	return out, nil
}
