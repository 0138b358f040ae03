package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/clusterfile"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/launch"
	"github.com/tapes-dev/tapes/internal/netfault"
)

// networkCommand is one of the link faults: partition, isolate, delay, heal.
type networkCommand struct {
	verb           string
	stdout, stderr io.Writer
}

func init() {
	for _, c := range []struct{ verb, summary string }{
		{"partition", "cut the links between a process and others: chaos partition broker-1 --from broker-2,broker-3 [--one-way]"},
		{"isolate", "cut a broker off from the other brokers: chaos isolate broker-2 | chaos isolate --leader-of orders/0"},
		{"delay", "delay every link of a process: chaos delay broker-3 --ms 200 --jitter 50"},
		{"heal", "restore every link"},
		{"status", "processes, links and the faults on them"},
	} {
		nc := networkCommand{verb: c.verb, stdout: os.Stdout, stderr: os.Stderr}
		register(c.verb, c.summary, nc.Run)
	}
}

const networkAbout = `Every connection between the processes of ` + "`cluster up`" + ` (broker to broker, producer,
consumer or Kafka client to broker) crosses a link the launcher owns: a loopback proxy per ordered pair.
A cut link delivers nothing and the connection hangs until the peers' own timeouts fire, as
on a network that lost the route; the processes are never told. After ` + "`chaos heal`" + `, what
was sent and not yet given up on arrives. On a cluster started with ` + "`cluster up --netns`" + `, brokers
reach each other directly, host to host: fault them with ip-partition, ip-isolate and ip-delay
(root); heal removes those faults too.`

func (c networkCommand) Run(ctx context.Context, args []string) error {
	var synopsis string
	switch c.verb {
	case "partition":
		synopsis = "partition NAME --from NAME[,NAME...] [--one-way]"
	case "isolate":
		synopsis = "isolate (NAME | --leader-of TOPIC/PARTITION)"
	case "delay":
		synopsis = "delay NAME --ms MS [--jitter MS]"
	default:
		synopsis = c.verb
	}
	fs, dir := newFlags(synopsis+" [--dir DIR]", networkAbout, c.stderr)
	from := fs.String("from", "", "partition: comma-separated processes to cut NAME off from")
	oneWay := fs.Bool("one-way", false, "partition: cut only what the --from processes send to NAME (NAME's own messages still arrive)")
	leaderOf := fs.String("leader-of", "", "isolate: the broker that currently leads TOPIC/PARTITION, e.g. orders/0")
	ms := fs.Int("ms", 0, "delay: milliseconds added to every chunk of bytes, each way")
	jitter := fs.Int("jitter", 0, "delay: up to this many milliseconds more or less, at random")
	rest, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	cc, closeConn, err := dialControl(ctx, *dir)
	if err != nil {
		return err
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := status(ctx, cc)
	if err != nil {
		return err
	}
	switch c.verb {
	case "status":
		if len(rest) > 0 {
			return fmt.Errorf("%w: status takes no arguments", errUsage)
		}
		printStatus(c.stdout, st)
		return printHostFaults(ctx, c.stdout, *dir)
	case "heal":
		if len(rest) > 0 {
			return fmt.Errorf("%w: heal takes no arguments", errUsage)
		}
		if _, err := cc.Heal(ctx, &tapesv1.HealRequest{}); err != nil {
			return fmt.Errorf("heal: %w", err)
		}
		fmt.Fprintln(c.stdout, "healed: every link carries bytes both ways, without delay")
		if f, err := clusterfile.Read(*dir); err == nil && len(hostsOf(f)) > 0 {
			hosts, err := clusterHosts(*dir)
			if err == nil {
				err = healHosts(ctx, hosts)
			}
			if err != nil {
				return fmt.Errorf("heal the hosts' IP-level faults: %w", err)
			}
			fmt.Fprintln(c.stdout, "healed: no host drops or delays packets")
		}
		return nil
	}

	var name string
	switch {
	case c.verb == "isolate" && *leaderOf != "":
		if len(rest) > 0 {
			return fmt.Errorf("%w: give a process name or --leader-of, not both", errUsage)
		}
		if name, err = leaderName(ctx, *dir, *leaderOf); err != nil {
			return err
		}
	case len(rest) == 1:
		name = rest[0]
	default:
		return fmt.Errorf("%w: want exactly one process name (e.g. broker-1)", errUsage)
	}
	if _, err := findProcess(st, name); err != nil {
		return err
	}

	links, err := linkStates(st)
	if err != nil {
		return err
	}
	var changes []launch.LinkState
	var what string
	switch c.verb {
	case "partition":
		if *from == "" {
			return fmt.Errorf("%w: partition needs --from NAME[,NAME...]", errUsage)
		}
		var others []string
		for _, o := range strings.Split(*from, ",") {
			o = strings.TrimSpace(o)
			if o == name {
				return fmt.Errorf("%w: --from names %s itself", errUsage, name)
			}
			if _, err := findProcess(st, o); err != nil {
				return err
			}
			others = append(others, o)
		}
		changes = launch.CutChanges(links, name, others, *oneWay)
		what = fmt.Sprintf("cut %s from %s", name, strings.Join(others, ", "))
		if *oneWay {
			what = fmt.Sprintf("cut what %s send to %s (one way)", strings.Join(others, ", "), name)
		}
	case "isolate":
		// From the other brokers: the cluster moves on without it while
		// clients on its side may still reach it (as in Jepsen's
		// partitions); `partition NAME --from producer-1` cuts a client.
		var others []string
		for _, p := range st.Processes {
			if p.Name != name && p.Kind == "broker" {
				others = append(others, p.Name)
			}
		}
		changes = launch.CutChanges(links, name, others, false)
		what = fmt.Sprintf("isolated %s from the other brokers (clients still reach it)", name)
	case "delay":
		if *ms < 0 || *jitter < 0 || *ms == 0 && *jitter == 0 {
			return fmt.Errorf("%w: delay needs --ms > 0 (and --jitter >= 0), got --ms %d --jitter %d", errUsage, *ms, *jitter)
		}
		changes = launch.DelayChanges(links, name, time.Duration(*ms)*time.Millisecond, time.Duration(*jitter)*time.Millisecond)
		what = fmt.Sprintf("delayed every link of %s by %d ms ± %d ms", name, *ms, *jitter)
	}
	if len(changes) == 0 {
		if f, err := clusterfile.Read(*dir); err == nil && len(hostsOf(f)) > 0 {
			return fmt.Errorf("%s has no links to change: the brokers run on hosts of their own (cluster up --netns) and reach each other directly; use chaos ip-%s", name, c.verb)
		}
		return fmt.Errorf("%s has no links to change: was `cluster up` started with --links=false?", name)
	}
	if _, err := cc.SetLinks(ctx, &tapesv1.SetLinksRequest{Links: linkInfos(changes)}); err != nil {
		return fmt.Errorf("%s: %w", c.verb, err)
	}
	fmt.Fprintf(c.stdout, "%s (%d links); undo with `chaos heal`\n", what, len(changes))
	return nil
}

// linkStates converts the links of a status to the launcher's form (for
// launch.CutChanges and launch.DelayChanges).
func linkStates(st *tapesv1.ClusterStatusResponse) ([]launch.LinkState, error) {
	out := make([]launch.LinkState, len(st.Links))
	for i, l := range st.Links {
		m, err := netfault.ParseMode(l.Mode)
		if err != nil {
			return nil, fmt.Errorf("link %s->%s: %w", l.From, l.To, err)
		}
		out[i] = launch.LinkState{From: l.From, To: l.To, Mode: m,
			Delay: time.Duration(l.DelayMs) * time.Millisecond, Jitter: time.Duration(l.JitterMs) * time.Millisecond}
	}
	return out, nil
}

// linkInfos converts link changes back for SetLinks.
func linkInfos(changes []launch.LinkState) []*tapesv1.LinkInfo {
	out := make([]*tapesv1.LinkInfo, len(changes))
	for i, l := range changes {
		out[i] = &tapesv1.LinkInfo{From: l.From, To: l.To, Mode: l.Mode.String(),
			DelayMs: int32(l.Delay / time.Millisecond), JitterMs: int32(l.Jitter / time.Millisecond)}
	}
	return out
}

// leaderName returns the process name of the broker leading topic/partition.
func leaderName(ctx context.Context, dir, tp string) (string, error) {
	topic, ps, ok := strings.Cut(tp, "/")
	p, err := strconv.Atoi(ps)
	if !ok || topic == "" || err != nil || p < 0 {
		return "", fmt.Errorf("%w: --leader-of %q: want TOPIC/PARTITION, e.g. orders/0", errUsage, tp)
	}
	addrs, err := clusterfile.Bootstrap("", dir)
	if err != nil {
		return "", err
	}
	cl, err := client.New(client.Config{Bootstrap: addrs, AddressMap: map[string]string{}})
	if err != nil {
		return "", err
	}
	defer cl.Close()
	id, _, err := cl.Leader(ctx, topic, int32(p))
	if err != nil {
		return "", fmt.Errorf("leader of %s: %w", tp, err)
	}
	return fmt.Sprintf("broker-%d", id), nil
}

func printStatus(w io.Writer, st *tapesv1.ClusterStatusResponse) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tPID\tSTATE\tADDRESS")
	for _, p := range st.Processes {
		pid, state := "-", p.State
		if p.Pid != 0 {
			pid = strconv.Itoa(int(p.Pid))
		}
		if p.LastExit != "" && p.State != "running" && p.State != "paused" {
			state += " (" + p.LastExit + ")"
		}
		addr := p.Address
		if addr == "" {
			addr = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Name, p.Kind, pid, state, addr)
	}
	tw.Flush()
	var faults []*tapesv1.LinkInfo
	for _, l := range st.Links {
		if l.Mode != "pass" || l.DelayMs != 0 || l.JitterMs != 0 {
			faults = append(faults, l)
		}
	}
	fmt.Fprintf(w, "\n%d links", len(st.Links))
	if len(st.Links) == 0 {
		fmt.Fprintln(w, " (started with --links=false, or on hosts of their own (--netns) before any producer or consumer: no link faults possible)")
		return
	}
	if len(faults) == 0 {
		fmt.Fprintln(w, ", all healthy")
		return
	}
	fmt.Fprintf(w, ", %d with faults:\n", len(faults))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FROM\tTO\tMODE\tDELAY")
	for _, l := range faults {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d ms ± %d ms\n", l.From, l.To, l.Mode, l.DelayMs, l.JitterMs)
	}
	tw.Flush()
}
