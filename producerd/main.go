// Command producerd is the tapes producer: a daemon that writes keyed or
// keyless records to a topic at a chosen rate (acks, idempotence, batching,
// retries, a history file of every record's outcome, a gRPC control
// endpoint), and `producerd perf`, a throughput and latency test in the
// manner of kafka-producer-perf-test.
//
//	producerd --topic orders --rate 1000/s --acks all --idempotent --history orders.jsonl
//	producerd perf --num-records 1000000 --record-size 100 --throughput -1 --acks all --partitions 6
//
// Exit status: 0 when every record was acknowledged; 1 when records failed
// or the run could not go on; 2 for a bad command line; 3 when the cluster
// cannot take the input (unknown topic, a record larger than
// max.message.bytes).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/clusterfile"
	"github.com/tapes-dev/tapes/internal/producer"
)

// Exit statuses.
const (
	exitFailed = 1
	exitUsage  = 2
	exitInput  = 3
)

// usageError is a bad command line (exit 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// inputError is input the cluster cannot take (exit 3).
type inputError struct{ err error }

func (e *inputError) Error() string { return e.err.Error() }
func (e *inputError) Unwrap() error { return e.err }

// failedError: the run ended, but records failed (exit 1, no extra message).
type failedError struct{ n int64 }

func (e *failedError) Error() string { return fmt.Sprintf("%d records failed", e.n) }

func main() {
	args := os.Args[1:]
	name := "producerd"
	run := runDaemon
	if len(args) > 0 && args[0] == "perf" {
		name, run, args = "producerd perf", runPerf, args[1:]
	}
	err := run(args, os.Stdout, os.Stderr)
	os.Exit(exitCode(name, err, os.Stderr))
}

// exitCode prints err (when it says something) and returns the status.
func exitCode(name string, err error, stderr io.Writer) int {
	var ue *usageError
	var ie *inputError
	var fe *failedError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &fe):
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitFailed
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "%s: %v (see --help)\n", name, err)
		return exitUsage
	case errors.As(err, &ie):
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitInput
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	return exitFailed
}

// newFlags returns a flag set whose --help prints synopsis, about and every
// flag; parse errors are usage errors.
func newFlags(name, synopsis, about string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage:\n  %s\n\n%s\n\nFlags:\n", synopsis, about)
		fs.PrintDefaults()
	}
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// target is --bootstrap-server / --dir.
type target struct {
	bootstrap, dir string
}

func (t *target) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&t.bootstrap, "bootstrap-server", "",
		"comma-separated broker `addresses` (host:port,host:port) to start from; wins over --dir")
	fs.StringVar(&t.dir, "dir", clusterfile.DefaultDir(),
		"cluster `directory` of `cluster up`, whose cluster.json lists the brokers ($TAPES_DIR overrides the default)")
}

func (t *target) client(logger *slog.Logger) (*client.Client, error) {
	addrs, err := clusterfile.Bootstrap(t.bootstrap, t.dir)
	if err != nil {
		return nil, err
	}
	// No broker answering is said at once, then every 30 s, while the
	// client keeps retrying (the cluster may be starting).
	hint := clusterfile.UnreachableHint(t.bootstrap, t.dir)
	return client.New(client.Config{Bootstrap: addrs, Logger: logger, DialOptions: producer.DialOptions(),
		UnreachableHint: hint, OnRetry: client.WarnUnreachable(logger, 30*time.Second, hint)})
}

// msDuration is a duration flag that also takes a bare number of
// milliseconds, as Kafka's *.ms settings do: "5" is 5ms, "1s" is a second.
type msDuration struct{ d *time.Duration }

func (m msDuration) String() string {
	if m.d == nil {
		return ""
	}
	return m.d.String()
}

func (m msDuration) Set(s string) error {
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		*m.d = time.Duration(n * float64(time.Millisecond))
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want milliseconds (5) or a duration (5ms, 1s)")
	}
	*m.d = d
	return nil
}

// parseRate reads "1000", "1000/s" or "1000/sec".
func parseRate(s string) (float64, error) {
	v := strings.TrimSpace(s)
	for _, suf := range []string{"/sec", "/s"} {
		v = strings.TrimSuffix(v, suf)
	}
	r, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil {
		return 0, fmt.Errorf("--rate %q: want records per second, e.g. 1000/s (0: as fast as possible)", s)
	}
	if r < 0 {
		return 0, fmt.Errorf("--rate %q: a rate cannot be negative (0: as fast as possible)", s)
	}
	return r, nil
}

func newLogger(level string, stderr io.Writer, name string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: use debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: l})).With("producer", name), nil
}
