package bench

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/testcluster"
)

// observeArgs are the brokerd flags a benchmark adds so that observe can
// read each broker's fsync counter and CPU profile.
var observeArgs = []string{"--metrics-listen", "127.0.0.1:0", "--pprof-listen", "127.0.0.1:0"}

// observation is what observe records of each broker during one
// benchmark row.
type observation struct {
	t       *testing.T
	brokers []observed
	start   time.Time
	machine machineWindow // the machine's load over the row
	wg      sync.WaitGroup
}

type observed struct {
	name, metrics, pprof string
	pid                  int
	fsyncs               map[string]float64 // tapes_fsyncs_total by kind, at the start
	cpu                  float64            // CPU seconds at the start
	profile              []byte             // the CPU profile of the row (set by the fetch goroutine)
	profileErr           error
}

// observe starts watching every broker of e (started with observeArgs)
// during a row: it reads their fsync counters and CPU time now and starts a
// CPU profile of the next d on each (d should not outlast the row). Call
// print when the row is over.
func observe(t *testing.T, e *testcluster.Env, d time.Duration) *observation {
	t.Helper()
	o := &observation{t: t, start: time.Now()}
	for _, b := range e.Brokers() {
		ob := observed{name: b.Name, pid: b.PID, metrics: e.ServedURL(b.Name, "metrics"), pprof: e.ServedURL(b.Name, "pprof")}
		ob.fsyncs = scrapeFsyncs(t, ob.metrics)
		ob.cpu = cpuSeconds(t, b.PID)
		o.brokers = append(o.brokers, ob)
	}
	var pids []int
	for _, b := range o.brokers {
		pids = append(pids, b.pid)
	}
	o.machine = openMachine(pids...)
	secs := max(1, int(d.Round(time.Second)/time.Second))
	for i := range o.brokers {
		ob := &o.brokers[i]
		o.wg.Add(1)
		go func() {
			defer o.wg.Done()
			ob.profile, ob.profileErr = fetch(fmt.Sprintf("%sprofile?seconds=%d", ob.pprof, secs))
		}()
	}
	return o
}

// print prints, per broker, its fsyncs/s since observe (all kinds, then
// by kind) and its CPU, then waits for the profiles and prints the top
// functions of each by flat and by cumulative time.
func (o *observation) print() {
	elapsed := time.Since(o.start).Seconds()
	lines := make([]string, len(o.brokers))
	for i, ob := range o.brokers {
		now := scrapeFsyncs(o.t, ob.metrics)
		var total float64
		var kinds []string
		for _, k := range slices.Sorted(maps.Keys(now)) {
			n := now[k] - ob.fsyncs[k]
			total += n
			if n > 0 {
				kinds = append(kinds, fmt.Sprintf("%s %.0f", k, n/elapsed))
			}
		}
		cpu := 100 * (cpuSeconds(o.t, ob.pid) - ob.cpu) / elapsed
		lines[i] = fmt.Sprintf("    %s: %.0f fsyncs/s (%s), CPU %.0f%% of a core", ob.name, total/elapsed, strings.Join(kinds, ", "), cpu)
	}
	machine := o.machine.String()
	o.wg.Wait()
	fmt.Println("    " + machine)
	for i, ob := range o.brokers {
		fmt.Println(lines[i])
		if ob.profileErr != nil {
			fmt.Printf("      no CPU profile: %v\n", ob.profileErr)
			continue
		}
		for _, by := range []string{"flat", "cum"} {
			top, err := topFunctions(ob.profile, by, 8)
			if err != nil {
				fmt.Printf("      no %s summary: %v\n", by, err)
				continue
			}
			fmt.Printf("      top by %s:\n", by)
			for _, l := range top {
				fmt.Printf("        %s\n", l)
			}
		}
	}
}

func fetch(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	return b, err
}

// scrapeFsyncs reads tapes_fsyncs_total by kind from a broker's /metrics.
func scrapeFsyncs(t *testing.T, url string) map[string]float64 {
	t.Helper()
	out := scrapeCounter(t, url, "tapes_fsyncs_total", "kind")
	if len(out) == 0 {
		t.Fatalf("scrape %s: no tapes_fsyncs_total", url)
	}
	return out
}

// scrapeCounter reads metric, by its one label, from a broker's /metrics.
func scrapeCounter(t *testing.T, url, metric, label string) map[string]float64 {
	t.Helper()
	b, err := fetch(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, metric+"{"+label+`="`)
		if !ok {
			continue
		}
		kind, value, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("scrape %s: bad line %q", url, line)
		}
		out[kind] = v
	}
	return out
}

// topFunctions summarizes a CPU profile with `go tool pprof -top`: the
// first n functions sorted by flat (by "flat") or cumulative ("cum") time,
// after the line that gives the profile's duration and total samples.
func topFunctions(profile []byte, by string, n int) ([]string, error) {
	f, err := os.CreateTemp("", "tapes-bench-*.pprof")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(profile)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	var kept string
	if dir := os.Getenv("TAPES_BENCH_KEEP_PROFILES"); dir != "" && by == "flat" {
		if k, err := os.CreateTemp(dir, "broker-*.pprof"); err == nil {
			k.Write(profile)
			k.Close()
			kept = k.Name()
		}
	}
	args := []string{"tool", "pprof", "-top", "-nodecount", strconv.Itoa(n)}
	if by == "cum" {
		args = append(args, "-cum")
	}
	out, err := exec.Command("go", append(args, f.Name())...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("go tool pprof: %v: %s", err, out)
	}
	var lines []string
	table := false
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		switch {
		case strings.HasPrefix(l, "Duration:") && by == "flat":
			lines = append(lines, strings.TrimSpace(l))
			if kept != "" {
				lines = append(lines, "profile kept in "+kept)
			}
		case strings.Contains(l, "flat%") && strings.Contains(l, "cum%"):
			table = true
			lines = append(lines, l)
		case table:
			lines = append(lines, l)
		}
	}
	return lines, nil
}

// diskFsyncRate measures this machine's fsync rate where the benchmarks
// keep their data (the temporary directory): 4 KiB written and fsynced in a
// loop for d. It returns fsyncs/s and the median and 99th percentile.
func diskFsyncRate(d time.Duration) (rate float64, p50, p99 time.Duration, dir string, err error) {
	dir = os.TempDir()
	f, err := os.CreateTemp(dir, "tapes-bench-fsync-*")
	if err != nil {
		return 0, 0, 0, dir, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	var lat []time.Duration
	start := time.Now()
	for time.Since(start) < d {
		t0 := time.Now()
		if _, err := f.Write(buf); err != nil {
			return 0, 0, 0, dir, err
		}
		if err := f.Sync(); err != nil {
			return 0, 0, 0, dir, err
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	return float64(len(lat)) / time.Since(start).Seconds(), lat[len(lat)/2], lat[len(lat)*99/100], filepath.Clean(dir), nil
}
