package launchtest

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"google.golang.org/grpc"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// EnvVar, set to "1" in a process's environment, makes MainIfRequested run
// the fake brokerd.
const EnvVar = "TAPES_LAUNCHTEST_FAKE_BROKERD"

// StartsFile is the file in the fake's --data-dir to which every start
// appends one line: "pid=PID addr=ADDRESS", ADDRESS being the one it serves on.
const StartsFile = "starts"

// Flags of the fake only (pass them through launch.Options.BrokerArgs):
//
//	--fake-ignore-term            ignore SIGTERM (only SIGKILL ends it)
//	--fake-controller-file PATH   report no controller (-1) while PATH does not exist
//	--fake-topics-file PATH       where created topics are kept, shared by the
//	                              fakes of one cluster (default: fake-topics.json
//	                              in the parent of --data-dir)

// MainIfRequested runs the fake brokerd and exits if EnvVar is "1", and
// returns otherwise. Call it first in TestMain or in an init function of a
// _test.go file.
func MainIfRequested() {
	if os.Getenv(EnvVar) != "1" {
		return
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fake brokerd:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func run(args []string) error {
	fs := flag.NewFlagSet("fake-brokerd", flag.ContinueOnError)
	id := fs.Int("id", 0, "broker id")
	dataDir := fs.String("data-dir", "", "data directory")
	listen := fs.String("listen", "", "listen address")
	listenFD := fs.Int("listen-fd", 0, "inherited listening socket")
	advertise := fs.String("advertise", "", "address clients dial")
	kafkaFD := fs.Int("kafka-listen-fd", 0, "inherited Kafka listening socket, held open (not served)")
	fs.String("kafka-advertise", "", "ignored")
	peers := fs.String("peers", "", "ID=HOST:PORT,...")
	fs.String("log-level", "info", "ignored")
	fs.String("metrics-listen", "", "ignored")
	ignoreTerm := fs.Bool("fake-ignore-term", false, "ignore SIGTERM")
	controllerFile := fs.String("fake-controller-file", "", "no controller while this file is missing")
	registeredFile := fs.String("fake-registered-file", "", "Metadata answers BROKER_NOT_AVAILABLE (not registered yet) while this file is missing")
	topicsFile := fs.String("fake-topics-file", "", "shared topic list")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *id <= 0 || *dataDir == "" || *peers == "" {
		return errors.New("--id, --data-dir and --peers are required")
	}
	var ln net.Listener
	var err error
	switch {
	case *listenFD > 0:
		f := os.NewFile(uintptr(*listenFD), "listener")
		ln, err = net.FileListener(f)
		f.Close()
	case *listen != "":
		ln, err = net.Listen("tcp", *listen)
	default:
		err = errors.New("--listen or --listen-fd is required")
	}
	if err != nil {
		return fmt.Errorf("listener: %w", err)
	}
	if *kafkaFD > 0 {
		// Held, not served: the port stays bound while the fake runs
		// and refuses once it is gone, as brokerd's does.
		f := os.NewFile(uintptr(*kafkaFD), "kafka listener")
		kln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("kafka listener: %w", err)
		}
		defer kln.Close()
	}
	addr := ln.Addr().String()
	if *advertise != "" {
		addr = *advertise
	}
	brokers, err := parsePeers(*peers)
	if err != nil {
		return err
	}
	if *topicsFile == "" {
		*topicsFile = filepath.Join(filepath.Dir(filepath.Clean(*dataDir)), "fake-topics.json")
	}
	if err := os.MkdirAll(*dataDir, 0o755); err != nil {
		return err
	}
	if err := appendFile(filepath.Join(*dataDir, StartsFile), fmt.Sprintf("pid=%d addr=%s\n", os.Getpid(), addr)); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	if *ignoreTerm {
		signal.Ignore(syscall.SIGTERM)
	}
	srv := grpc.NewServer()
	tapesv1.RegisterBrokerServiceServer(srv, &fake{id: int32(*id), brokers: brokers, controllerFile: *controllerFile, registeredFile: *registeredFile, topicsFile: *topicsFile})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("fake brokerd serving", "id", *id, "address", addr, "peers", *peers)
	select {
	case s := <-sigs:
		log.Info("fake brokerd stopping", "signal", s.String())
		srv.GracefulStop()
		log.Info("fake brokerd stopped")
		return nil
	case err := <-served:
		return err
	}
}

func parsePeers(s string) ([]*tapesv1.BrokerInfo, error) {
	var out []*tapesv1.BrokerInfo
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		n, err := strconv.Atoi(k)
		if !ok || err != nil || v == "" {
			return nil, fmt.Errorf("--peers: %q is not ID=HOST:PORT", kv)
		}
		out = append(out, &tapesv1.BrokerInfo{Id: int32(n), Address: v, Alive: true})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Id < out[j].Id })
	return out, nil
}

// fake serves BrokerService from the peers it was given and a topic list in
// a file shared by the fakes of one cluster.
type fake struct {
	tapesv1.UnimplementedBrokerServiceServer
	id             int32
	brokers        []*tapesv1.BrokerInfo
	controllerFile string
	registeredFile string
	topicsFile     string
	mu             sync.Mutex // serialises CreateTopics within this fake
}

func (f *fake) Metadata(_ context.Context, req *tapesv1.MetadataRequest) (*tapesv1.MetadataResponse, error) {
	if f.registeredFile != "" {
		if _, err := os.Stat(f.registeredFile); err != nil {
			return nil, kerr.ToStatus(kerr.New(kerr.BrokerNotAvailable, "broker %d has not registered with the controller yet", f.id))
		}
	}
	resp := &tapesv1.MetadataResponse{Brokers: f.brokers, ControllerId: f.brokers[0].Id, BrokerId: f.id}
	if f.controllerFile != "" {
		if _, err := os.Stat(f.controllerFile); err != nil {
			resp.ControllerId = -1
		}
	}
	topics, err := readTopics(f.topicsFile)
	if err != nil {
		return nil, kerr.ToStatus(err)
	}
	byName := map[string]*tapesv1.TopicSpec{}
	for _, t := range topics {
		byName[t.Name] = t
	}
	want := req.GetTopics()
	if len(want) == 0 {
		for _, t := range topics {
			want = append(want, t.Name)
		}
	}
	for _, name := range want {
		spec, ok := byName[name]
		if !ok {
			resp.Topics = append(resp.Topics, &tapesv1.TopicMetadata{Name: name,
				Error: kerr.New(kerr.UnknownTopicOrPartition, "topic %q does not exist", name).Detail})
			continue
		}
		tm := &tapesv1.TopicMetadata{Name: name, Configs: spec.Configs}
		for p := int32(0); p < spec.Partitions; p++ {
			var replicas []int32
			for r := int32(0); r < spec.ReplicationFactor; r++ {
				replicas = append(replicas, f.brokers[int(p+r)%len(f.brokers)].Id)
			}
			tm.Partitions = append(tm.Partitions, &tapesv1.PartitionMetadata{
				Partition: p, LeaderId: replicas[0], LeaderEpoch: 1, Replicas: replicas, Isr: replicas,
			})
		}
		resp.Topics = append(resp.Topics, tm)
	}
	return resp, nil
}

func (f *fake) CreateTopics(_ context.Context, req *tapesv1.CreateTopicsRequest) (*tapesv1.CreateTopicsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	topics, err := readTopics(f.topicsFile)
	if err != nil {
		return nil, kerr.ToStatus(err)
	}
	resp := &tapesv1.CreateTopicsResponse{}
	for _, spec := range req.GetTopics() {
		res := &tapesv1.TopicResult{Name: spec.GetName()}
		switch {
		case containsTopic(topics, spec.GetName()):
			res.Error = kerr.New(kerr.TopicAlreadyExists, "topic %q exists", spec.GetName()).Detail
		case spec.GetPartitions() < 1:
			res.Error = kerr.New(kerr.InvalidPartitions, "%d partitions", spec.GetPartitions()).Detail
		case spec.GetReplicationFactor() < 1 || int(spec.GetReplicationFactor()) > len(f.brokers):
			res.Error = kerr.New(kerr.InvalidReplicationFactor, "replication factor %d with %d brokers",
				spec.GetReplicationFactor(), len(f.brokers)).Detail
		default:
			if !req.GetValidateOnly() {
				topics = append(topics, spec)
			}
		}
		resp.Results = append(resp.Results, res)
	}
	if err := writeTopics(f.topicsFile, topics); err != nil {
		return nil, kerr.ToStatus(err)
	}
	return resp, nil
}

func containsTopic(topics []*tapesv1.TopicSpec, name string) bool {
	for _, t := range topics {
		if t.Name == name {
			return true
		}
	}
	return false
}

// ReadTopics returns the topics created in a fake cluster, from the shared
// file (missing file: none).
func ReadTopics(path string) ([]*tapesv1.TopicSpec, error) { return readTopics(path) }

func readTopics(path string) ([]*tapesv1.TopicSpec, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*tapesv1.TopicSpec
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

func writeTopics(path string, topics []*tapesv1.TopicSpec) error {
	b, err := json.Marshal(topics)
	if err != nil {
		return err
	}
	tmp := path + ".tmp" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func appendFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(s)
	return errors.Join(werr, f.Close())
}
