package main

import (
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/clusterfile"
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
		"how long to wait for the cluster: for each request, and for each produced batch with its retries")
}

// client resolves the brokers and returns a client for them; the caller
// closes it.
func (t *clusterTarget) client() (*client.Client, error) {
	addrs, err := clusterfile.Bootstrap(t.bootstrap, t.dir)
	if err != nil {
		return nil, err
	}
	cl, err := client.New(client.Config{Bootstrap: addrs})
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return cl, nil
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
