package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tapes-dev/tapes/internal/producer"
)

// franzPerfArg, as the test binary's first argument, makes it the franz-go
// producer of TestBenchKafkaPerf (see TestMain): a child process, so that
// its CPU is measured as the other producers' is, by runPerfTool.
const franzPerfArg = "franz-go-perf"

const franzPerfAbout = `Sends --num-records records of --record-size random bytes (one payload, no key, no headers) through
franz-go's kgo client as fast as it can, acks=all with the idempotent producer, no compression,
5 produce requests in flight per broker (kgo's idempotent producer, fixed), and
prints what producerd perf prints (internal/producer's PerfStats): a line every --reporting-interval
and the final line. A record's latency runs from its hand-over to Produce to its promise.
Partitioning: kgo.UniformBytesPartitioner(--batch-bytes, adaptive false): keyless records stick to
one partition until --batch-bytes went to it, then move to a random one, as producerd's sticky
partitioner does. Exit status: 0 every record acknowledged; 1 some failed; 2 bad command line.`

// franzPerf is the franz-go producer: it runs with args and returns the
// exit status.
func franzPerf(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(franzPerfArg, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s --bootstrap-server HOST:PORT,... --topic T --num-records N [FLAGS]\n\n%s\n\nFlags:\n", franzPerfArg, franzPerfAbout)
		fs.PrintDefaults()
	}
	bootstrap := fs.String("bootstrap-server", "", "Kafka listeners, comma-separated (required)")
	topic := fs.String("topic", "", "topic to write to (required; it must exist)")
	n := fs.Int64("num-records", 0, "number of records to send (required)")
	size := fs.Int("record-size", 100, "bytes in each record's value")
	batch := fs.Int("batch-bytes", 16384, "kgo.ProducerBatchMaxBytes, and the bytes after which the partitioner moves on (batch.size)")
	linger := fs.Duration("linger", 5*time.Millisecond, "kgo.ProducerLinger (linger.ms)")
	buffer := fs.Int("buffer-bytes", 32<<20, "kgo.MaxBufferedBytes of record values (buffer.memory)")
	interval := fs.Duration("reporting-interval", 5*time.Second, "how often to print a progress line")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "%s: unexpected arguments %q\n", franzPerfArg, fs.Args())
		return 2
	case *bootstrap == "" || *topic == "":
		fmt.Fprintf(stderr, "%s: --bootstrap-server and --topic are required\n", franzPerfArg)
		return 2
	case *n < 1 || *size < 1 || *batch < 1 || *buffer < 1 || *interval <= 0:
		fmt.Fprintf(stderr, "%s: --num-records %d, --record-size %d, --batch-bytes %d, --buffer-bytes %d, --reporting-interval %v: want each positive\n",
			franzPerfArg, *n, *size, *batch, *buffer, *interval)
		return 2
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(*bootstrap, ",")...),
		kgo.DefaultProduceTopic(*topic),
		// Idempotent, kgo's default: 5 produce requests in flight per
		// broker, fixed (kgo refuses MaxProduceRequestsInflightPerBroker
		// with idempotency), as max.in.flight.requests.per.connection=5.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerBatchMaxBytes(int32(*batch)),
		kgo.ProducerLinger(*linger),
		kgo.RecordPartitioner(kgo.UniformBytesPartitioner(*batch, false, true, nil)),
		kgo.MaxBufferedBytes(*buffer),
		kgo.MaxBufferedRecords(*buffer),          // a record has a byte at least: the bytes bound
		kgo.RecordDeliveryTimeout(2*time.Minute), // delivery.timeout.ms
	)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", franzPerfArg, err)
		return 1
	}
	defer cl.Close()
	payload := make([]byte, *size)
	rand.Read(payload)

	var mu sync.Mutex
	var failed int64
	var firstErr error
	stats := producer.NewPerfStats(*n, time.Now())
	stopReport := stats.Report(stdout, *interval)
	ctx := context.Background()
	for range *n {
		sent := time.Now()
		cl.Produce(ctx, &kgo.Record{Value: payload}, func(r *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				failed++
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				return
			}
			stats.Record(time.Since(sent), len(r.Value))
		})
	}
	err = cl.Flush(ctx) // every promise has run when it returns
	stopReport()
	if err != nil {
		fmt.Fprintf(stderr, "%s: flush: %v\n", franzPerfArg, err)
		return 1
	}
	fmt.Fprintln(stdout, stats.Total(time.Now()).Line())
	mu.Lock()
	defer mu.Unlock()
	if failed > 0 {
		fmt.Fprintf(stderr, "%s: %d records failed; first error: %v\n", franzPerfArg, failed, firstErr)
		return 1
	}
	return 0
}

// runFranzPerf runs the test binary as the franz-go producer with args
// and parses its final line.
func runFranzPerf(t *testing.T, args ...string) perfResult {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args = append([]string{franzPerfArg}, args...)
	return runPerfTool(t, filepath.Base(self)+" "+strings.Join(args, " "), self, args...)
}

// The franz-go producer's command line: --help tells its flags and exits
// 0; a bad command line exits 2, naming what is wrong, before any
// connection.
func TestFranzPerfCommandLine(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--help"}, 0, "-batch-bytes int"},
		{[]string{"--topic", "t", "--num-records", "10"}, 2, "--bootstrap-server and --topic are required"},
		{[]string{"--bootstrap-server", "127.0.0.1:1", "--topic", "t"}, 2, "--num-records 0"},
		{[]string{"--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--num-records", "10", "--batch-bytes", "0"}, 2, "--batch-bytes 0"},
		{[]string{"--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--num-records", "10", "extra"}, 2, `unexpected arguments ["extra"]`},
		{[]string{"--linger", "5"}, 2, "invalid value"},
	} {
		var out, errb strings.Builder
		if code := franzPerf(c.args, &out, &errb); code != c.code || !strings.Contains(errb.String(), c.want) || out.Len() > 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d, stderr with %q", c.args, code, out.String(), errb.String(), c.code, c.want)
		}
	}
}
