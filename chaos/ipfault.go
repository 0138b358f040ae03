package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tapes-dev/tapes/internal/clusterfile"
	"github.com/tapes-dev/tapes/internal/netns"
)

// ipCommand is one of the IP-level faults of a cluster whose brokers run
// on hosts of their own (`cluster up --netns`): ip-partition, ip-isolate,
// ip-delay, ip-heal. They change the kernel's state inside the hosts'
// namespaces directly (nftables, tc), so they need root but no control
// endpoint; the state they set is what `chaos status` reads back.
type ipCommand struct {
	verb           string
	stdout, stderr io.Writer
}

func init() {
	for _, c := range []struct{ verb, summary string }{
		{"ip-partition", "root, `cluster up --netns`: drop packets between hosts: chaos ip-partition broker-1 --from broker-2,broker-3 [--one-way]"},
		{"ip-isolate", "root, `cluster up --netns`: drop packets between a broker's host and the other brokers' (clients still reach it)"},
		{"ip-delay", "root, `cluster up --netns`: tc netem on a host: chaos ip-delay broker-3 --ms 200 --jitter 50 [--loss 5]"},
		{"ip-heal", "remove every IP-level fault (chaos heal removes them too)"},
	} {
		ic := ipCommand{verb: c.verb, stdout: os.Stdout, stderr: os.Stderr}
		register(c.verb, c.summary, ic.Run)
	}
}

const ipAbout = `IP-level faults, for a cluster started with ` + "`cluster up --netns`" + ` (make cluster-netns, root
only), whose brokers run on hosts of their own: one network namespace each, with its own address,
joined by a bridge. ip-partition and ip-isolate add nftables rules in NAME's namespace that drop
every packet from the other hosts and, unless --one-way, every packet NAME sends them; ip-delay
puts a tc netem qdisc (delay, jitter, loss) on both ends of NAME's veth pair, so every packet to
or from NAME is impaired. Unlike a cut link, a dropped packet is gone: TCP retransmits with a
growing backoff, and connections may time out and be opened again after the heal. The commands
of this shell's namespace (cluster, chaos, producers and consumers started by the launcher)
reach the hosts over the bridge and are never dropped. The link faults (partition, isolate,
delay) still apply to the producers' and consumers' links.`

func (c ipCommand) Run(ctx context.Context, args []string) error {
	var synopsis string
	switch c.verb {
	case "ip-partition":
		synopsis = "ip-partition NAME --from NAME[,NAME...] [--one-way]"
	case "ip-isolate":
		synopsis = "ip-isolate (NAME | --leader-of TOPIC/PARTITION)"
	case "ip-delay":
		synopsis = "ip-delay NAME [--ms MS] [--jitter MS] [--loss PERCENT]"
	default:
		synopsis = c.verb
	}
	fs, dir := newFlags(synopsis+" [--dir DIR]", ipAbout, c.stderr)
	from := fs.String("from", "", "ip-partition: comma-separated brokers whose hosts NAME's host is cut off from")
	oneWay := fs.Bool("one-way", false, "ip-partition: drop only what the --from hosts send to NAME (NAME's own packets still arrive)")
	leaderOf := fs.String("leader-of", "", "ip-isolate: the broker that currently leads TOPIC/PARTITION, e.g. orders/0")
	ms := fs.Int("ms", 0, "ip-delay: milliseconds added to every packet, each way")
	jitter := fs.Int("jitter", 0, "ip-delay: up to this many milliseconds more or less, at random")
	loss := fs.Float64("loss", 0, "ip-delay: percentage of packets lost at random, each way (0-100)")
	rest, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	hosts, err := clusterHosts(*dir)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if c.verb == "ip-heal" {
		if len(rest) > 0 {
			return fmt.Errorf("%w: ip-heal takes no arguments", errUsage)
		}
		if err := healHosts(ctx, hosts); err != nil {
			return err
		}
		fmt.Fprintln(c.stdout, "healed: no host drops or delays packets")
		return nil
	}
	var name string
	switch {
	case c.verb == "ip-isolate" && *leaderOf != "":
		if len(rest) > 0 {
			return fmt.Errorf("%w: give a broker name or --leader-of, not both", errUsage)
		}
		if name, err = leaderName(ctx, *dir, *leaderOf); err != nil {
			return err
		}
	case len(rest) == 1:
		name = rest[0]
	default:
		return fmt.Errorf("%w: want exactly one broker name (e.g. broker-1)", errUsage)
	}
	h, err := findHost(hosts, name)
	if err != nil {
		return err
	}
	var what string
	switch c.verb {
	case "ip-partition", "ip-isolate":
		var others []netns.Host
		if c.verb == "ip-isolate" {
			for _, o := range hosts {
				if o.Name != name {
					others = append(others, o)
				}
			}
		} else {
			if *from == "" {
				return fmt.Errorf("%w: ip-partition needs --from NAME[,NAME...]", errUsage)
			}
			for _, o := range strings.Split(*from, ",") {
				o = strings.TrimSpace(o)
				if o == name {
					return fmt.Errorf("%w: --from names %s itself", errUsage, name)
				}
				oh, err := findHost(hosts, o)
				if err != nil {
					return err
				}
				others = append(others, oh)
			}
		}
		var addrs []netip.Addr
		var names []string
		for _, o := range others {
			addrs, names = append(addrs, o.IP), append(names, o.Name)
		}
		if err := h.Drop(ctx, addrs, *oneWay); err != nil {
			return err
		}
		what = fmt.Sprintf("%s's host drops every packet to and from %s", name, strings.Join(names, ", "))
		if *oneWay {
			what = fmt.Sprintf("%s's host drops every packet from %s (one way)", name, strings.Join(names, ", "))
		}
		if c.verb == "ip-isolate" {
			what += " (clients still reach it)"
		}
	case "ip-delay":
		m := netns.Impairment{Delay: time.Duration(*ms) * time.Millisecond, Jitter: time.Duration(*jitter) * time.Millisecond, LossPercent: *loss}
		if *ms < 0 || *jitter < 0 || *loss < 0 || *loss > 100 || m.IsZero() {
			return fmt.Errorf("%w: ip-delay needs --ms > 0 or --loss in (0, 100] (and --jitter >= 0), got --ms %d --jitter %d --loss %g", errUsage, *ms, *jitter, *loss)
		}
		if err := h.Impair(ctx, m); err != nil {
			return err
		}
		what = fmt.Sprintf("every packet to and from %s's host: delay %d ms ± %d ms, loss %g%%", name, *ms, *jitter, *loss)
	}
	fmt.Fprintf(c.stdout, "%s; undo with `chaos ip-heal` (or `chaos heal`)\n", what)
	return nil
}

// clusterHosts returns the brokers' hosts of the cluster in dir, as its
// cluster.json records them.
func clusterHosts(dir string) ([]netns.Host, error) {
	f, err := clusterfile.Read(dir)
	if err != nil {
		return nil, err
	}
	hosts := hostsOf(f)
	if len(hosts) == 0 {
		return nil, fmt.Errorf("the cluster in %s does not run on hosts of its own: IP-level faults need `cluster up --netns` (make cluster-netns, root only); the link faults (partition, isolate, delay) work on any cluster", dir)
	}
	if err := netns.Available(); err != nil {
		return nil, err
	}
	return hosts, nil
}

// hostsOf returns the hosts of the brokers that run in a namespace.
func hostsOf(f *clusterfile.File) []netns.Host {
	var hosts []netns.Host
	for _, p := range f.Brokers() {
		if p.Netns == "" {
			continue
		}
		ap, err := netip.ParseAddrPort(p.Address)
		if err != nil {
			continue
		}
		hosts = append(hosts, netns.Host{Name: p.Name, Netns: p.Netns, IP: ap.Addr(), Veth: p.Veth})
	}
	return hosts
}

func findHost(hosts []netns.Host, name string) (netns.Host, error) {
	var names []string
	for _, h := range hosts {
		if h.Name == name {
			return h, nil
		}
		names = append(names, h.Name)
	}
	return netns.Host{}, fmt.Errorf("%w: no host %q (have %s)", errUsage, name, strings.Join(names, ", "))
}

// healHosts removes every host's IP-level faults.
func healHosts(ctx context.Context, hosts []netns.Host) error {
	var errs []error
	for _, h := range hosts {
		errs = append(errs, h.Heal(ctx))
	}
	return errors.Join(errs...)
}

// printHostFaults adds the hosts' IP-level faults to `chaos status` (nothing
// for a cluster without hosts of its own).
func printHostFaults(ctx context.Context, w io.Writer, dir string) error {
	f, err := clusterfile.Read(dir)
	if err != nil {
		return err
	}
	hosts := hostsOf(f)
	if len(hosts) == 0 {
		return nil
	}
	if err := netns.Available(); err != nil {
		fmt.Fprintf(w, "\n%d hosts (IP-level faults not shown: %v)\n", len(hosts), err)
		return nil
	}
	byIP := map[netip.Addr]string{}
	for _, h := range hosts {
		byIP[h.IP] = h.Name
	}
	names := func(as []netip.Addr) string {
		var s []string
		for _, a := range as {
			if n, ok := byIP[a]; ok {
				s = append(s, n)
			} else {
				s = append(s, a.String())
			}
		}
		return strings.Join(s, ",")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "\n%d hosts:\n", len(hosts))
	fmt.Fprintln(tw, "HOST\tNETNS\tADDRESS\tDROPS FROM\tDROPS TO\tNETEM")
	for _, h := range hosts {
		hf, err := h.Faults(ctx)
		if err != nil {
			return err
		}
		in, out, em := names(hf.DropIn), names(hf.DropOut), hf.Netem
		for _, s := range []*string{&in, &out, &em} {
			if *s == "" {
				*s = "-"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", h.Name, h.Netns, h.IP, in, out, em)
	}
	return tw.Flush()
}
