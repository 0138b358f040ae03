package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/launch"
	"github.com/tapes-dev/tapes/internal/offsetreset"
)

// Timeouts of the actions that wait for a process or the cluster.
const (
	controlTimeout = 5 * time.Second
	// stopTimeout covers a clean stop: a producer waits for its records in
	// flight, a consumer revokes, commits and leaves.
	stopTimeout  = 30 * time.Second
	resetTimeout = 15 * time.Second
	// sessionTimeout is what consumers the page starts get: a crashed one
	// loses its partitions within seconds.
	sessionTimeout = "6s"
)

// startMu serialises the starts, so that two never pick the same name.
var startMu sync.Mutex

// execute carries out a validated action on the cluster.
func (s *Server) execute(ctx context.Context, a *action) (string, error) {
	c, col := s.cfg.Cluster, s.col
	switch a.Action {
	case "kill":
		if err := c.Kill(a.Name); err != nil {
			return "", err
		}
		return a.Name + " killed (SIGKILL)", nil
	case "pause":
		if err := c.Pause(a.Name); err != nil {
			return "", err
		}
		return a.Name + " paused (SIGSTOP)", nil
	case "resume":
		if err := c.Resume(a.Name); err != nil {
			return "", err
		}
		return a.Name + " resumed (SIGCONT)", nil
	case "restart":
		if err := c.Restart(a.Name); err != nil {
			return "", err
		}
		p, _ := c.Process(a.Name)
		return fmt.Sprintf("%s restarted (pid %d)", a.Name, p.PID), nil
	case "cut":
		for _, n := range []string{a.From, a.To} {
			if _, ok := c.Process(n); !ok {
				return "", fmt.Errorf("no process %q (have %s): %w", n, strings.Join(c.Names(), ", "), launch.ErrUnknownProcess)
			}
		}
		// Bytes between from and to, or (one way) only what from sends
		// to to: launch.CutChanges with name to and others [from].
		changed, err := c.CutBetween(a.To, []string{a.From}, a.OneWay)
		if err != nil {
			return "", err
		}
		if a.OneWay {
			return fmt.Sprintf("cut what %s sends to %s (%d links); heal undoes it", a.From, a.To, len(changed)), nil
		}
		return fmt.Sprintf("cut %s and %s both ways (%d links); heal undoes it", a.From, a.To, len(changed)), nil
	case "delay":
		if _, ok := c.Process(a.Name); !ok {
			return "", fmt.Errorf("no process %q (have %s): %w", a.Name, strings.Join(c.Names(), ", "), launch.ErrUnknownProcess)
		}
		changed, err := c.DelayLinks(a.Name, time.Duration(*a.Ms)*time.Millisecond, time.Duration(a.Jitter)*time.Millisecond)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("delayed every link of %s by %d ms ± %d ms (%d links); heal undoes it", a.Name, *a.Ms, a.Jitter, len(changed)), nil
	case "heal":
		c.Heal()
		return "healed: every link carries bytes both ways, without delay", nil
	case "producer-start":
		return s.startProducer(a)
	case "consumer-start":
		return s.startConsumer(a)
	case "producer-stop", "producer-pause", "producer-resume", "producer-rate":
		return col.producerControl(ctx, a)
	case "consumer-stop", "consumer-pause", "consumer-resume", "consumer-crash":
		return col.consumerControl(ctx, a)
	case "reset-offsets":
		return s.resetOffsets(ctx, a)
	case "predict-consumers":
		return s.predictConsumers(ctx, a)
	case "predict-order":
		return s.predictOrder(ctx, a)
	case "experiment-run":
		out, err := col.runs.start(a.Name)
		if err != nil {
			return "", err
		}
		rel, _ := filepath.Rel(col.runs.dir, out)
		return fmt.Sprintf("experiment %s started; its report will be at /runs/%s/report.html", a.Name, filepath.ToSlash(rel)), nil
	}
	return "", badRequest("unknown action %q", a.Action)
}

// freeName is a's name, or the first KIND-N not in use.
func freeName(c *launch.Cluster, a *action, kind string) (string, error) {
	if a.Name != "" {
		if _, taken := c.Process(a.Name); taken {
			return "", httpErrorf(http.StatusConflict, "a process named %s already exists", a.Name)
		}
		return a.Name, nil
	}
	for i := 1; ; i++ {
		name := kind + "-" + strconv.Itoa(i)
		if _, taken := c.Process(name); !taken {
			return name, nil
		}
	}
}

// startClient starts a producerd or consumerd under the launcher, as the
// control endpoint's StartProcess does (--dir and --name first).
func (s *Server) startClient(kind, path, name string, args []string) error {
	c := s.cfg.Cluster
	if path == "" {
		return httpErrorf(http.StatusServiceUnavailable, "no %sd program (it is looked for beside cluster and on $PATH)", kind)
	}
	if err := os.MkdirAll(filepath.Join(c.Dir(), "histories"), 0o755); err != nil {
		return err
	}
	args = append([]string{"--dir", c.Dir(), "--name", name}, args...)
	return c.StartProcess(launch.ProcessSpec{Name: name, Kind: kind, Path: path, Args: args})
}

func (s *Server) startProducer(a *action) (string, error) {
	startMu.Lock()
	defer startMu.Unlock()
	c := s.cfg.Cluster
	name, err := freeName(c, a, "producer")
	if err != nil {
		return "", err
	}
	keys := "off"
	if *a.Keys {
		keys = "on"
	}
	args := []string{"--topic", a.Topic, "--rate", strconv.FormatFloat(*a.Rate, 'f', -1, 64), "--keys", keys,
		"--hot-key-share", strconv.FormatFloat(a.HotKeyShare, 'f', -1, 64), "--acks", a.Acks,
		"--control-listen", "127.0.0.1:0", "--history", historyPath(c.Dir(), name)}
	if a.Idempotent {
		args = append(args, "--idempotent")
	}
	if err := s.startClient("producer", s.cfg.Producerd, name, args); err != nil {
		return "", err
	}
	s.col.procs.started(name, startSettings{topic: a.Topic, hotKeyShare: a.HotKeyShare})
	return fmt.Sprintf("%s started: %v records/s to %s, acks=%s, keys %s", name, *a.Rate, a.Topic, a.Acks, keys), nil
}

func (s *Server) startConsumer(a *action) (string, error) {
	startMu.Lock()
	defer startMu.Unlock()
	c := s.cfg.Cluster
	name, err := freeName(c, a, "consumer")
	if err != nil {
		return "", err
	}
	args := []string{"--group", a.Group, "--topic", a.Topic, "--records-per-poll", strconv.Itoa(a.RecordsPerPoll),
		"--commit", a.Commit, "--assignor", a.Assignor, "--process-time", (time.Duration(a.ProcessTime) * time.Millisecond).String(),
		"--sink", filepath.Join(c.Dir(), "sink.db"), "--history", historyPath(c.Dir(), name),
		"--control-listen", "127.0.0.1:0", "--session-timeout", sessionTimeout}
	if a.IdempotentSink {
		args = append(args, "--idempotent-sink")
	}
	if err := s.startClient("consumer", s.cfg.Consumerd, name, args); err != nil {
		return "", err
	}
	s.col.procs.started(name, startSettings{topic: a.Topic})
	return fmt.Sprintf("%s started in group %s on %s (commit %s, %s)", name, a.Group, a.Topic, a.Commit, a.Assignor), nil
}

func (col *collector) producerControl(ctx context.Context, a *action) (string, error) {
	var msg string
	err := col.procs.control(a.Name, "producer", func(conn *grpc.ClientConn) error {
		pc := tapesv1.NewProducerControlServiceClient(conn)
		timeout := controlTimeout
		if a.Action == "producer-stop" {
			timeout = stopTimeout
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var err error
		switch a.Action {
		case "producer-stop":
			var resp *tapesv1.StopResponse
			if resp, err = pc.Stop(ctx, &tapesv1.StopRequest{}); err == nil {
				f := resp.GetFinal()
				msg = fmt.Sprintf("%s stopped: %d sent, %d acknowledged", a.Name, f.GetSent(), f.GetAcked())
			}
		case "producer-pause":
			_, err = pc.Pause(ctx, &tapesv1.PauseRequest{})
			msg = a.Name + " paused: it sends nothing until resumed"
		case "producer-resume":
			_, err = pc.Resume(ctx, &tapesv1.ResumeRequest{})
			msg = a.Name + " resumed"
		case "producer-rate":
			_, err = pc.SetRate(ctx, &tapesv1.SetRateRequest{RecordsPerSecond: *a.Rate})
			msg = fmt.Sprintf("%s: rate %v records/s", a.Name, *a.Rate)
		}
		return err
	})
	return msg, err
}

func (col *collector) consumerControl(ctx context.Context, a *action) (string, error) {
	var msg string
	err := col.procs.control(a.Name, "consumer", func(conn *grpc.ClientConn) error {
		cc := tapesv1.NewConsumerControlServiceClient(conn)
		timeout := controlTimeout
		if a.Action == "consumer-stop" {
			timeout = stopTimeout
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var err error
		switch a.Action {
		case "consumer-stop":
			var resp *tapesv1.StopConsumerResponse
			if resp, err = cc.StopConsumer(ctx, &tapesv1.StopConsumerRequest{}); err == nil {
				msg = fmt.Sprintf("%s stopped: committed what it processed (%d records) and left the group", a.Name, resp.GetFinal().GetProcessed())
			}
		case "consumer-pause":
			_, err = cc.PauseConsumer(ctx, &tapesv1.PauseConsumerRequest{})
			msg = a.Name + " paused: it keeps its partitions (heartbeats go on) and processes nothing"
		case "consumer-resume":
			_, err = cc.ResumeConsumer(ctx, &tapesv1.ResumeConsumerRequest{})
			msg = a.Name + " resumed"
		case "consumer-crash":
			_, err = cc.CrashConsumer(ctx, &tapesv1.CrashConsumerRequest{})
			if err != nil && col.exits(a.Name, 2*time.Second) {
				err = nil // it went before its answer could
			}
			msg = a.Name + " crashed (exit 3, no commit, no goodbye): the group notices after its session timeout"
		}
		return err
	})
	return msg, err
}

// exits reports whether the named process is no longer running within d.
func (col *collector) exits(name string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if st, err := col.c.ProcessStatus(name); err == nil && st.State != "running" && st.State != "paused" {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// resetOffsets is what `cluster groups reset-offsets GROUP --topic
// TOPIC:P --to-offset N --execute` does: refused while the group has
// members, clamped to the log.
func (s *Server) resetOffsets(ctx context.Context, a *action) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, resetTimeout)
	defer cancel()
	cl := s.cfg.Client
	if err := offsetreset.CheckEmpty(ctx, cl, a.Group); err != nil {
		return "", err
	}
	plan, err := offsetreset.Compute(ctx, cl, a.Group, a.Topic, []int32{*a.Partition},
		offsetreset.Strategy{Name: "to-offset", Offset: *a.Offset})
	if err != nil {
		return "", err
	}
	if err := offsetreset.Commit(ctx, cl, a.Group, a.Topic, plan); err != nil {
		return "", err
	}
	if len(plan) != 1 {
		return "", errors.New("reset-offsets: no partition planned")
	}
	p := plan[0]
	was := "nothing committed"
	if p.Current >= 0 {
		was = "was " + strconv.FormatInt(p.Current, 10)
	}
	msg := fmt.Sprintf("group %s: %s-%d reset to offset %d (%s)", a.Group, a.Topic, p.Partition, p.Next, was)
	if p.Next != *a.Offset {
		msg += fmt.Sprintf("; %d is outside the log, clamped", *a.Offset)
	}
	return msg, nil
}
