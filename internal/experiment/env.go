package experiment

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/launch"
	"github.com/tapes-dev/tapes/internal/netfault"
	"github.com/tapes-dev/tapes/internal/netns"
	"github.com/tapes-dev/tapes/internal/report"
)

// Env is what an experiment's Run gets: a fresh cluster with a link on
// every ordered pair of processes, a client that dials the brokers
// directly (the observer, never faulted), the seeded randomness, and the
// event log of the report. Its methods are for Run's goroutine unless
// noted.
type Env struct {
	// Out is the output directory: histories, events, checker, report.
	Out string
	// C is the launcher of every process.
	C *launch.Cluster
	// Client observes the cluster (metadata, offsets, full reads).
	Client *client.Client
	// Rand is seeded with the run's seed.
	Rand *rand.Rand
	// Duration is the run's --duration (each experiment says how it
	// uses it).
	Duration time.Duration

	out     io.Writer
	events  *report.EventLog
	bins    Binaries
	faultID int
	network *netns.Network // Options.Netns; nil: every fault is a link's

	mu       sync.Mutex
	settings map[string]string
	topics   []string
	// exits: how each process waitExit saw exit ended ("exit status 1").
	exits map[string]string
	// hungLSOAfter is the checker's Input.HungLSOAfter (0: its default).
	hungLSOAfter time.Duration
}

// exitOf is how process name ended when waitExit saw it exit ("" if it
// did not).
func (e *Env) exitOf(name string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.exits[name]
}

// Binaries are the programs an experiment starts.
type Binaries struct{ Brokerd, Producerd, Consumerd string }

// Printf prints a progress line (prefixed with the time since start).
func (e *Env) Printf(format string, args ...any) {
	fmt.Fprintf(e.out, "%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// Set records a setting shown in the report.
func (e *Env) Set(key, value string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.settings[key] = value
}

// Sleep waits d or until ctx ends.
func (e *Env) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// CreateTopic creates a topic and waits until every partition has a leader;
// the runner reads it back in full at the end and watches its leaders.
func (e *Env) CreateTopic(ctx context.Context, name string, partitions, rf int32, configs map[string]string) error {
	err := e.Client.CreateTopics(ctx, []*tapesv1.TopicSpec{{Name: name, Partitions: partitions, ReplicationFactor: rf, Configs: configs}}, false)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.topics = append(e.topics, name)
	e.mu.Unlock()
	for {
		md, err := e.Client.Metadata(ctx, []string{name}, false)
		if err == nil && len(md.Topics) == 1 {
			ok := true
			for _, p := range md.Topics[0].Partitions {
				ok = ok && p.LeaderId > 0
			}
			if ok {
				e.Printf("topic %s: %d partitions, replication factor %d %v", name, partitions, rf, configs)
				return nil
			}
		}
		if err := e.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// Leader returns the broker leading topic/partition (from fresh metadata).
func (e *Env) Leader(ctx context.Context, topic string, partition int32) (int32, error) {
	if err := e.Client.RefreshMetadata(ctx); err != nil {
		return 0, err
	}
	id, _, err := e.Client.Leader(ctx, topic, partition)
	return id, err
}

// History is the path of process name's history file.
func (e *Env) History(name string) string { return filepath.Join(e.Out, name+".jsonl") }

// Sink is the path of the run's SQLite sink.
func (e *Env) Sink() string { return filepath.Join(e.Out, sinkFile) }

// StartProducer starts producerd NAME under the cluster (through its own
// links) with its history in Out; args are producerd flags.
func (e *Env) StartProducer(name string, args ...string) error {
	return e.start(name, "producer", e.bins.Producerd, append([]string{"--history", e.History(name), "--control-listen", ""}, args...))
}

// StartConsumer starts consumerd NAME under the cluster with its history
// in Out; args are consumerd flags.
func (e *Env) StartConsumer(name string, args ...string) error {
	return e.start(name, "consumer", e.bins.Consumerd, append([]string{"--history", e.History(name), "--control-listen", ""}, args...))
}

func (e *Env) start(name, kind, path string, args []string) error {
	args = append([]string{"--dir", e.C.Dir(), "--name", name}, args...)
	if err := e.C.StartProcess(launch.ProcessSpec{Name: name, Kind: kind, Path: path, Args: args}); err != nil {
		return err
	}
	e.Printf("started %s", name)
	return nil
}

// Stop stops a process gracefully (SIGTERM: producers flush their
// history, consumers commit and leave).
func (e *Env) Stop(name string) error {
	e.Printf("stopping %s", name)
	return e.C.Stop(name)
}

// Fault applies a fault now and records its start; call EndFault with the
// id when it is over (a fault never ended lasts to the end of the run).
func (e *Env) Fault(what string, apply func() error) (int, error) {
	if err := apply(); err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	e.faultID++
	id := e.faultID
	e.Printf("fault: %s", what)
	e.events.Write(report.Event{At: time.Now(), Type: "fault-start", ID: id, What: what})
	return id, nil
}

// EndFault undoes a fault and records its end.
func (e *Env) EndFault(id int, what string, undo func() error) error {
	if err := undo(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	e.Printf("fault over: %s", what)
	e.events.Write(report.Event{At: time.Now(), Type: "fault-end", ID: id, What: what})
	return nil
}

// Note records a remark on the timeline.
func (e *Env) Note(what string) {
	e.Printf("%s", what)
	e.events.Write(report.Event{At: time.Now(), Type: "note", What: what})
}

// Cut sets every link between a and each of others to mode (both
// directions of every connection between them; a client has links to the
// brokers only).
//
// With Options.Netns, a cut between brokers drops packets instead: a's host
// drops every packet from and to the others' (Blackhole), or no longer
// does (Pass); other modes are for links only.
func (e *Env) Cut(a string, others []string, mode netfault.Mode) error {
	if h, addrs, ok := e.hosts(a, others); ok {
		switch mode {
		case netfault.Blackhole:
			return h.Drop(context.Background(), addrs, false)
		case netfault.Pass:
			return h.Undrop(context.Background(), addrs)
		default:
			return fmt.Errorf("cut %s from %v: mode %s is for links, not hosts", a, others, mode)
		}
	}
	exists := map[[2]string]bool{}
	for _, l := range e.C.Links() {
		exists[[2]string{l.From, l.To}] = true
	}
	n := 0
	for _, o := range others {
		for _, pair := range [][2]string{{a, o}, {o, a}} {
			if !exists[pair] {
				continue
			}
			if err := e.C.SetLink(pair[0], pair[1], mode, 0, 0); err != nil {
				return err
			}
			n++
		}
	}
	if n == 0 {
		return fmt.Errorf("no link between %s and %v", a, others)
	}
	return nil
}

// hosts returns a's host and the others' addresses when all of them run
// on hosts of their own.
func (e *Env) hosts(a string, others []string) (netns.Host, []netip.Addr, bool) {
	if e.network == nil {
		return netns.Host{}, nil, false
	}
	h, ok := e.network.Host(a)
	var addrs []netip.Addr
	for _, o := range others {
		oh, found := e.network.Host(o)
		ok = ok && found
		addrs = append(addrs, oh.IP)
	}
	return h, addrs, ok && len(addrs) > 0
}

// Brokers returns the broker names.
func (e *Env) Brokers() []string {
	var out []string
	for _, n := range e.C.Names() {
		if p, ok := e.C.Process(n); ok && p.Kind == "broker" {
			out = append(out, n)
		}
	}
	return out
}

// BrokerName is the process name of broker id.
func BrokerName(id int32) string { return fmt.Sprintf("broker-%d", id) }

// Others returns names without name.
func Others(names []string, name string) []string {
	var out []string
	for _, n := range names {
		if n != name {
			out = append(out, n)
		}
	}
	return out
}

// WaitCommitted waits until group has committed the high watermark of
// every partition of topic (the consumers caught up), or ctx ends.
func (e *Env) WaitCommitted(ctx context.Context, group, topic string) error {
	for {
		md, err := e.Client.Metadata(ctx, []string{topic}, true)
		offs, ferr := e.Client.OffsetFetch(ctx, group, nil)
		if err == nil && ferr == nil && len(md.Topics) == 1 {
			committed := map[int32]int64{}
			for _, o := range offs {
				if o.Topic == topic {
					committed[o.Partition] = o.Offset
				}
			}
			done := true
			for _, p := range md.Topics[0].Partitions {
				if p.HighWatermark > 0 && committed[p.Partition] < p.HighWatermark {
					done = false
				}
			}
			if done {
				return nil
			}
		}
		if err := e.Sleep(ctx, 250*time.Millisecond); err != nil {
			return fmt.Errorf("waiting for group %s to catch up on %s: %w", group, topic, err)
		}
	}
}

// WaitISR waits until topic/partition has n in-sync replicas.
func (e *Env) WaitISR(ctx context.Context, topic string, partition int32, n int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		md, err := e.Client.Metadata(ctx, []string{topic}, false)
		if err == nil && len(md.Topics) == 1 && int(partition) < len(md.Topics[0].Partitions) &&
			len(md.Topics[0].Partitions[partition].Isr) >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s-%d did not get %d in-sync replicas within %v", topic, partition, n, d)
		}
		if err := e.Sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}
