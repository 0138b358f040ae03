// Package netns puts the brokers of a local cluster on hosts of their own:
// one Linux network namespace per host, each with its own IPv4 address on
// one subnet, joined by veth pairs to a bridge in the calling (host)
// namespace, which holds the subnet's last address and so reaches every
// host directly. It also applies faults at the IP level inside a host's
// namespace: nftables drops between hosts (both ways or one way), tc netem
// delay and loss, and their removal.
//
// Everything it creates carries a name of its own (see Create), and Close
// removes all of it; Create first removes what an earlier process of this
// package left behind when that process is dead. Nothing else on the
// machine is touched: only namespaces, a bridge and veth pairs of those
// names, and nftables tables and qdiscs inside those namespaces.
//
// It needs root and the programs ip (iproute2) and nft (nftables); netem
// faults also need tc and a kernel with sch_netem. Available says what is
// missing. The functions run those programs and block until they exit.
package netns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// Errors of this package; match them with errors.Is.
var (
	// ErrUnavailable: network namespaces cannot be used here (not root,
	// not Linux, ip or nft missing). The message says which.
	ErrUnavailable = errors.New("network namespaces unavailable")
	// ErrNoNetem: tc is missing or the kernel has no netem qdisc, so delay
	// and loss cannot be applied (drops still can).
	ErrNoNetem = errors.New("tc netem unavailable")
	// ErrNoSubnet: no free subnet was found, or the given one overlaps an
	// address or route of the host namespace.
	ErrNoSubnet = errors.New("no free subnet")
)

// DefaultPrefix starts every namespace name this package creates.
const DefaultPrefix = "tapes"

// Dev is the name of a host's interface inside its namespace.
const Dev = "eth0"

// Available reports why namespaces cannot be used here, or nil.
func Available() error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("%w: needs Linux, this is %s", ErrUnavailable, runtime.GOOS)
	}
	if uid := os.Geteuid(); uid != 0 {
		return fmt.Errorf("%w: needs root (effective uid %d)", ErrUnavailable, uid)
	}
	for _, p := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Errorf("%w: %s not found (apt-get install iproute2 nftables): %v", ErrUnavailable, p, err)
		}
	}
	return nil
}

// Host is one namespace of a Network.
type Host struct {
	// Name is the process it is for, e.g. "broker-1".
	Name string
	// Netns is the namespace's name (ip netns list).
	Netns string
	// IP is the host's address on the subnet (on Dev inside Netns).
	IP netip.Addr
	// Veth is the host-side end of its veth pair, on the bridge.
	Veth string
}

// Config describes a Network for Create.
type Config struct {
	// Prefix starts every namespace name; DefaultPrefix when empty.
	Prefix string
	// Subnet holds every address (IPv4, at most /29). The zero value
	// means the first 10.77.N.0/24 that overlaps no address or route of
	// the host namespace.
	Subnet netip.Prefix
	// Hosts names the hosts; host i gets the subnet's address i+1.
	Hosts []string
}

// Network is a bridge and its hosts, made by Create. Its fields are fixed;
// Close may be called from any goroutine, more than once.
type Network struct {
	// Tag is unique per Network on this machine while its process lives;
	// every name below contains it.
	Tag    string
	Bridge string
	Subnet netip.Prefix
	// Gateway is the bridge's address: the host namespace's side.
	Gateway netip.Addr
	Hosts   []Host

	ipPath    string
	closeOnce sync.Once
	closeErr  error
}

// seq makes the tags of one process distinct.
var seq atomic.Uint32

// tagRE matches the names Create gives: prefix-TAG-host for namespaces,
// tpTAGbr for bridges, where TAG is the creator's pid and a sequence
// number, both in base 36, joined by "x".
var tagRE = regexp.MustCompile(`^([0-9a-z]+)x([0-9a-z]+)$`)

// Create sweeps away what dead processes of this package left behind, then
// makes the bridge and one namespace per host. On error nothing it made is
// left.
func Create(ctx context.Context, cfg Config) (*Network, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if len(cfg.Hosts) == 0 {
		return nil, fmt.Errorf("netns: no hosts given")
	}
	ipPath, _ := exec.LookPath("ip")
	remove(ctx, cfg.Prefix, func(pid int) bool { return syscall.Kill(pid, 0) == syscall.ESRCH })
	auto := !cfg.Subnet.IsValid()
	var candidates []netip.Prefix
	if auto {
		for n := 0; n < 256; n++ {
			candidates = append(candidates, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 77, byte(n), 0}), 24))
		}
	} else {
		p := cfg.Subnet.Masked()
		if !p.Addr().Is4() || p.Bits() > 29 {
			return nil, fmt.Errorf("%w: subnet %s: want IPv4, /29 or larger", ErrNoSubnet, cfg.Subnet)
		}
		if len(cfg.Hosts)+2 > 1<<(32-p.Bits())-1 {
			return nil, fmt.Errorf("%w: subnet %s has no room for %d hosts and the bridge", ErrNoSubnet, p, len(cfg.Hosts))
		}
		candidates = []netip.Prefix{p}
	}
	var last error
	for _, subnet := range candidates {
		used, err := hostPrefixes(ctx, "")
		if err != nil {
			return nil, err
		}
		if overlaps(used, subnet) {
			last = fmt.Errorf("%w: %s overlaps an address or route of this machine (ip -4 addr; ip -4 route)", ErrNoSubnet, subnet)
			continue
		}
		n, err := create(ctx, cfg, ipPath, subnet)
		if err != nil {
			return nil, err
		}
		// Another process may have taken the same subnet meanwhile.
		used, err = hostPrefixes(ctx, n.Bridge)
		if err == nil && !overlaps(used, subnet) {
			return n, nil
		}
		n.Close()
		if err != nil {
			return nil, err
		}
		last = fmt.Errorf("%w: %s was taken meanwhile", ErrNoSubnet, subnet)
		if !auto {
			break
		}
	}
	return nil, last
}

func create(ctx context.Context, cfg Config, ipPath string, subnet netip.Prefix) (*Network, error) {
	tag := strconv.FormatInt(int64(os.Getpid()), 36) + "x" + strconv.FormatInt(int64(seq.Add(1)), 36)
	n := &Network{Tag: tag, Bridge: "tp" + tag + "br", Subnet: subnet, ipPath: ipPath}
	bcast := subnet.Addr().As4()
	for i := subnet.Bits(); i < 32; i++ {
		bcast[i/8] |= 1 << (7 - i%8)
	}
	n.Gateway = netip.AddrFrom4(bcast).Prev()
	for i, name := range cfg.Hosts {
		ip := subnet.Addr()
		for range i + 1 {
			ip = ip.Next()
		}
		n.Hosts = append(n.Hosts, Host{Name: name, Netns: cfg.Prefix + "-" + tag + "-" + name, IP: ip, Veth: fmt.Sprintf("tp%sh%d", tag, i+1)})
	}
	bits := strconv.Itoa(subnet.Bits())
	steps := [][]string{
		{"link", "add", n.Bridge, "type", "bridge"},
		{"addr", "add", n.Gateway.String() + "/" + bits, "dev", n.Bridge},
		{"link", "set", n.Bridge, "up"},
	}
	for i, h := range n.Hosts {
		peer := fmt.Sprintf("tp%sn%d", tag, i+1)
		steps = append(steps,
			[]string{"netns", "add", h.Netns},
			[]string{"link", "add", h.Veth, "type", "veth", "peer", "name", peer, "netns", h.Netns},
			[]string{"link", "set", h.Veth, "master", n.Bridge, "up"},
			[]string{"-n", h.Netns, "link", "set", peer, "name", Dev},
			[]string{"-n", h.Netns, "addr", "add", h.IP.String() + "/" + bits, "dev", Dev},
			[]string{"-n", h.Netns, "link", "set", Dev, "up"},
			[]string{"-n", h.Netns, "link", "set", "lo", "up"},
		)
	}
	for _, s := range steps {
		if _, err := run(ctx, ipPath, s...); err != nil {
			return nil, errors.Join(fmt.Errorf("netns: create network %s: %w", tag, err), n.Close())
		}
	}
	return n, nil
}

// Host returns the host of the given name.
func (n *Network) Host(name string) (Host, bool) {
	for _, h := range n.Hosts {
		if h.Name == name {
			return h, true
		}
	}
	return Host{}, false
}

// Command is how to run path with args inside host h: "ip netns exec",
// which execs path in place (so the pid is the program's own).
func (n *Network) Command(h Host, path string, args ...string) (string, []string) {
	return n.ipPath, append([]string{"netns", "exec", h.Netns, path}, args...)
}

// Close removes the veth pairs, the namespaces and the bridge. Processes
// still running in a namespace keep it alive (without its name): stop them
// first. Calling it again returns the first call's result.
func (n *Network) Close() error {
	n.closeOnce.Do(func() {
		ctx := context.Background()
		var errs []error
		for _, h := range n.Hosts {
			if _, err := run(ctx, n.ipPath, "link", "del", h.Veth); err != nil && !isMissing(err) {
				errs = append(errs, err)
			}
			if _, err := run(ctx, n.ipPath, "netns", "del", h.Netns); err != nil && !isMissing(err) {
				errs = append(errs, err)
			}
		}
		if _, err := run(ctx, n.ipPath, "link", "del", n.Bridge); err != nil && !isMissing(err) {
			errs = append(errs, err)
		}
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// Namespaces lists the network namespaces of this machine (ip netns list).
func Namespaces(ctx context.Context) ([]string, error) {
	out, err := run(ctx, "ip", "netns", "list")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names, nil
}

// Links lists the network interfaces of the host namespace by name.
func Links(ctx context.Context) ([]string, error) {
	out, err := run(ctx, "ip", "-j", "link", "show")
	if err != nil {
		return nil, err
	}
	var links []struct {
		Name string `json:"ifname"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil {
		return nil, fmt.Errorf("netns: ip -j link show: %w", err)
	}
	names := make([]string, len(links))
	for i, l := range links {
		names[i] = l.Name
	}
	return names, nil
}

// Leftovers removes the namespaces (of prefix) and bridges that networks
// of this process made and did not close, and returns their names: a
// test's cleanup expects none.
func Leftovers(ctx context.Context, prefix string) []string {
	own := os.Getpid()
	return remove(ctx, prefix, func(pid int) bool { return pid == own })
}

// remove deletes the namespaces and bridges that Create made (by their
// names) in processes for which whose(pid) holds, and returns their names:
// Create sweeps those of dead processes (killed before their Close).
// Errors are ignored: whatever is left is tried again next time.
func remove(ctx context.Context, prefix string, whose func(pid int) bool) []string {
	match := func(tag string) bool {
		m := tagRE.FindStringSubmatch(tag)
		if m == nil {
			return false
		}
		pid, err := strconv.ParseInt(m[1], 36, 32)
		return err == nil && pid > 0 && whose(int(pid))
	}
	var removed []string
	if names, err := Namespaces(ctx); err == nil {
		for _, ns := range names {
			rest, ok := strings.CutPrefix(ns, prefix+"-")
			if tag, _, ok2 := strings.Cut(rest, "-"); ok && ok2 && match(tag) {
				run(ctx, "ip", "netns", "del", ns)
				removed = append(removed, ns)
			}
		}
	}
	if links, err := Links(ctx); err == nil {
		for _, l := range links {
			if tag, ok := strings.CutPrefix(l, "tp"); ok && strings.HasSuffix(tag, "br") && match(strings.TrimSuffix(tag, "br")) {
				run(ctx, "ip", "link", "del", l)
				removed = append(removed, l)
			}
		}
	}
	return removed
}

// hostPrefixes returns the IPv4 prefixes of the host namespace's addresses
// and routes, leaving out interface skip.
func hostPrefixes(ctx context.Context, skip string) ([]netip.Prefix, error) {
	out, err := run(ctx, "ip", "-j", "-4", "addr", "show")
	if err != nil {
		return nil, err
	}
	var ifs []struct {
		Name  string `json:"ifname"`
		Addrs []struct {
			Local     string `json:"local"`
			PrefixLen int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal([]byte(out), &ifs); err != nil {
		return nil, fmt.Errorf("netns: ip -j addr show: %w", err)
	}
	var ps []netip.Prefix
	for _, i := range ifs {
		if i.Name == skip {
			continue
		}
		for _, a := range i.Addrs {
			if ip, err := netip.ParseAddr(a.Local); err == nil {
				ps = append(ps, netip.PrefixFrom(ip, a.PrefixLen).Masked())
			}
		}
	}
	out, err = run(ctx, "ip", "-j", "-4", "route", "show")
	if err != nil {
		return nil, err
	}
	var routes []struct {
		Dst string `json:"dst"`
		Dev string `json:"dev"`
	}
	if err := json.Unmarshal([]byte(out), &routes); err != nil {
		return nil, fmt.Errorf("netns: ip -j route show: %w", err)
	}
	for _, r := range routes {
		if r.Dev == skip || r.Dst == "default" {
			continue
		}
		dst := r.Dst
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		if p, err := netip.ParsePrefix(dst); err == nil {
			ps = append(ps, p.Masked())
		}
	}
	return ps, nil
}

func overlaps(used []netip.Prefix, p netip.Prefix) bool {
	for _, u := range used {
		if u.Overlaps(p) {
			return true
		}
	}
	return false
}

// cmdError is a program's failure with what it printed.
type cmdError struct {
	cmd    string
	err    error
	output string
}

func (e *cmdError) Error() string {
	return fmt.Sprintf("%s: %v: %s", e.cmd, e.err, strings.TrimSpace(e.output))
}

func (e *cmdError) Unwrap() error { return e.err }

// run runs a program and returns its standard output; a failure carries
// what it printed on standard error.
func run(ctx context.Context, path string, args ...string) (string, error) {
	return runInput(ctx, "", path, args...)
}

func runInput(ctx context.Context, stdin, path string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return "", &cmdError{cmd: path + " " + strings.Join(args, " "), err: err, output: stderr.String()}
	}
	return stdout.String(), nil
}

// isMissing reports whether a failed ip, nft or tc command says that what
// it was to remove does not exist.
func isMissing(err error) bool {
	var ce *cmdError
	if !errors.As(err, &ce) {
		return false
	}
	for _, s := range []string{"Cannot find device", "No such file or directory", "does not exist", "Cannot delete qdisc with handle of zero", "No such"} {
		if strings.Contains(ce.output, s) {
			return true
		}
	}
	return false
}
