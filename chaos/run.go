package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
	"github.com/tapes-dev/tapes/internal/clusterfile"
	"github.com/tapes-dev/tapes/internal/experiment"
	"github.com/tapes-dev/tapes/internal/launch"
)

// runCommand is `chaos run NAME`: one built-in experiment on a fresh
// cluster, checked, with a report.
type runCommand struct{ stdout, stderr io.Writer }

func init() {
	register("run", "run an experiment on a fresh cluster and check it: chaos run acks1-leader-isolation", (&runCommand{stdout: os.Stdout, stderr: os.Stderr}).Run)
	register("list", "describe the built-in experiments", (&runCommand{stdout: os.Stdout, stderr: os.Stderr}).List)
}

func (r *runCommand) List(_ context.Context, args []string) error {
	if len(args) > 0 && args[0] != "--help" && args[0] != "-h" {
		return fmt.Errorf("%w: list takes no arguments", errUsage)
	}
	for _, x := range experiment.All() {
		fmt.Fprintf(r.stdout, "%s (default --duration %v)\n", x.Name, x.Duration)
		for _, line := range strings.Split(x.About, "\n") {
			fmt.Fprintf(r.stdout, "    %s\n", line)
		}
		fmt.Fprintln(r.stdout)
	}
	return nil
}

func (r *runCommand) Run(ctx context.Context, args []string) error {
	fs, _ := newFlags("run NAME [--seed S] [--duration D] [--out DIR]",
		"Starts a fresh 3-broker cluster (in OUT/cluster, with a fault-injection link on every ordered pair of\nprocesses), runs the experiment's workload and fault schedule with real producerd and consumerd\nprocesses, reads every partition back, checks the histories (the checker of `chaos check`) and writes\nOUT/check.json and OUT/report.html. Exit status 0 when the experiment's expectation holds, 1 when not.\n`chaos list` describes the experiments.", r.stderr)
	seed := fs.Uint64("seed", 1, "seed of the fault schedule's randomness (a run with the same seed makes the same choices)")
	duration := fs.Duration("duration", 0, "how long the faults go on (default: the experiment's own, see `chaos list`)")
	out := fs.String("out", "", "directory for histories, checker output and the report (default: DIR/runs/NAME-TIME under --dir's default)")
	onHosts := fs.Bool("netns", false, "root only: run the brokers on hosts of their own (network namespaces joined by a bridge, removed at the end); faults between brokers then drop packets (nftables) instead of cutting links")
	brokerArg := fs.String("broker-args", "", "extra brokerd flags, space-separated, e.g. \"--raft-heartbeat-timeout 1s\"")
	rest, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return fmt.Errorf("%w: want one experiment name (see `chaos list`)", errUsage)
	}
	x, ok := experiment.Lookup(rest[0])
	if !ok {
		var names []string
		for _, e := range experiment.All() {
			names = append(names, e.Name)
		}
		return fmt.Errorf("%w: no experiment %q (have %s)", errUsage, rest[0], strings.Join(names, ", "))
	}
	if *duration < 0 {
		return fmt.Errorf("%w: --duration %v: cannot be negative", errUsage, *duration)
	}
	if *out == "" {
		*out = filepath.Join(clusterfile.DefaultDir(), "runs", x.Name+"-"+time.Now().Format("20060102-150405"))
	}
	var bins experiment.Binaries
	for _, b := range []struct {
		name string
		dst  *string
	}{{"brokerd", &bins.Brokerd}, {"producerd", &bins.Producerd}, {"consumerd", &bins.Consumerd}} {
		if *b.dst, err = launch.FindBinary(b.name); err != nil {
			return err
		}
	}
	fmt.Fprintf(r.stdout, "running %s (seed %d); output in %s\n", x.Name, *seed, *out)
	o, err := experiment.Run(ctx, x, experiment.Options{Seed: *seed, Duration: *duration, Out: *out, Bins: bins,
		BrokerArgs: strings.Fields(*brokerArg), Stdout: r.stdout, Netns: *onHosts})
	if err != nil {
		return err
	}
	printOutcome(r.stdout, x, o)
	if !o.Valid {
		return fmt.Errorf("%s: expectation not met: %s", x.Name, strings.Join(o.Why, "; "))
	}
	return nil
}

func printOutcome(w io.Writer, x *experiment.Experiment, o *experiment.Outcome) {
	res := o.Result
	fmt.Fprintf(w, "\n%s:", x.Name)
	if res.Sent > 0 || res.Txn == nil {
		fmt.Fprintf(w, " %d sent, %d acknowledged, %d failed; %d records processed by consumers;", res.Sent, res.Acked, res.Failed, res.Processed)
		if res.LogRecords >= 0 {
			fmt.Fprintf(w, " %d read back;", res.LogRecords)
		}
	}
	if t := res.Txn; t != nil {
		fmt.Fprintf(w, " %d transactions (%d committed, %d aborted, %d unknown), %d read-process-write steps; reads: %d read_committed, %d read_uncommitted (%d of aborted writes)",
			t.Transactions, t.Committed, t.Aborted, t.Unknown, t.Steps, t.ReadCommitted, t.ReadUncommitted, t.AbortedSeenUncommitted)
		if t.Effects > 0 {
			fmt.Fprintf(w, "; %d external effects (%d duplicates)", t.Effects, t.ExternalDuplicates)
		}
		if h := t.LongestLSOHang; h != nil {
			fmt.Fprintf(w, "; longest LSO hang %.1f s (%s-%d at %d)", h.Seconds, h.Topic, h.Partition, h.LSO)
		}
	}
	fmt.Fprintln(w)
	for _, k := range check.Kinds {
		if n, ok := res.Counts[k]; ok && n > 0 {
			fmt.Fprintf(w, "  %-22s %d\n", k, n)
			if note := check.Notes[k]; note != "" {
				fmt.Fprintf(w, "  %-22s (%s)\n", "", note)
			}
		}
	}
	shown := map[string]int{}
	for _, a := range res.Anomalies {
		if shown[a.Kind] < 5 {
			fmt.Fprintf(w, "    %s\n", a.String())
		}
		shown[a.Kind]++
	}
	verdict := "PASS"
	if !o.Valid {
		verdict = "FAIL: " + strings.Join(o.Why, "; ")
	}
	fmt.Fprintf(w, "expectation (%s): %s\nreport: %s\n", x.Expect.Name, verdict, o.Report)
}
