package systest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/clusterfile"
	"github.com/tapes-dev/tapes/internal/eventually"
)

// kafkaProbeArg makes the test binary the Kafka client of
// TestKafkaClientCrossesItsLinks (see TestMain).
const kafkaProbeArg = "kafka-probe"

// kafkaProbe is a franz-go program: with the bootstrap servers as its
// argument (the launcher's {kafka-bootstrap}), it loads the brokers from
// Metadata, then asks each broker for Metadata over and over, each on its
// own, and prints every answer as
//
//	broker=N ok seq=S ms=M addrs=1=HOST:PORT,2=...
//	broker=N fail seq=S ms=M err=...
//
// (addrs: the brokers as the answer names them, which is what the client
// dials next). A request waits at most 3 s.
func kafkaProbe(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: kafka-probe BOOTSTRAP")
		return 2
	}
	fmt.Printf("bootstrap arg=%s env=%s\n", args[0], os.Getenv("KAFKA_BOOTSTRAP"))
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(args[0], ",")...), kgo.RequestRetries(0), kgo.DialTimeout(3*time.Second))
	if err != nil {
		fmt.Println("client:", err)
		return 1
	}
	defer cl.Close()
	var ids []int32
	for len(ids) == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
		cancel()
		if err != nil {
			fmt.Println("bootstrap metadata:", err)
			time.Sleep(200 * time.Millisecond)
			continue
		}
		for _, b := range resp.Brokers {
			ids = append(ids, b.NodeID)
		}
	}
	var mu sync.Mutex // one line at a time
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			for seq := 0; ; seq++ {
				req := kmsg.NewPtrMetadataRequest()
				req.Topics = []kmsg.MetadataRequestTopic{} // brokers only
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				resp, err := req.RequestWith(ctx, cl.Broker(int(id)))
				cancel()
				ms := time.Since(start).Milliseconds()
				mu.Lock()
				if err != nil {
					fmt.Printf("broker=%d fail seq=%d ms=%d err=%v\n", id, seq, ms, err)
				} else {
					var addrs []string
					for _, b := range resp.Brokers {
						addrs = append(addrs, fmt.Sprintf("%d=%s:%d", b.NodeID, b.Host, b.Port))
					}
					sort.Strings(addrs)
					fmt.Printf("broker=%d ok seq=%d ms=%d addrs=%s\n", id, seq, ms, strings.Join(addrs, ","))
				}
				mu.Unlock()
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	return 0
}

// probeLine is one answer line of kafkaProbe.
type probeLine struct {
	broker int
	ok     bool
	ms     int64
	addrs  string
}

// probeLines reads the probe's answers from its log.
func probeLines(t *testing.T, log string) []probeLine {
	t.Helper()
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var out []probeLine
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "broker=") {
			continue
		}
		var l probeLine
		l.broker, _ = strconv.Atoi(strings.TrimPrefix(f[0], "broker="))
		l.ok = f[1] == "ok"
		l.ms, _ = strconv.ParseInt(strings.TrimPrefix(f[3], "ms="), 10, 64)
		if l.ok && len(f) > 4 {
			l.addrs = strings.TrimPrefix(f[4], "addrs=")
		}
		out = append(out, l)
	}
	return out
}

// count returns how many lines after from are of broker b with outcome ok.
func count(lines []probeLine, from, b int, ok bool) int {
	n := 0
	for _, l := range lines[min(from, len(lines)):] {
		if l.broker == b && l.ok == ok {
			n++
		}
	}
	return n
}

// TestKafkaClientCrossesItsLinks (issue 10 point 7): a franz-go program
// started through `chaos start kprobe-1 -- PROG {kafka-bootstrap}` gets its
// own links as bootstrap and, in every Metadata answer, its own links as
// the brokers' addresses; `chaos partition kprobe-1 --from broker-1` (both
// ways, then one way) stops its requests to broker 1 while brokers 2 and 3
// keep answering, `chaos delay` slows every answer, `chaos isolate` leaves
// it alone, and `chaos heal` restores broker 1.
func TestKafkaClientCrossesItsLinks(t *testing.T) {
	dir := clusterUp(t)
	f, err := clusterfile.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	code, out := chaosCmd(t, dir, "start", "kprobe-1", "--", self, kafkaProbeArg, "{kafka-bootstrap}")
	if code != 0 {
		t.Fatalf("chaos start: %d\n%s", code, out)
	}
	log := filepath.Join(dir, "logs", "kprobe-1.log")
	var lines []probeLine
	// waitFor polls the probe's log until cond holds of its lines.
	waitFor := func(what string, cond func([]probeLine) bool) {
		t.Helper()
		if err := eventually.WaitEvery(60*time.Second, 100*time.Millisecond, func() error {
			lines = probeLines(t, log)
			if !cond(lines) {
				return fmt.Errorf("not yet: %s", what)
			}
			return nil
		}); err != nil {
			data, _ := os.ReadFile(log)
			t.Fatalf("%v; probe log:\n%s", err, tail(string(data), 4000))
		}
	}
	waitFor("every broker answers", func(ls []probeLine) bool {
		return count(ls, 0, 1, true) > 0 && count(ls, 0, 2, true) > 0 && count(ls, 0, 3, true) > 0
	})

	// The bootstrap servers and every address Metadata gives the client
	// are its links, not the brokers' Kafka listeners.
	data, _ := os.ReadFile(log)
	var bootstrap string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "bootstrap arg=") {
			bootstrap = l
		}
	}
	arg, env, _ := strings.Cut(strings.TrimPrefix(bootstrap, "bootstrap arg="), " env=")
	links := strings.Split(arg, ",")
	if arg == "" || arg != env || len(links) != 3 {
		t.Fatalf("bootstrap line %q: want {kafka-bootstrap} and $KAFKA_BOOTSTRAP, three links", bootstrap)
	}
	for _, a := range links {
		if slices.Contains(strings.Split(f.KafkaBootstrap, ","), a) {
			t.Errorf("bootstrap %s is a broker's own Kafka listener (%s)", a, f.KafkaBootstrap)
		}
	}
	for _, l := range lines {
		if !l.ok {
			continue
		}
		var got []string
		for _, a := range strings.Split(l.addrs, ",") {
			_, addr, _ := strings.Cut(a, "=")
			got = append(got, addr)
		}
		if sort.Strings(got); !slices.Equal(got, sortedCopy(links)) {
			t.Fatalf("Metadata from broker %d names %s; want the client's links %s", l.broker, l.addrs, arg)
		}
	}

	var heal func()
	// cut asks chaos for a fault and checks that broker 1 stops answering
	// the probe while brokers 2 and 3 go on.
	cut := func(args ...string) {
		t.Helper()
		if code, out := chaosCmd(t, dir, args...); code != 0 {
			t.Fatalf("chaos %v: %d\n%s", args, code, out)
		}
		lines = probeLines(t, log)
		from := len(lines)
		waitFor("broker 1 fails after "+strings.Join(args, " "), func(ls []probeLine) bool { return count(ls, from, 1, false) > 0 })
		failed := len(lines)
		waitFor("brokers 2 and 3 answer during the cut", func(ls []probeLine) bool {
			return count(ls, failed, 2, true) >= 10 && count(ls, failed, 3, true) >= 10
		})
		if n := count(lines, failed, 1, true); n > 0 {
			t.Fatalf("after %v, broker 1 answered %d times while cut", args, n)
		}
		heal()
	}
	heal = func() {
		t.Helper()
		if code, out := chaosCmd(t, dir, "heal"); code != 0 {
			t.Fatalf("chaos heal: %d\n%s", code, out)
		}
		from := len(probeLines(t, log))
		waitFor("broker 1 answers after the heal", func(ls []probeLine) bool { return count(ls, from, 1, true) > 0 })
	}
	cut("partition", "kprobe-1", "--from", "broker-1")
	cut("partition", "kprobe-1", "--from", "broker-1", "--one-way")
	cut("partition", "broker-1", "--from", "kprobe-1")

	// delay: every answer takes at least the delay each way.
	if code, out := chaosCmd(t, dir, "delay", "kprobe-1", "--ms", "400"); code != 0 {
		t.Fatalf("chaos delay: %d\n%s", code, out)
	}
	from := len(probeLines(t, log)) + 6 // answers in flight at the change are not judged
	waitFor("delayed answers", func(ls []probeLine) bool { return len(ls) >= from+9 })
	for _, l := range lines[from:] {
		if l.ok && l.ms < 800 {
			t.Errorf("broker %d answered in %d ms through links delayed 400 ms each way", l.broker, l.ms)
		}
	}
	heal()

	// isolate cuts broker 1 from the other brokers only: the client's
	// links stay as they are.
	if code, out := chaosCmd(t, dir, "isolate", "broker-1"); code != 0 {
		t.Fatalf("chaos isolate: %d\n%s", code, out)
	}
	code, out = chaosCmd(t, dir, "status")
	if i := strings.Index(out, "FROM"); code != 0 || i < 0 || strings.Contains(out[i:], "kprobe-1") {
		t.Fatalf("status after isolate: %d\n%s", code, out)
	}
	heal()
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}
