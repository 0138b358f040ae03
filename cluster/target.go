package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/clusterfile"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/launch"
)

// How the operator commands wait for a cluster.
const (
	// unreachableAfter is how long every broker address may refuse
	// connections before a command says the cluster is not running
	// (client.Config.UnreachableAfter).
	unreachableAfter = 3 * time.Second
	// noticeEvery is the least time between two "waiting for" lines.
	noticeEvery = 2 * time.Second
)

// clusterTarget holds the flags every operator command shares to name the
// cluster it talks to, and builds the client for it.
type clusterTarget struct {
	dir       string
	bootstrap string
	timeout   time.Duration
}

// addFlags registers --dir, --bootstrap-server and --timeout on fs.
func (t *clusterTarget) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&t.dir, "dir", clusterfile.DefaultDir(),
		"cluster `directory` written by cluster up, whose cluster.json lists the brokers")
	fs.StringVar(&t.bootstrap, "bootstrap-server", "",
		"comma-separated broker `addresses` (host:port,host:port); wins over --dir")
	fs.DurationVar(&t.timeout, "timeout", 30*time.Second,
		"how long to wait for the cluster, retrying retriable errors (brokers still starting, a leader moving): for each request, and for each produced batch with its retries")
}

// client resolves the brokers and returns a client for them; the caller
// closes it. A cluster directory whose launcher is gone is an error at
// once; a cluster whose every address refuses connections is one after
// unreachableAfter; while the client retries, what it waits for goes to
// stderr when stderr is a terminal.
func (t *clusterTarget) client() (*client.Client, error) {
	addrs, err := clusterfile.Bootstrap(t.bootstrap, t.dir)
	if err != nil {
		return nil, err
	}
	hint := "is the cluster running?"
	if strings.TrimSpace(t.bootstrap) == "" {
		up := "`cluster up" + dirHint(t.dir, true) + "`"
		switch pid, alive, known := launch.Launcher(t.dir); {
		case known && !alive && pid > 0:
			return nil, fmt.Errorf("%s names a cluster whose launcher (pid %d) is gone: start it again with %s",
				filepath.Join(t.dir, clusterfile.Name), pid, up)
		case known && !alive:
			return nil, fmt.Errorf("the cluster in %s is stopped (its launcher exited): start it again with %s", t.dir, up)
		case alive:
			hint = fmt.Sprintf("its launcher (pid %d) runs; are its brokers still starting? their logs are in %s",
				pid, filepath.Join(t.dir, "logs"))
		default:
			hint += " " + up
		}
	}
	cfg := client.Config{Bootstrap: addrs, UnreachableAfter: unreachableAfter, UnreachableHint: hint}
	if w := terminalStderr(); w != nil {
		n := &retryNotices{w: w, limit: client.RateLimit{Every: noticeEvery}, now: time.Now, deadline: time.Now().Add(t.timeout)}
		cfg.OnRetry = n.notice
	}
	cl, err := client.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return cl, nil
}

// metadata returns the cluster's metadata (every topic) within --timeout,
// through a client opened and closed for it.
func (t *clusterTarget) metadata(ctx context.Context) (*tapesv1.MetadataResponse, error) {
	cl, err := t.client()
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	return cl.Metadata(ctx, nil, false)
}

// terminalStderr returns os.Stderr when it is a terminal, else nil: the
// waiting lines are for a person watching, not for a script's log.
func terminalStderr() io.Writer {
	fi, err := os.Stderr.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	return os.Stderr
}

// retryNotices prints what a command's client waits for
// (client.Config.OnRetry), at most one line per limit.Every. notice is
// called from the goroutines of the client's calls.
type retryNotices struct {
	w        io.Writer
	limit    client.RateLimit
	now      func() time.Time
	deadline time.Time // when the command gives up (its --timeout)
}

func (n *retryNotices) notice(r client.Retry) {
	now := n.now()
	if !n.limit.Due(now) {
		return
	}
	left := max(n.deadline.Sub(now), 0).Round(time.Second)
	if r.Unreachable != nil {
		// The client gives up within unreachableAfter, not at the deadline.
		fmt.Fprintf(n.w, "waiting: no broker answers at %s yet (%s)\n", strings.Join(r.Unreachable, ", "), r.Op)
		return
	}
	fmt.Fprintf(n.w, "waiting: %s: %v; retrying, giving up in %v\n", r.Op, r.Err, left)
}

// commandFlags returns a flag set for a subcommand whose --help prints
// usage (the synopsis), about (what the command does) and every flag.
func commandFlags(usage, about string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(usage, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage:\n  cluster %s\n\n%s\n\nFlags:\n", usage, about)
		fs.PrintDefaults()
	}
	return fs
}
