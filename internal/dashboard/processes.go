package dashboard

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/launch"
	"github.com/tapes-dev/tapes/internal/producer"
)

// rateWindow is the span over which a producer's per-partition rates are
// measured.
const rateWindow = 2 * time.Second

// processes follows the producers and consumers the launcher supervises:
// where each serves its control endpoint (the "NAME: control endpoint
// ADDR" line it prints, which the launcher appends to DIR/logs/NAME.log)
// and what that endpoint last reported.
type processes struct {
	c   *launch.Cluster
	log *slog.Logger

	mu    sync.Mutex
	procs map[string]*proc
}

// proc is one producer or consumer.
type proc struct {
	name, kind string

	// Owned by poll (and endpoint, under ep).
	ep      sync.Mutex
	logTail *tailer
	addr    string
	conn    *grpc.ClientConn

	// Guarded by processes.mu.
	settings *startSettings
	prod     *tapesv1.StatusResponse
	cons     *tapesv1.ConsumerStatusResponse
	// statusPID is the process whose status prod or cons is: after a
	// restart the last one is stale until the new run answers.
	statusPID int
	samples   []rateSample
}

// startSettings are what the page started a process with (what its status
// does not report).
type startSettings struct {
	topic       string
	hotKeyShare float64
}

type rateSample struct {
	at    time.Time
	acked map[int32]int64
}

func newProcesses(c *launch.Cluster, log *slog.Logger) *processes {
	return &processes{c: c, log: log, procs: map[string]*proc{}}
}

// get returns the proc of a launcher process of kind producer or consumer.
func (ps *processes) get(name string) (*proc, bool) {
	p, ok := ps.c.Process(name)
	if !ok || p.Kind != "producer" && p.Kind != "consumer" {
		return nil, false
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	pr := ps.procs[name]
	if pr == nil {
		pr = &proc{name: name, kind: p.Kind, logTail: newTailer(p.Log, false)}
		ps.procs[name] = pr
	}
	return pr, true
}

// started records the settings of a process the page started.
func (ps *processes) started(name string, s startSettings) {
	if pr, ok := ps.get(name); ok {
		ps.mu.Lock()
		pr.settings = &s
		ps.mu.Unlock()
	}
}

// endpointLine is the line producerd and consumerd print on start.
var endpointLine = regexp.MustCompile(`^(\S+): control endpoint (\S+)$`)

// endpoint returns a connection to the process's control endpoint, reading
// its log for the address. A process that has not printed it yet (it is
// starting) gets an error.
func (pr *proc) endpoint() (*grpc.ClientConn, error) {
	pr.ep.Lock()
	defer pr.ep.Unlock()
	lines, reset, err := pr.logTail.lines()
	if err != nil {
		return nil, err
	}
	addr := pr.addr
	if reset {
		addr = ""
	}
	for _, l := range lines {
		s := string(l)
		if strings.Contains(s, " launcher: starting "+pr.name+":") {
			addr = "" // a new run: wait for its own line
		} else if m := endpointLine.FindStringSubmatch(s); m != nil && m[1] == pr.name {
			addr = m[2]
		}
	}
	if addr != pr.addr && pr.conn != nil {
		pr.conn.Close()
		pr.conn = nil
	}
	pr.addr = addr
	if addr == "" {
		return nil, httpErrorf(http.StatusConflict, "%s has not printed its control endpoint yet (is it starting?)", pr.name)
	}
	if pr.conn == nil {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		pr.conn = conn
	}
	return pr.conn, nil
}

func (pr *proc) close() {
	pr.ep.Lock()
	defer pr.ep.Unlock()
	if pr.conn != nil {
		pr.conn.Close()
		pr.conn = nil
	}
}

// poll asks every running producer and consumer for its status.
func (ps *processes) poll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, name := range ps.c.Names() {
		pr, ok := ps.get(name)
		if !ok {
			continue
		}
		st, err := ps.c.ProcessStatus(name)
		if err != nil || st.State != "running" {
			continue // a paused process would not answer; a dead one keeps its last status
		}
		wg.Go(func() { ps.pollOne(ctx, pr, st.Proc.PID) })
	}
	wg.Wait()
}

func (ps *processes) pollOne(ctx context.Context, pr *proc, pid int) {
	conn, err := pr.endpoint()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	now := time.Now()
	if pr.kind == "producer" {
		st, err := tapesv1.NewProducerControlServiceClient(conn).Status(ctx, &tapesv1.StatusRequest{})
		if err != nil {
			return
		}
		ps.mu.Lock()
		if pr.statusPID != pid {
			pr.samples = nil // a new run counts from 0
		}
		pr.prod, pr.statusPID = st, pid
		pr.samples = append(pr.samples, rateSample{now, maps.Clone(st.GetAckedPerPartition())})
		i := 0
		for i < len(pr.samples)-1 && now.Sub(pr.samples[i+1].at) >= rateWindow {
			i++
		}
		pr.samples = pr.samples[i:]
		ps.mu.Unlock()
		return
	}
	st, err := tapesv1.NewConsumerControlServiceClient(conn).ConsumerStatus(ctx, &tapesv1.ConsumerStatusRequest{})
	if err != nil {
		return
	}
	ps.mu.Lock()
	pr.cons, pr.statusPID = st, pid
	ps.mu.Unlock()
}

// producerTopic is the topic a producer writes, "" while unknown.
func (ps *processes) producerTopic(name string) string {
	pr, ok := ps.get(name)
	if !ok {
		return ""
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if pr.prod != nil {
		return pr.prod.GetTopic()
	}
	if pr.settings != nil {
		return pr.settings.topic
	}
	return ""
}

func (ps *processes) close() {
	ps.mu.Lock()
	all := make([]*proc, 0, len(ps.procs))
	for _, pr := range ps.procs {
		all = append(all, pr)
	}
	ps.mu.Unlock()
	for _, pr := range all {
		pr.close()
	}
}

// exitState is "stopped" for a clean exit, else "crashed" (exit code 3
// from a crash, a kill, any failure).
func exitState(lastExit string) string {
	if lastExit == "exit status 0" {
		return "stopped"
	}
	return "crashed"
}

// list returns the producers and consumers in the launcher's order.
func (ps *processes) list(procs []procState, now time.Time) ([]Producer, []Consumer) {
	producers, consumers := []Producer{}, []Consumer{}
	for _, p := range procs {
		if p.Kind != "producer" && p.Kind != "consumer" {
			continue
		}
		pr, ok := ps.get(p.Name)
		if !ok {
			continue
		}
		ps.mu.Lock()
		if p.Kind == "producer" {
			producers = append(producers, pr.producerLocked(p, now))
		} else {
			consumers = append(consumers, pr.consumerLocked(p))
		}
		ps.mu.Unlock()
	}
	return producers, consumers
}

func (pr *proc) producerLocked(p procState, now time.Time) Producer {
	out := Producer{Name: pr.name, Failed: map[string]int64{}, AckedPerPartition: map[int32]int64{},
		RatePerPartition: map[int32]float64{}, PID: p.PID, LastExit: p.LastExit}
	if s := pr.settings; s != nil {
		out.Topic, out.HotKeyShare = s.topic, s.hotKeyShare
	}
	if st := pr.prod; st != nil {
		out.Topic, out.Rate, out.Acks = st.GetTopic(), st.GetRate(), producer.AcksName(st.GetAcks())
		out.Idempotent, out.Keys = st.GetIdempotent(), st.GetKeys()
		out.Sent, out.Acked, out.Retried, out.InFlight = st.GetSent(), st.GetAcked(), st.GetRetried(), st.GetInFlight()
		maps.Copy(out.Failed, st.GetFailed())
		maps.Copy(out.AckedPerPartition, st.GetAckedPerPartition())
	}
	fresh := pr.statusPID == p.PID
	switch p.State {
	case "running":
		out.State = "starting"
		if pr.prod != nil && fresh {
			out.State = pr.prod.GetState()
			if out.State == "done" {
				out.State = "stopping"
			}
		}
		if n := len(pr.samples); n >= 2 && fresh {
			a, b := pr.samples[0], pr.samples[n-1]
			if dt := b.at.Sub(a.at).Seconds(); dt > 0 {
				for part, v := range b.acked {
					out.RatePerPartition[part] = math.Round(float64(v-a.acked[part])/dt*10) / 10
				}
			}
		}
	case "paused":
		out.State = "paused"
	case "exited":
		out.State = exitState(p.LastExit)
	default:
		out.State = "stopped"
	}
	for part := range out.AckedPerPartition {
		if _, ok := out.RatePerPartition[part]; !ok {
			out.RatePerPartition[part] = 0
		}
	}
	return out
}

// consumerStates maps consumerd's own states to the page's.
var consumerStates = map[string]string{
	"joining":     "joining",
	"running":     "running",
	"rebalancing": "rebalancing",
	"paused":      "paused",
	"fenced":      "rebalancing", // it rejoins at once
	"stopping":    "stopped",
}

func (pr *proc) consumerLocked(p procState) Consumer {
	out := Consumer{Name: pr.name, Partitions: []ConsumerPartition{}, PID: p.PID, LastExit: p.LastExit}
	if s := pr.settings; s != nil {
		out.Topic = s.topic
	}
	st := pr.cons
	if st != nil {
		out.Group, out.Topic, out.Generation, out.MemberID = st.GetGroup(), st.GetTopic(), st.GetGeneration(), st.GetMemberId()
		out.Processed, out.Commit, out.RecordsPerPoll = st.GetProcessed(), st.GetCommit(), st.GetRecordsPerPoll()
		out.IdempotentSink, out.Assignor = st.GetIdempotentSink(), st.GetAssignor()
	}
	fresh := st != nil && pr.statusPID == p.PID
	switch p.State {
	case "running":
		out.State = "joining"
		if fresh {
			if s, ok := consumerStates[st.GetState()]; ok {
				out.State = s
			} else {
				out.State = st.GetState()
			}
		}
	case "paused":
		out.State = "paused"
	case "exited":
		out.State = exitState(p.LastExit)
	default:
		out.State = "stopped"
	}
	if fresh && (p.State == "running" || p.State == "paused") {
		for _, cp := range st.GetPartitions() {
			q := ConsumerPartition{Partition: cp.GetPartition(), Position: cp.GetPosition()}
			if cp.GetCommitted() >= 0 {
				q.Committed = ptr(cp.GetCommitted())
			}
			out.Partitions = append(out.Partitions, q)
		}
		sort.Slice(out.Partitions, func(i, j int) bool { return out.Partitions[i].Partition < out.Partitions[j].Partition })
	}
	return out
}

// control runs f on the named process's control endpoint.
func (ps *processes) control(name, kind string, f func(conn *grpc.ClientConn) error) error {
	pr, ok := ps.get(name)
	if !ok || pr.kind != kind {
		return fmt.Errorf("no %s named %q (have %s): %w", kind, name, strings.Join(ps.names(kind), ", "), launch.ErrUnknownProcess)
	}
	st, err := ps.c.ProcessStatus(name)
	if err != nil {
		return err
	}
	switch st.State {
	case "paused":
		return httpErrorf(http.StatusConflict, "%s is paused (SIGSTOP): resume it first", name)
	case "running":
	default:
		return fmt.Errorf("%s is not running (%s): %w", name, orDash(st.LastExit, st.State), launch.ErrNotRunning)
	}
	conn, err := pr.endpoint()
	if err != nil {
		return err
	}
	return f(conn)
}

func (ps *processes) names(kind string) []string {
	var out []string
	for _, name := range ps.c.Names() {
		if p, ok := ps.c.Process(name); ok && p.Kind == kind {
			out = append(out, name)
		}
	}
	if len(out) == 0 {
		return []string{"none"}
	}
	return out
}

func orDash(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}
