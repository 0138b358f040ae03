package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

// startCommand is `chaos start NAME -- FLAGS`: a producerd or consumerd
// supervised by `cluster up`, reaching the brokers through links of its
// own, so that chaos can kill, pause and cut it like a broker.
type startCommand struct{ stdout, stderr io.Writer }

func init() {
	register("start", "start a producer or consumer under the cluster: chaos start consumer-1 -- --group demo --topic orders",
		(&startCommand{stdout: os.Stdout, stderr: os.Stderr}).Run)
}

func (s *startCommand) Run(ctx context.Context, args []string) error {
	var flags []string
	for i, a := range args {
		if a == "--" {
			args, flags = args[:i], args[i+1:]
			break
		}
	}
	fs, dir := newFlags("start (producer-N | consumer-N) [--dir DIR] -- PRODUCERD-OR-CONSUMERD-FLAGS",
		"Starts producerd (for a name producer-N) or consumerd (consumer-N) as a child of `cluster up`, with\n--dir and --name added; everything after -- goes to it (see `producerd --help`, `consumerd --help`).\nIts output goes to DIR/logs/NAME.log.", s.stderr)
	rest, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return fmt.Errorf("%w: want one name, producer-N or consumer-N", errUsage)
	}
	name := rest[0]
	kind, _, _ := strings.Cut(name, "-")
	if kind != "producer" && kind != "consumer" {
		return fmt.Errorf("%w: name %q: want producer-N or consumer-N (the kind comes from the name)", errUsage, name)
	}
	cc, closeConn, err := dialControl(ctx, *dir)
	if err != nil {
		return err
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, err := cc.StartProcess(ctx, &tapesv1.StartProcessRequest{Name: name, Kind: kind, Args: flags})
	if err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	fmt.Fprintf(s.stdout, "%s: %s (pid %d), log %s\n", r.Process.Name, r.Process.State, r.Process.Pid, r.Process.Log)
	return nil
}
