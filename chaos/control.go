package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tapes-dev/tapes/internal/clusterfile"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

// newFlags returns a flag set for `chaos NAME` with --dir.
func newFlags(synopsis, about string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage:\n  chaos %s\n\n%s\n\nFlags:\n", synopsis, about)
		fs.PrintDefaults()
	}
	dir := fs.String("dir", clusterfile.DefaultDir(), "cluster `DIR` of a running `cluster up` (its cluster.json names the control endpoint; $TAPES_DIR overrides the default)")
	return fs, dir
}

// parseArgs parses flags placed before or after the positional arguments.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// dialControl connects to the control endpoint of the `cluster up` serving
// dir.
func dialControl(dir string) (tapesv1.ClusterControlServiceClient, func(), error) {
	f, err := clusterfile.Read(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("no cluster in %s (no %s): start one with `cluster up --dir %s`", dir, clusterfile.Name, dir)
	}
	if err != nil {
		return nil, nil, err
	}
	if f.Control == "" {
		return nil, nil, fmt.Errorf("the cluster in %s has no control endpoint: is `cluster up` running? (%s names none)", dir, filepath.Join(dir, clusterfile.Name))
	}
	cc, err := grpc.NewClient(f.Control, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("control endpoint %s: %w", f.Control, err)
	}
	return tapesv1.NewClusterControlServiceClient(cc), func() { cc.Close() }, nil
}

// status fetches the cluster's processes and links.
func status(ctx context.Context, cc tapesv1.ClusterControlServiceClient) (*tapesv1.ClusterStatusResponse, error) {
	st, err := cc.ClusterStatus(ctx, &tapesv1.ClusterStatusRequest{})
	if err != nil {
		return nil, fmt.Errorf("cluster status: %w", err)
	}
	return st, nil
}

// processNames lists the names in st, for error messages.
func processNames(st *tapesv1.ClusterStatusResponse) string {
	var names []string
	for _, p := range st.Processes {
		names = append(names, p.Name)
	}
	return strings.Join(names, ", ")
}

// findProcess checks that name is a process of the cluster.
func findProcess(st *tapesv1.ClusterStatusResponse, name string) (*tapesv1.ProcessInfo, error) {
	for _, p := range st.Processes {
		if p.Name == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("%w: no process %q in this cluster (have %s)", errUsage, name, processNames(st))
}
