package clusterfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Name is the file's name inside the cluster directory.
const Name = "cluster.json"

// DefaultDir is the cluster directory used when neither --dir nor
// --bootstrap-server is given: $TAPES_DIR, else ".tapes" in the working directory.
func DefaultDir() string {
	if d := os.Getenv("TAPES_DIR"); d != "" {
		return d
	}
	return ".tapes"
}

// Process is one child process of `cluster up`.
type Process struct {
	// Name addresses the process in every command: "broker-1", "producer-1", "consumer-2".
	Name string `json:"name"`
	// Kind is "broker", "producer", "consumer" or "kafka" (a Kafka client).
	Kind string `json:"kind"`
	// ID is the broker id for brokers, 0 otherwise.
	ID int32 `json:"id,omitempty"`
	// PID is 0 while the process is not running.
	PID int `json:"pid"`
	// Address is the gRPC address clients dial (host:port).
	Address string `json:"address"`
	// KafkaAddress is the broker's Kafka listener (host:port), which Kafka
	// clients dial; brokers only, absent in files from before it existed.
	KafkaAddress string `json:"kafka_address,omitempty"`
	// Netns is the network namespace the broker runs in and Veth the
	// host-side end of its veth pair, on a cluster started on hosts of
	// their own (`cluster up --netns`); empty otherwise.
	Netns   string `json:"netns,omitempty"`
	Veth    string `json:"veth,omitempty"`
	DataDir string `json:"data_dir,omitempty"`
	Log     string `json:"log,omitempty"`
}

// File is the content of cluster.json.
type File struct {
	Version int `json:"version"`
	// Bootstrap is the comma-separated list of broker addresses, as Kafka's
	// --bootstrap-server takes it.
	Bootstrap string `json:"bootstrap"`
	// KafkaBootstrap is the comma-separated list of the brokers' Kafka
	// listeners, as Kafka clients' bootstrap.servers takes it.
	KafkaBootstrap string    `json:"kafka_bootstrap,omitempty"`
	Processes      []Process `json:"processes"`
	// Control is the address of the launcher's control endpoint
	// (tapes.v1.ClusterControlService) while `cluster up` runs.
	Control string `json:"control,omitempty"`
}

// Brokers returns the broker processes in id order as they appear.
func (f *File) Brokers() []Process {
	var out []Process
	for _, p := range f.Processes {
		if p.Kind == "broker" {
			out = append(out, p)
		}
	}
	return out
}

// Find returns the process with the given name.
func (f *File) Find(name string) (Process, bool) {
	for _, p := range f.Processes {
		if p.Name == name {
			return p, true
		}
	}
	return Process{}, false
}

// Read loads DIR/cluster.json.
func Read(dir string) (*File, error) {
	b, err := os.ReadFile(filepath.Join(dir, Name))
	if err != nil {
		return nil, fmt.Errorf("read cluster file: %w (is a cluster running? start one with `cluster up --dir %s`)", err, dir)
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("parse %s: %w", filepath.Join(dir, Name), err)
	}
	return &f, nil
}

// Write replaces DIR/cluster.json atomically (write to a temporary file, then rename).
func Write(dir string, f *File) error {
	if f.Version == 0 {
		f.Version = 1
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("encode cluster file: %w", err)
	}
	tmp, err := os.CreateTemp(dir, Name+".*")
	if err != nil {
		return fmt.Errorf("write cluster file: %w", err)
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("write cluster file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write cluster file: %w", err)
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, Name))
}

// ErrNoBrokers means neither flag led to a broker address.
var ErrNoBrokers = errors.New("no broker address: pass --bootstrap-server HOST:PORT[,HOST:PORT] or --dir of a running `cluster up`")

// Bootstrap resolves the two ways of naming a cluster: an explicit
// comma-separated --bootstrap-server wins; otherwise the brokers of
// DIR/cluster.json (dir "" meaning DefaultDir()).
func Bootstrap(bootstrapServer, dir string) ([]string, error) {
	if s := strings.TrimSpace(bootstrapServer); s != "" {
		var out []string
		for _, a := range strings.Split(s, ",") {
			if a = strings.TrimSpace(a); a != "" {
				out = append(out, a)
			}
		}
		if len(out) == 0 {
			return nil, ErrNoBrokers
		}
		return out, nil
	}
	if dir == "" {
		dir = DefaultDir()
	}
	f, err := Read(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range f.Brokers() {
		out = append(out, p.Address)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s lists no broker: %w", filepath.Join(dir, Name), ErrNoBrokers)
	}
	return out, nil
}

// UnreachableHint is what a command or daemon adds when no broker answers
// at the addresses Bootstrap gave for the same flags (see
// client.Config.UnreachableHint).
func UnreachableHint(bootstrapServer, dir string) string {
	if strings.TrimSpace(bootstrapServer) != "" {
		return "is the cluster running?"
	}
	if dir == "" {
		dir = DefaultDir()
	}
	return "is the cluster running? `cluster up --dir " + dir + "` starts it"
}
