package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/launch"
)

// startCommand is `chaos start NAME -- FLAGS`: a producerd or consumerd
// (NAME producer-N, consumer-N), or `chaos start NAME -- CMD ARGS`: any
// Kafka client program (any other NAME), supervised by `cluster up`,
// reaching the brokers through links of its own, so that chaos can kill,
// pause and cut it like a broker.
type startCommand struct{ stdout, stderr io.Writer }

func init() {
	register("start", "start a process under the cluster: chaos start consumer-1 -- --group demo --topic orders | chaos start kcat-1 -- kcat -b {kafka-bootstrap} -L",
		(&startCommand{stdout: os.Stdout, stderr: os.Stderr}).Run)
}

const startAbout = `For a name producer-N or consumer-N, starts producerd or consumerd as a child of ` + "`cluster up`" + `,
with --dir and --name added; everything after -- goes to it (see ` + "`producerd --help`, `consumerd --help`" + `).

For any other name, starts the Kafka client program CMD (looked up on $PATH, or a path)
with ARGS, where {kafka-bootstrap} is replaced by its bootstrap servers, also given
in $KAFKA_BOOTSTRAP. Those are the client's own links to the brokers' Kafka listeners,
and the links rewrite the brokers' addresses in Metadata and FindCoordinator answers to
the client's links, so every connection it opens crosses one: ` + "`chaos partition NAME --from broker-1`" + `
cuts it off from broker 1, ` + "`chaos heal`" + ` restores it.

Its output goes to DIR/logs/NAME.log.`

func (s *startCommand) Run(ctx context.Context, args []string) error {
	var flags []string
	dashes := false
	for i, a := range args {
		if a == "--" {
			args, flags, dashes = args[:i], args[i+1:], true
			break
		}
	}
	fs, dir := newFlags("start (producer-N | consumer-N) [--dir DIR] -- PRODUCERD-OR-CONSUMERD-FLAGS\n  chaos start NAME [--dir DIR] -- CMD ARGS", startAbout, s.stderr)
	rest, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return fmt.Errorf("%w: want one name (producer-N, consumer-N, or a Kafka client's name)", errUsage)
	}
	name := rest[0]
	kind, _, _ := strings.Cut(name, "-")
	if kind != "producer" && kind != "consumer" {
		if kind = launch.KafkaKind; !dashes || len(flags) == 0 {
			return fmt.Errorf("%w: %s is not producer-N or consumer-N, so it is a Kafka client: give its command after --, e.g. chaos start %s -- kcat -b %s -L", errUsage, name, name, launch.KafkaBootstrapArg)
		}
		path, err := exec.LookPath(flags[0])
		if err != nil {
			return fmt.Errorf("%w: %s: %v", errUsage, flags[0], err)
		}
		if path, err = filepath.Abs(path); err != nil {
			return err
		}
		flags = append([]string{path}, flags[1:]...)
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
