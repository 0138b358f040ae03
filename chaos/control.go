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
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tapes-dev/tapes/internal/clusterfile"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/launch"
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

// controlError is dialControl's errNoControl: its message says what is
// wrong and what to do.
type controlError struct{ msg string }

func (e *controlError) Error() string { return e.msg }

// Is makes errors.Is(err, errNoControl) hold.
func (e *controlError) Is(target error) bool { return target == errNoControl }

func noControl(format string, args ...any) error {
	return &controlError{msg: fmt.Sprintf(format, args...)}
}

// controlConnectTimeout bounds how long dialControl waits for the control
// endpoint to accept a connection: a launcher that is stopped (SIGSTOP) or
// an address that drops packets must be reported within seconds, not at
// the end of a command's RPC deadline. A variable so that a test can
// shorten it.
var controlConnectTimeout = 5 * time.Second

// dialControl connects to the control endpoint of the `cluster up` serving
// dir, and waits (up to controlConnectTimeout, or ctx) for the connection
// to be ready. A launcher that the lock file names and that is gone, or an
// endpoint that refuses or does not answer, is an errNoControl error that
// says what to do. It blocks only on that wait.
func dialControl(ctx context.Context, dir string) (tapesv1.ClusterControlServiceClient, func(), error) {
	f, err := clusterfile.Read(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("no cluster in %s (no %s): start one with `cluster up --dir %s`", dir, clusterfile.Name, dir)
	}
	if err != nil {
		return nil, nil, err
	}
	up := "`cluster up --dir " + dir + "`"
	pid, alive, known := launch.Launcher(dir)
	switch {
	case known && !alive && pid > 0:
		return nil, nil, noControl("the launcher of %s (pid %d) is not running: start it with %s", dir, pid, up)
	case known && !alive:
		return nil, nil, noControl("the cluster in %s is stopped (its launcher exited): start it with %s", dir, up)
	}
	if f.Control == "" {
		return nil, nil, noControl("the cluster in %s has no control endpoint: is `cluster up` running? (%s names none)", dir, filepath.Join(dir, clusterfile.Name))
	}
	cc, err := grpc.NewClient(f.Control, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("control endpoint %s: %w", f.Control, err)
	}
	if why := awaitReady(ctx, cc); why != "" {
		cc.Close()
		hint := clusterfile.UnreachableHint("", dir)
		if alive {
			hint = fmt.Sprintf("its launcher (pid %d) runs: is it stopped (SIGSTOP) or still starting?", pid)
		}
		return nil, nil, noControl("no control endpoint answers at %s (named by %s): %s; %s", f.Control, filepath.Join(dir, clusterfile.Name), why, hint)
	}
	return tapesv1.NewClusterControlServiceClient(cc), func() { cc.Close() }, nil
}

// awaitReady connects cc and waits for it to be ready, up to
// controlConnectTimeout; it returns why it is not ("" once ready).
func awaitReady(ctx context.Context, cc *grpc.ClientConn) string {
	ctx, cancel := context.WithTimeout(ctx, controlConnectTimeout)
	defer cancel()
	cc.Connect()
	for {
		switch s := cc.GetState(); s {
		case connectivity.Ready:
			return ""
		case connectivity.TransientFailure, connectivity.Shutdown:
			return "the connection failed (refused, or the address is not reachable)"
		default:
			if !cc.WaitForStateChange(ctx, s) {
				return fmt.Sprintf("no connection within %v", controlConnectTimeout)
			}
		}
	}
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
