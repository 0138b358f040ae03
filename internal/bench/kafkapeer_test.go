package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tapes-dev/tapes/internal/eventually"
)

// kafkaPeer is a real 3-broker Apache Kafka (KRaft, combined mode) on
// loopback, started by the harness of ../shared/peers/kafka (`kafka3.sh
// up`, run from a writable copy that fetch.sh has filled), for rows
// measured beside tapes' in the same run.
type kafkaPeer struct {
	harness   *exec.Cmd
	exited    chan struct{} // closed once the harness is reaped
	log       string        // the harness's stderr
	bootstrap []string
	brokers   []int // the three broker JVMs' PIDs (the harness's children)
	adm       *kadm.Client

	read     chan struct{} // closed once the harness's stdout is read to its end
	mu       sync.Mutex
	nodeDirs []string // every node directory a cluster line named (a broker's command line holds its own)
}

// peerCluster is what the harness's `cluster` JSON line says of the nodes.
type peerCluster struct {
	Scenario  string `json:"scenario"`
	Bootstrap string `json:"bootstrap"`
	Nodes     []struct {
		PID int    `json:"pid"`
		Dir string `json:"dir"`
	} `json:"nodes"`
}

// startKafkaPeer runs dir/kafka3.sh up (it builds the harness and runs
// fetch.sh when needed, then execs it, so the PID is the harness's) and
// waits for its cluster line, printed once the three brokers answer. The
// cluster is stopped at the end of the test if stop was not called.
func startKafkaPeer(t *testing.T, dir string) *kafkaPeer {
	t.Helper()
	script := filepath.Join(dir, "kafka3.sh")
	p, found := startPeerHarness(t, dir, "up")
	select {
	case c := <-found:
		p.bootstrap = strings.Split(c.Bootstrap, ",")
		for _, n := range c.Nodes {
			p.brokers = append(p.brokers, n.PID)
		}
	case <-p.exited:
		t.Fatalf("%s up exited before the cluster was ready: %v\n%s", script, p.harness.ProcessState, tail(p.log, 30))
	case <-time.After(5 * time.Minute):
		t.Fatalf("%s up: no cluster line within 5 minutes\n%s", script, tail(p.log, 30))
	}
	if len(p.brokers) != 3 {
		t.Fatalf("%s up: cluster line names %d brokers, want 3", script, len(p.brokers))
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.bootstrap...))
	if err != nil {
		t.Fatal(err)
	}
	p.adm = kadm.NewClient(cl)
	return p
}

// startPeerHarness starts dir/kafka3.sh with args, its stderr in p.log,
// and returns at once. Its stdout is read for JSON lines until it exits:
// the node directories of every cluster line are kept (stop looks for
// brokers left behind by them), and the first cluster line is sent on the
// channel. stop runs at the end of the test.
func startPeerHarness(t *testing.T, dir string, args ...string) (*kafkaPeer, <-chan peerCluster) {
	t.Helper()
	script := filepath.Join(dir, "kafka3.sh")
	if _, err := os.Stat(script); err != nil {
		t.Fatalf("TAPES_BENCH_KAFKA_PEER=%s: %v (it must be a copy of ../shared/peers/kafka)", dir, err)
	}
	p := &kafkaPeer{exited: make(chan struct{}), read: make(chan struct{}), log: filepath.Join(t.TempDir(), "kafka3.log")}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.harness = exec.Command(script, args...)
	p.harness.Dir = dir
	p.harness.Stdout, p.harness.Stderr = w, logf
	err = p.harness.Start()
	w.Close()
	if err != nil {
		r.Close()
		t.Fatalf("%s %s: %v", script, strings.Join(args, " "), err)
	}
	go func() {
		p.harness.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		if err := p.stop(); err != nil {
			t.Error(err)
		}
	})
	found := make(chan peerCluster, 1)
	go func() { // reads stdout (JSON lines) until the harness exits
		defer close(p.read)
		defer r.Close()
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var c peerCluster
			if json.Unmarshal(sc.Bytes(), &c) == nil && c.Scenario == "cluster" {
				p.mu.Lock()
				for _, n := range c.Nodes {
					p.nodeDirs = append(p.nodeDirs, n.Dir)
				}
				p.mu.Unlock()
				select {
				case found <- c:
				default:
				}
			}
		}
	}()
	return p, found
}

// runKafkaPeerBench runs `dir/kafka3.sh bench SCENARIO -runs 1 -json FILE
// flags...`: one pass on a fresh 3-broker cluster that the harness starts
// and stops itself. It waits at most limit for the harness to exit, checks
// that no broker of its cluster is left (stop), and returns FILE's JSON
// lines and the command (with FILE as "FILE").
func runKafkaPeerBench(t *testing.T, dir string, limit time.Duration, scenario string, flags ...string) (jsonl, command string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "kafka3.jsonl")
	args := append([]string{"bench", scenario, "-runs", "1", "-json", file}, flags...)
	command = filepath.Join(dir, "kafka3.sh") + " " + strings.Join(append([]string{"bench", scenario, "-runs", "1", "-json", "FILE"}, flags...), " ")
	p, _ := startPeerHarness(t, dir, args...)
	select {
	case <-p.exited:
	case <-time.After(limit):
		if err := p.stop(); err != nil {
			t.Error(err)
		}
		t.Fatalf("%s: not done within %v (stopped it)\n%s", command, limit, tail(p.log, 30))
	}
	if err := p.stop(); err != nil {
		t.Error(err)
	}
	if !p.harness.ProcessState.Success() {
		t.Fatalf("%s: %v\n%s", command, p.harness.ProcessState, tail(p.log, 30))
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%s: %v\n%s", command, err, tail(p.log, 30))
	}
	p.mu.Lock()
	fmt.Printf("    stopped Apache Kafka: harness PID %d exited, no kafka.Kafka process of its nodes (%s) left\n",
		p.harness.Process.Pid, strings.Join(p.nodeDirs, ", "))
	p.mu.Unlock()
	return string(b), command
}

// createTopic creates topic with partitions, RF 3 and
// min.insync.replicas=2, and waits until every partition has a leader and
// all three replicas in sync.
func (p *kafkaPeer) createTopic(t *testing.T, topic string, partitions int32) {
	t.Helper()
	two := "2"
	resp, err := p.adm.CreateTopic(context.Background(), partitions, 3, map[string]*string{"min.insync.replicas": &two}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("Kafka: create topic %s: %v", topic, err)
	}
	eventually.Nil(t, 2*time.Minute, "Kafka: every partition of "+topic+" with a leader and 3 in sync", func() error {
		td, err := p.adm.ListTopics(context.Background(), topic)
		if err != nil {
			return err
		}
		d := td[topic]
		if d.Err != nil {
			return d.Err
		}
		if int32(len(d.Partitions)) != partitions {
			return fmt.Errorf("%d partitions", len(d.Partitions))
		}
		for _, pd := range d.Partitions {
			if pd.Err != nil || pd.Leader < 0 || len(pd.ISR) != 3 {
				return fmt.Errorf("partition %d: leader %d, ISR %v, %v", pd.Partition, pd.Leader, pd.ISR, pd.Err)
			}
		}
		return nil
	})
}

// settle waits, for at most limit, until the brokers together use less
// than a fifth of a core over 2 s: just started, the JVMs still load
// classes and compile, which on this machine's two cores would be charged
// to the row (the peer harness likewise waits for a quiet machine). It
// returns how long it waited and the brokers' last CPU (% of a core).
func (p *kafkaPeer) settle(t *testing.T, limit time.Duration) (time.Duration, float64) {
	t.Helper()
	start := time.Now()
	for {
		before := 0.0
		for _, pid := range p.brokers {
			before -= cpuSeconds(t, pid)
		}
		time.Sleep(2 * time.Second)
		used := before
		for _, pid := range p.brokers {
			used += cpuSeconds(t, pid)
		}
		pct := 100 * used / 2
		if pct < 20 || time.Since(start) >= limit {
			return time.Since(start), pct
		}
	}
}

// stored is the sum of topic's end offsets (log start is 0 on a fresh
// topic).
func (p *kafkaPeer) stored(topic string) (int64, error) {
	offs, err := p.adm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		return 0, err
	}
	if err := offs.Error(); err != nil {
		return 0, err
	}
	var n int64
	offs.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n, nil
}

// stop asks the harness to stop (SIGTERM to its PID: it stops its brokers
// by PID, SIGKILL after 5 s, and removes its directory), SIGKILLs it after
// 30 s, then checks that no broker it started is left (by the PIDs of the
// cluster line, and by the node directories in the command lines of
// kafka.Kafka processes, for brokers it restarted), SIGKILLing any that is
// and saying so. Safe to call twice.
func (p *kafkaPeer) stop() error {
	if p.adm != nil {
		p.adm.Close()
		p.adm = nil
	}
	select {
	case <-p.exited:
	default:
		p.harness.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			p.harness.Process.Kill()
			<-p.exited
		}
	}
	select { // every cluster line read (unless a survivor still holds stdout)
	case <-p.read:
	case <-time.After(5 * time.Second):
	}
	p.mu.Lock()
	pids := append(slices.Clone(p.brokers), kafkaBrokersIn(p.nodeDirs)...)
	p.mu.Unlock()
	slices.Sort(pids)
	var left []string
	for _, pid := range slices.Compact(pids) {
		if kafkaBrokerRunning(pid) {
			left = append(left, fmt.Sprint(pid))
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("Kafka brokers still running after their harness exited (now sent SIGKILL): PIDs %s", strings.Join(left, ", "))
	}
	return nil
}

// kafkaBrokersIn lists the live Kafka broker JVMs whose command line
// names a file under one of nodeDirs (a broker runs kafka.Kafka
// DIR/server.properties): those of a cluster the harness started,
// restarted ones included, whose PIDs its JSON does not give.
func kafkaBrokersIn(nodeDirs []string) []int {
	if len(nodeDirs) == 0 {
		return nil
	}
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.Contains(string(b), "kafka.Kafka") {
			continue
		}
		for _, d := range nodeDirs {
			if d != "" && strings.Contains(string(b), d+"/") {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// kafkaBrokerRunning says whether pid is a live Kafka broker JVM (its
// command line runs kafka.Kafka; a zombie's or a reused PID's does not).
func kafkaBrokerRunning(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), "kafka.Kafka")
}

// tail is the last n lines of the file at path.
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
