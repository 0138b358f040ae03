package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/tapes-dev/tapes/internal/experiment"
)

// experiments lists the built-in experiments (`chaos list`).
func experiments() []Experiment {
	out := []Experiment{}
	for _, x := range experiment.All() {
		out = append(out, Experiment{Name: x.Name, About: x.About, DefaultDuration: x.Duration.String()})
	}
	return out
}

// runStopWait is how long a run gets to stop its cluster after SIGINT
// when the server shuts down.
const runStopWait = 30 * time.Second

// runner starts `chaos run` experiments (one at a time: each starts a
// cluster of its own) and lists the runs under DIR/runs, its own and
// those of `chaos run` or `make chaos` elsewhere.
type runner struct {
	dir   string // DIR/runs
	chaos string
	log   *slog.Logger

	mu      sync.Mutex
	ctx     context.Context // the server's; nil until run
	emit    func(...Entry)
	active  string          // the experiment running, "" when none
	mine    map[string]*Run // by directory
	scanned []Run
	wg      sync.WaitGroup
}

func newRunner(dir, chaos string, log *slog.Logger) *runner {
	return &runner{dir: dir, chaos: chaos, log: log, mine: map[string]*Run{}}
}

// run lets experiments start until ctx ends, then waits for a running one
// to stop (it is interrupted: `chaos run` stops its cluster).
func (r *runner) run(ctx context.Context, emit func(...Entry)) {
	r.mu.Lock()
	r.ctx, r.emit = ctx, emit
	r.mu.Unlock()
	<-ctx.Done()
	r.wg.Wait()
}

// start runs `chaos run NAME --out DIR/runs/NAME-TIME`; its output lines
// go to the timeline.
func (r *runner) start(name string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.ctx == nil || r.ctx.Err() != nil:
		return "", httpErrorf(http.StatusServiceUnavailable, "the server is not running")
	case r.chaos == "":
		return "", httpErrorf(http.StatusServiceUnavailable, "no chaos program (it is looked for beside cluster and on $PATH)")
	case r.active != "":
		return "", httpErrorf(http.StatusConflict, "experiment %s is still running: one at a time (each starts a cluster of its own)", r.active)
	}
	base := name + "-" + time.Now().Format("20060102-150405")
	out := filepath.Join(r.dir, base)
	for i := 2; ; i++ {
		if _, err := os.Stat(out); errors.Is(err, os.ErrNotExist) {
			break
		}
		out = filepath.Join(r.dir, fmt.Sprintf("%s-%d", base, i))
	}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(r.ctx, r.chaos, "run", name, "--out", out)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = runStopWait
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	cmd.Stderr = cmd.Stdout // one stream, in order
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s: %w", r.chaos, err)
	}
	run := &Run{Name: name, Dir: out, State: "running", Started: time.Now().UTC()}
	r.mine[out] = run
	r.active = name
	emit := r.emit
	emit(Entry{At: time.Now().UTC(), Kind: KindExperiment, Text: fmt.Sprintf("%s: started (pid %d), output in %s", name, cmd.Process.Pid, out)})
	r.wg.Go(func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if line := sc.Text(); line != "" {
				emit(Entry{At: time.Now().UTC(), Kind: KindExperiment, Text: name + ": " + line})
			}
		}
		io.Copy(io.Discard, stdout)
		err := cmd.Wait()
		r.mu.Lock()
		r.active = ""
		run.State = "passed"
		if err != nil {
			run.State = "failed"
		}
		run.Report = r.reportURL(out)
		state, report := run.State, run.Report
		r.mu.Unlock()
		text := fmt.Sprintf("%s: %s", name, state)
		if err != nil {
			text += " (" + err.Error() + ")"
		}
		if report != "" {
			text += "; report " + report
		}
		emit(Entry{At: time.Now().UTC(), Kind: KindExperiment, Text: text})
	})
	return out, nil
}

// reportURL is where this server serves dir's report.html, "" when there
// is none.
func (r *runner) reportURL(dir string) string {
	if _, err := os.Stat(filepath.Join(dir, "report.html")); err != nil {
		return ""
	}
	rel, err := filepath.Rel(r.dir, dir)
	if err != nil {
		return ""
	}
	return "/runs/" + filepath.ToSlash(rel) + "/report.html"
}

// scan lists the runs under DIR/runs that others made: a directory with a
// report (or one level deeper, as `make chaos` nests them), judged by its
// check.json.
func (r *runner) scan() {
	var found []Run
	entries, _ := os.ReadDir(r.dir)
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(r.dir, e.Name())
		if run, ok := r.scanned1(dir); ok {
			found = append(found, run)
			continue
		}
		sub, _ := os.ReadDir(dir)
		for _, s := range sub {
			if s.IsDir() {
				if run, ok := r.scanned1(filepath.Join(dir, s.Name())); ok {
					found = append(found, run)
				}
			}
		}
	}
	r.mu.Lock()
	r.scanned = found
	r.mu.Unlock()
}

func (r *runner) scanned1(dir string) (Run, bool) {
	fi, err := os.Stat(filepath.Join(dir, "report.html"))
	if err != nil {
		return Run{}, false
	}
	rel, _ := filepath.Rel(r.dir, dir)
	run := Run{Name: filepath.ToSlash(rel), Dir: dir, State: "failed", Report: r.reportURL(dir), Started: fi.ModTime().UTC()}
	if b, err := os.ReadFile(filepath.Join(dir, "check.json")); err == nil {
		var res struct {
			Valid bool `json:"valid"`
		}
		if json.Unmarshal(b, &res) == nil && res.Valid {
			run.State = "passed"
		}
	}
	return run, true
}

// list returns every run, oldest first.
func (r *runner) list() []Run {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []Run{}
	for _, run := range r.mine {
		out = append(out, *run)
	}
	for _, run := range r.scanned {
		if _, mine := r.mine[run.Dir]; !mine {
			out = append(out, run)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Started.Equal(out[j].Started) {
			return out[i].Started.Before(out[j].Started)
		}
		return out[i].Dir < out[j].Dir
	})
	return out
}
