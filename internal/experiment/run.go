package experiment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/launch"
	"github.com/tapes-dev/tapes/internal/netns"
	"github.com/tapes-dev/tapes/internal/report"
)

// Experiment is one built-in experiment.
type Experiment struct {
	Name string
	// About is the paragraph `chaos list` prints: what it shows and what to
	// expect.
	About string
	// Expect is what the checker must find for the run to pass.
	Expect check.Expectation
	// Duration is the default --duration.
	Duration time.Duration
	// Brokers is how many brokers the cluster has (0: 3).
	Brokers int
	// Run creates topics, starts processes, applies the faults and stops
	// the producers and consumers (so their histories are complete).
	Run func(ctx context.Context, e *Env) error
	// Verdict, when set, adds checks of its own on the result (e.g. "some
	// acks=all sends were refused with NOT_ENOUGH_REPLICAS"); it returns
	// why the run does not meet them.
	Verdict func(e *Env, r *check.Result) []string
}

var registry = map[string]*Experiment{}

func register(x *Experiment) {
	if _, dup := registry[x.Name]; dup {
		panic("experiment: duplicate " + x.Name)
	}
	registry[x.Name] = x
}

// All returns the experiments sorted by name.
func All() []*Experiment {
	out := make([]*Experiment, 0, len(registry))
	for _, x := range registry {
		out = append(out, x)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Lookup returns the named experiment.
func Lookup(name string) (*Experiment, bool) {
	x, ok := registry[name]
	return x, ok
}

// Options configure Run.
type Options struct {
	Seed     uint64
	Duration time.Duration // 0: the experiment's default
	Out      string
	Bins     Binaries
	// BrokerArgs are added to every brokerd (after the runner's own).
	BrokerArgs []string
	Stdout     io.Writer
	// Netns runs the brokers on hosts of their own (root only, see
	// internal/netns): three network namespaces on a free 10.77.N.0/24,
	// joined by a bridge, removed at the end of the run. Env.Cut between
	// brokers then drops their packets at the IP level (nftables) instead
	// of cutting links; producers and consumers keep their links.
	Netns bool
}

// brokerArgs make failures show within seconds (as the tests' timings):
// Raft timeouts of half brokerd's defaults find a paused or cut-off leader
// in 0.5-1 s.
var brokerArgs = []string{
	"--raft-heartbeat-timeout", "500ms",
	"--raft-election-timeout", "500ms",
	"--raft-leader-lease", "500ms",
	"--raft-heartbeat-linger", "60ms",
	"--replica-lag-time-max", "2s",
	"--broker-heartbeat-interval", "300ms",
	"--broker-session-timeout", "1500ms",
	"--raft-commit-timeout", "200ms",
	"--preferred-leader-delay", "3s",
	"--retention-check-interval", "300ms",
}

// Outcome is a finished run.
type Outcome struct {
	Result check.Result
	// Valid: the checker's expectation and the experiment's own verdict
	// hold.
	Valid  bool
	Why    []string
	Report string
}

// Run runs x: a fresh 3-broker cluster in Out/cluster with links, the
// experiment, a full read of its topics, the checker, check.json and the
// report. The cluster is stopped at the end whatever happens.
func Run(ctx context.Context, x *Experiment, o Options) (*Outcome, error) {
	if o.Duration <= 0 {
		o.Duration = x.Duration
	}
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, fmt.Errorf("--out %s: %w", o.Out, err)
	}
	if entries, _ := os.ReadDir(o.Out); len(entries) > 0 {
		return nil, fmt.Errorf("--out %s is not empty: give a new directory (each run keeps its histories)", o.Out)
	}
	events, err := report.NewEventLog(filepath.Join(o.Out, EventsFile))
	if err != nil {
		return nil, err
	}
	defer events.Close()
	start := time.Now()
	var network *netns.Network
	if o.Netns {
		if x.Brokers > 3 {
			return nil, fmt.Errorf("experiment %s needs %d brokers; --netns runs three hosts", x.Name, x.Brokers)
		}
		if network, err = netns.Create(ctx, netns.Config{Hosts: []string{"broker-1", "broker-2", "broker-3"}}); err != nil {
			return nil, err
		}
		defer network.Close() // after c.Close below: no broker left in a namespace
	}
	c, err := launch.Start(ctx, launch.Options{Dir: filepath.Join(o.Out, "cluster"), Brokers: max(x.Brokers, 3), BrokerdPath: o.Bins.Brokerd,
		BrokerArgs: append(slices.Clone(brokerArgs), o.BrokerArgs...), Links: true, StopTimeout: 10 * time.Second, Network: network})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = c.WaitReady(rctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("cluster not ready: %w", err)
	}
	cl, err := client.New(client.Config{Bootstrap: c.Bootstrap(), RequestTimeout: 5 * time.Second, MetadataMaxAge: time.Second, AddressMap: map[string]string{}})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	e := &Env{Out: o.Out, C: c, Client: cl, Rand: rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15)), Duration: o.Duration,
		out: o.Stdout, events: events, bins: o.Bins, network: network, exits: map[string]string{}, settings: map[string]string{"seed": strconv.FormatUint(o.Seed, 10), "duration": o.Duration.String()}}
	e.Printf("%s: cluster of 3 brokers in %s (seed %d)", x.Name, c.Dir(), o.Seed)
	if network != nil {
		e.Set("hosts", fmt.Sprintf("network namespaces on %s; faults between brokers drop packets (nftables)", network.Subnet))
		e.Printf("brokers on their own hosts: %s", strings.Join(c.Bootstrap(), ", "))
	}

	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); e.watchLeaders(wctx) }()
	runErr := x.Run(ctx, e)
	stopWatch()
	<-watched
	if runErr != nil {
		return nil, fmt.Errorf("%s: %w", x.Name, runErr)
	}

	e.Printf("reading every partition back and checking the histories ...")
	in, _, err := RunInput(o.Out)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	in.HungLSOAfter = e.hungLSOAfter
	e.mu.Unlock()
	in.Expect = x.Expect
	rec := RecordedCheck{Experiment: x.Name, Expect: x.Expect, HungLSOAfterMS: in.HungLSOAfter.Milliseconds()}
	if len(e.topics) == 1 {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		in.Log, in.LogStart, err = check.ReadTopic(rctx, cl, e.topics[0])
		cancel()
		if err != nil {
			return nil, fmt.Errorf("full read of %s: %w", e.topics[0], err)
		}
		rec.Topic, rec.Log, rec.LogStart = e.topics[0], in.Log, in.LogStart
	}
	if err := writeCheckInput(o.Out, rec); err != nil {
		return nil, err
	}
	res, err := check.Check(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	out := &Outcome{Result: res, Valid: res.Valid, Why: slices.Clone(res.Why)}
	if x.Verdict != nil {
		if why := x.Verdict(e, &res); len(why) > 0 {
			out.Valid = false
			out.Why = append(out.Why, why...)
		}
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(o.Out, "check.json"), append(b, '\n'), 0o644); err != nil {
		return nil, err
	}
	verdict := "PASS: the expectation holds"
	if !out.Valid {
		verdict = "FAIL: " + fmt.Sprint(out.Why)
	}
	e.mu.Lock()
	settings := e.settings
	e.mu.Unlock()
	out.Report, err = report.Write(o.Out, report.Meta{Name: x.Name, Description: x.About, Seed: int64(o.Seed), Start: start, End: time.Now(),
		Settings: settings, Verdict: verdict, Expectation: describe(x.Expect)})
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	return out, nil
}

// describe is an expectation in words.
func describe(x check.Expectation) string {
	s := x.Name
	if len(x.MustBeZero) > 0 {
		s += fmt.Sprintf("; must be zero: %v", x.MustBeZero)
	}
	if len(x.MustBePositive) > 0 {
		s += fmt.Sprintf("; must be positive: %v", x.MustBePositive)
	}
	return s
}

// watchLeaders records every leader change of the run's topics.
func (e *Env) watchLeaders(ctx context.Context) {
	last := map[string]int64{}
	for ctx.Err() == nil {
		e.mu.Lock()
		topics := slices.Clone(e.topics)
		e.mu.Unlock()
		if len(topics) > 0 {
			mctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			md, err := e.Client.Metadata(mctx, topics, false)
			cancel()
			if err == nil {
				for _, t := range md.Topics {
					for _, p := range t.Partitions {
						k := fmt.Sprintf("%s/%d", t.Name, p.Partition)
						if p.LeaderId > 0 && last[k] != p.LeaderEpoch {
							last[k] = p.LeaderEpoch
							e.events.Write(report.Event{At: time.Now(), Type: "leader", Topic: t.Name, Partition: p.Partition, Leader: p.LeaderId, Epoch: p.LeaderEpoch})
						}
					}
				}
			}
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

// ErrUnknown: no experiment of that name.
var ErrUnknown = errors.New("unknown experiment")
