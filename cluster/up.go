package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/clusterfile"
	"github.com/tapes-dev/tapes/internal/dashboard"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/launch"
	"github.com/tapes-dev/tapes/internal/netns"
)

// upCommand is `cluster up`: start the brokers of a local cluster, wait until
// it serves, and supervise it in the foreground until Ctrl-C.
type upCommand struct {
	stdout, stderr io.Writer
	// self is how the user runs this program, for the commands the summary
	// suggests ("" means "cluster").
	self string
}

func init() {
	wd, _ := os.Getwd()
	register("up", "start a local cluster and supervise it until Ctrl-C",
		(&upCommand{stdout: os.Stdout, stderr: os.Stderr, self: selfCommand(os.Args[0], wd)}).Run)
}

// selfCommand is how to run this program again from the working directory
// wd, given the argv[0] it was started with: "cluster" when it was found on
// $PATH, else its path, relative to wd when it lies below it (bin/cluster,
// from a checkout), quoted for a shell when needed.
func selfCommand(argv0, wd string) string {
	if !strings.ContainsRune(argv0, filepath.Separator) {
		return argv0
	}
	path := argv0
	if !filepath.IsAbs(path) && wd != "" {
		path = filepath.Join(wd, path)
	}
	if rel, err := filepath.Rel(wd, path); err == nil && wd != "" && !strings.HasPrefix(rel, "..") {
		path = rel
		if !strings.ContainsRune(rel, filepath.Separator) {
			path = "." + string(filepath.Separator) + rel
		}
	}
	return shellQuote(path)
}

// shellQuote quotes s for a POSIX shell when it holds special characters.
func shellQuote(s string) string {
	if strings.ContainsAny(s, " \t\n'\"\\$`*?[]{}()<>|&;#~!") {
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	return s
}

// The topic --demo creates.
const (
	demoTopic      = "orders"
	demoPartitions = 3
)

// logTailLines is how much of a dead broker's log `up` shows.
const logTailLines = 15

const upAbout = `Starts the brokers of a local cluster (brokerd, found beside this program or
on $PATH), one child process each, with data in DIR/broker-N/ and output in
DIR/logs/broker-N.log; waits until a controller is elected and every
partition has a leader; prints the addresses and what to try next; then stays
in the foreground and reports a broker that exits unexpectedly (it is not
restarted). Ctrl-C stops every broker cleanly; the data stays, and running
` + "`cluster up`" + ` again on DIR resumes the same cluster on the same ports where
they are free. Only one ` + "`cluster up`" + ` may run on a directory.`

// Run parses the flags and runs the cluster until ctx ends (Ctrl-C, SIGTERM).
func (u *upCommand) Run(ctx context.Context, args []string) error {
	fs := commandFlags("up [--brokers N] [--dir DIR] [--demo] [--broker-arg FLAG ...]", upAbout, u.stderr)
	brokers := fs.Int("brokers", launch.DefaultBrokers,
		"number of brokers of a new cluster; a directory that already holds a cluster keeps its number unless this is given (and then it must match)")
	dir := fs.String("dir", clusterfile.DefaultDir(),
		"cluster `DIR`: cluster.json, broker data and logs ($TAPES_DIR, else .tapes in the working directory)")
	demo := fs.Bool("demo", false,
		fmt.Sprintf("also create topic %s (%d partitions, replication factor min(3, brokers), min.insync.replicas=min(2, brokers)) unless it exists, and wait for its leaders",
			demoTopic, demoPartitions))
	var brokerArgs multiFlag
	fs.Var(&brokerArgs, "broker-arg",
		"extra `FLAG` passed to every brokerd, e.g. --broker-arg=--log-level=debug; repeat for several")
	brokerd := fs.String("brokerd", "", "`PATH` of the brokerd binary (default: beside this program, else on $PATH)")
	timeout := fs.Duration("timeout", time.Minute, "how long to wait for the cluster (and the demo topic) to be ready")
	links := fs.Bool("links", true, "route every connection between processes (broker to broker, producer or consumer to broker) through a fault-injection link the launcher owns, so that `chaos` can cut, delay and heal it; --links=false connects them directly")
	onHosts := fs.Bool("netns", false, "root only: run each broker on a host of its own, a network namespace with its own address on --netns-subnet, joined to the others by veth pairs and a bridge that this namespace reaches; chaos ip-partition, ip-isolate and ip-delay then fault the network between them. Everything made is removed on exit")
	subnet := fs.String("netns-subnet", "10.77.0.0/24", "with --netns: the IPv4 `CIDR` of the hosts (broker-N at its Nth address, the bridge at its last); \"auto\": the first free 10.77.N.0/24")
	controlListen := fs.String("control-listen", "127.0.0.1:0", "`ADDR` of the control endpoint (tapes.v1.ClusterControlService) that `chaos` drives; port 0: any free port")
	webListen := fs.String("web-listen", "127.0.0.1:0", "`ADDR` of the live page (HTTP); port 0: any free port; empty: no page")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, rest[0])
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	n := 0 // let launch take the size from cluster.json, or its default
	if set["brokers"] {
		if *brokers < 1 {
			return fmt.Errorf("%w: --brokers %d: need at least 1", errUsage, *brokers)
		}
		n = *brokers
	}
	if *timeout <= 0 {
		return fmt.Errorf("%w: --timeout %v: must be positive", errUsage, *timeout)
	}

	var network *netns.Network
	if *onHosts {
		if network, err = createHosts(ctx, *dir, n, *subnet); err != nil {
			return err
		}
		defer network.Close() // after the brokers have stopped (deferred below)
		fmt.Fprintf(u.stderr, "hosts: bridge %s at %s, namespaces %s\n", network.Bridge, netip.PrefixFrom(network.Gateway, network.Subnet.Bits()), hostNames(network))
	}
	fmt.Fprintf(u.stderr, "starting cluster in %s ...\n", *dir)
	c, err := launch.Start(ctx, launch.Options{
		Network:     network,
		Dir:         *dir,
		Brokers:     n,
		BrokerdPath: *brokerd,
		BrokerArgs:  brokerArgs,
		Links:       *links,
		Logger:      slog.New(&progressHandler{w: u.stderr, mu: new(sync.Mutex), level: slog.LevelInfo}),
	})
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(u.stderr, "interrupted")
			return nil
		}
		return err
	}
	defer c.Close() // on every early return; the normal path closes it itself

	fmt.Fprintln(u.stderr, "waiting for leaders ...")
	readyCtx, cancel := context.WithTimeout(ctx, *timeout)
	err = c.WaitReady(readyCtx)
	var topic *tapesv1.TopicMetadata
	if err == nil && *demo {
		topic, err = ensureDemoTopic(readyCtx, c.Bootstrap(), u.stderr)
	}
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return u.shutdown(c, "interrupted; ")
		}
		u.showDeadBrokers(c)
		return errors.Join(err, u.shutdown(c, ""))
	}
	stopControl, err := serveControl(c, *controlListen)
	if err != nil {
		return errors.Join(err, u.shutdown(c, ""))
	}
	defer stopControl()
	stopWeb, web, err := serveDashboard(ctx, c, *webListen, u.stderr)
	if err != nil {
		return errors.Join(err, u.shutdown(c, ""))
	}
	defer stopWeb()
	u.printSummary(c, topic, dirHint(*dir, set["dir"]), web)
	return u.supervise(ctx, c)
}

// createHosts makes the network of `up --netns`: one host per broker of
// the cluster in dir (n, else as many as its cluster.json lists, else the
// default) on subnet ("auto": the first free one).
func createHosts(ctx context.Context, dir string, n int, subnet string) (*netns.Network, error) {
	cfg := netns.Config{}
	if subnet != "auto" {
		p, err := netip.ParsePrefix(subnet)
		if err != nil {
			return nil, fmt.Errorf("%w: --netns-subnet %q: %v", errUsage, subnet, err)
		}
		cfg.Subnet = p
	}
	if n == 0 {
		n = launch.DefaultBrokers
		if f, err := clusterfile.Read(dir); err == nil && len(f.Brokers()) > 0 {
			n = len(f.Brokers())
		}
	}
	for id := 1; id <= n; id++ {
		cfg.Hosts = append(cfg.Hosts, fmt.Sprintf("broker-%d", id))
	}
	network, err := netns.Create(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("--netns: %w", err)
	}
	return network, nil
}

func hostNames(n *netns.Network) string {
	var s []string
	for _, h := range n.Hosts {
		s = append(s, h.Netns+" ("+h.IP.String()+")")
	}
	return strings.Join(s, ", ")
}

// serveControl serves the control endpoint for c and records its address in
// cluster.json; the returned func stops it.
func serveControl(c *launch.Cluster, addr string) (func(), error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--control-listen %s: %w", addr, err)
	}
	srv := grpc.NewServer()
	tapesv1.RegisterClusterControlServiceServer(srv, &controlServer{c: c, binary: launch.FindBinary})
	go srv.Serve(lis)
	if err := c.SetControl(lis.Addr().String()); err != nil {
		srv.Stop()
		return nil, err
	}
	return func() {
		srv.Stop()
		_ = c.SetControl("")
	}, nil
}

// serveDashboard serves the live page (internal/dashboard) for c on addr
// until ctx ends or the returned func is called; it returns the page's
// URL with the launch's token, which the page's actions need ("" and no
// server when addr is empty). The page answers only requests to its own
// address: the loopback names, the listener's IP, and the host addr names.
func serveDashboard(ctx context.Context, c *launch.Cluster, addr string, stderr io.Writer) (func(), string, error) {
	if addr == "" {
		return func() {}, "", nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("--web-listen %s: %w", addr, err)
	}
	// The page observes: it dials the brokers directly, never through the
	// links, and gives up on a paused broker within a second.
	cl, err := client.New(client.Config{Bootstrap: c.Bootstrap(), AddressMap: map[string]string{},
		RequestTimeout: time.Second, MetadataMaxAge: time.Second})
	if err != nil {
		lis.Close()
		return nil, "", err
	}
	find := func(name string) string {
		path, _ := launch.FindBinary(name) // none: the page says so when asked to start one
		return path
	}
	host, _, _ := net.SplitHostPort(addr)
	srv, err := dashboard.New(dashboard.Config{Cluster: c, Client: cl, Host: host,
		Producerd: find("producerd"), Consumerd: find("consumerd"), Chaos: find("chaos"),
		Logger: slog.New(&progressHandler{w: stderr, mu: new(sync.Mutex), level: slog.LevelWarn}).With("component", "live page")})
	if err != nil {
		lis.Close()
		cl.Close()
		return nil, "", err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ctx, lis); err != nil {
			fmt.Fprintf(stderr, "live page: %v\n", err)
		}
	}()
	return func() {
		cancel()
		<-done
		cl.Close()
	}, dashboard.PageURL(lis.Addr(), srv.Token()), nil
}

// supervise reports brokers that exit unexpectedly until ctx ends, then
// stops the cluster. It gives up when no broker is left running.
func (u *upCommand) supervise(ctx context.Context, c *launch.Cluster) error {
	for {
		select {
		case <-ctx.Done():
			return u.shutdown(c, "")
		case ev, ok := <-c.Exited():
			if !ok {
				return errors.New("the launcher closed unexpectedly")
			}
			fmt.Fprintf(u.stderr, "%s: %s exited unexpectedly (%s); it is not restarted. Its log: %s\n",
				ev.Time.Format(time.TimeOnly), ev.Name, ev.State, ev.Log)
			running := 0
			for _, name := range c.Names() {
				if c.Running(name) {
					running++
				}
			}
			if running == 0 {
				return errors.Join(errors.New("every broker has exited"), u.shutdown(c, ""))
			}
			fmt.Fprintf(u.stderr, "%d of %d brokers still running\n", running, len(c.Names()))
		}
	}
}

// shutdown stops every broker and says so.
func (u *upCommand) shutdown(c *launch.Cluster, prefix string) error {
	fmt.Fprintf(u.stderr, "%sstopping brokers ...\n", prefix)
	if err := c.Close(); err != nil {
		return fmt.Errorf("stop brokers: %w", err)
	}
	fmt.Fprintf(u.stderr, "stopped; the data stays in %s (`cluster up` on it resumes the cluster)\n", c.Dir())
	return nil
}

// printSummary tells where the cluster is and what to try next.
func (u *upCommand) printSummary(c *launch.Cluster, topic *tapesv1.TopicMetadata, dirFlag, web string) {
	w := u.stdout
	names := c.Names()
	fmt.Fprintf(w, "\ncluster ready: %d brokers in %s\n", len(names), c.Dir())
	for _, name := range names {
		p, _ := c.Process(name)
		fmt.Fprintf(w, "  %-9s %-21s pid %-7d log %s\n", p.Name, p.Address, p.PID, p.Log)
	}
	fmt.Fprintf(w, "bootstrap servers: %s\n", strings.Join(c.Bootstrap(), ","))
	fmt.Fprintf(w, "kafka bootstrap: %s\n", strings.Join(c.KafkaBootstrap(), ","))
	if f, err := clusterfile.Read(c.Dir()); err == nil && f.Control != "" {
		fmt.Fprintf(w, "control endpoint: %s (for chaos)\n", f.Control)
	}
	if web != "" {
		fmt.Fprintf(w, "live page: %s\n", web)
	}
	if topic != nil {
		fmt.Fprintf(w, "topic %s: %s\n", topic.GetName(), describeTopic(topic))
	}
	self := u.self
	if self == "" {
		self = "cluster"
	}
	fmt.Fprintf(w, "\nTry, in another terminal:\n")
	if topic == nil {
		fmt.Fprintf(w, "  %s topics create %s --partitions %d --replication-factor %d%s\n",
			self, demoTopic, demoPartitions, min(3, len(names)), dirFlag)
	}
	fmt.Fprintf(w, "  %s topics describe%s\n", self, dirFlag)
	fmt.Fprintf(w, "  %s produce --topic %s%s\n", self, demoTopic, dirFlag)
	fmt.Fprintf(w, "  %s consume --topic %s --from-beginning%s\n", self, demoTopic, dirFlag)
	fmt.Fprintf(w, "\nSupervising the brokers; Ctrl-C stops them all.\n")
}

// dirHint is the --dir flag the suggested commands need: none when the
// user relied on the default directory.
func dirHint(dir string, given bool) string {
	if !given || dir == clusterfile.DefaultDir() {
		return ""
	}
	return " --dir " + shellQuote(dir)
}

func describeTopic(t *tapesv1.TopicMetadata) string {
	rf := 0
	if ps := t.GetPartitions(); len(ps) > 0 {
		rf = len(ps[0].GetReplicas())
	}
	s := fmt.Sprintf("%d partitions, replication factor %d", len(t.GetPartitions()), rf)
	if v, ok := t.GetConfigs()["min.insync.replicas"]; ok {
		s += ", min.insync.replicas=" + v
	}
	return s
}

// showDeadBrokers prints the end of the log of every broker that is not
// running, which is usually where the reason it failed is.
func (u *upCommand) showDeadBrokers(c *launch.Cluster) {
	for _, name := range c.Names() {
		if c.Running(name) {
			continue
		}
		p, _ := c.Process(name)
		fmt.Fprintf(u.stderr, "%s is not running; the end of %s:\n", name, p.Log)
		for _, line := range tailLines(p.Log, logTailLines) {
			fmt.Fprintf(u.stderr, "  | %s\n", line)
		}
	}
}

// tailLines returns up to n last lines of the file (read from its last 64 KiB).
func tailLines(path string, n int) []string {
	f, err := os.Open(path)
	if err != nil {
		return []string{err.Error()}
	}
	defer f.Close()
	const window = 64 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > window {
		if _, err := f.Seek(-window, io.SeekEnd); err != nil {
			return []string{err.Error()}
		}
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return []string{err.Error()}
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}

// ensureDemoTopic creates the demo topic unless it exists, then waits until
// every broker shows a leader for each of its partitions, and returns it as
// the first broker sees it.
func ensureDemoTopic(ctx context.Context, addrs []string, progress io.Writer) (*tapesv1.TopicMetadata, error) {
	clients := make([]tapesv1.BrokerServiceClient, len(addrs))
	for i, a := range addrs {
		conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", a, err)
		}
		defer conn.Close()
		clients[i] = tapesv1.NewBrokerServiceClient(conn)
	}
	n := len(addrs)
	spec := &tapesv1.TopicSpec{
		Name:              demoTopic,
		Partitions:        demoPartitions,
		ReplicationFactor: int32(min(3, n)),
		Configs:           map[string]string{"min.insync.replicas": fmt.Sprint(min(2, n))},
	}
	bo := client.NewBackoff(client.DefaultRetryBackoff, time.Second)
	var last error
	wait := func() error {
		if err := bo.Wait(ctx); err != nil {
			if last != nil {
				return fmt.Errorf("topic %s: %w (last: %v)", demoTopic, err, last)
			}
			return fmt.Errorf("topic %s: %w", demoTopic, err)
		}
		return nil
	}

	// Create it through any broker that takes the request.
	for created, i := false, 0; !created; i++ {
		cl := clients[i%n]
		t, err := describeOne(ctx, cl)
		switch {
		case err != nil:
			last = err
		case t.GetError() == nil:
			fmt.Fprintf(progress, "topic %s exists\n", demoTopic)
			created = true
		case kerr.Code(t.GetError().GetCode()) != kerr.UnknownTopicOrPartition:
			last = kerr.FromDetail(t.GetError())
		default:
			fmt.Fprintf(progress, "creating topic %s (%d partitions, replication factor %d, min.insync.replicas=%s) ...\n",
				demoTopic, spec.Partitions, spec.ReplicationFactor, spec.Configs["min.insync.replicas"])
			created, last = createOne(ctx, cl, spec)
			if ke, ok := kerr.As(last); ok && !ke.Code().Retriable() && !ke.Detail.GetRetriable() {
				return nil, fmt.Errorf("create topic %s: %w", demoTopic, last)
			}
		}
		if !created && (i+1)%n == 0 {
			if err := wait(); err != nil {
				return nil, err
			}
		}
	}

	// Wait until every broker knows a leader for every partition.
	fmt.Fprintf(progress, "waiting for leaders of %s ...\n", demoTopic)
	for {
		var first *tapesv1.TopicMetadata
		ready := true
		for i, cl := range clients {
			t, err := describeOne(ctx, cl)
			if err == nil {
				err = kerr.FromDetail(t.GetError())
			}
			if err == nil && !hasLeaders(t) {
				err = fmt.Errorf("broker at %s knows no leader yet for some partition", addrs[i])
			}
			if err != nil {
				last, ready = err, false
				break
			}
			if first == nil {
				first = t
			}
		}
		if ready {
			return first, nil
		}
		if err := wait(); err != nil {
			return nil, err
		}
	}
}

// describeOne returns the demo topic's metadata from one broker.
func describeOne(ctx context.Context, cl tapesv1.BrokerServiceClient) (*tapesv1.TopicMetadata, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := cl.Metadata(cctx, &tapesv1.MetadataRequest{Topics: []string{demoTopic}})
	if err != nil {
		return nil, kerr.FromStatus(err)
	}
	for _, t := range resp.GetTopics() {
		if t.GetName() == demoTopic {
			return t, nil
		}
	}
	return &tapesv1.TopicMetadata{Name: demoTopic, Error: &tapesv1.ErrorDetail{Code: string(kerr.UnknownTopicOrPartition)}}, nil
}

// createOne asks one broker to create the topic. It reports whether the
// topic now exists (created, or it already did).
func createOne(ctx context.Context, cl tapesv1.BrokerServiceClient, spec *tapesv1.TopicSpec) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cl.CreateTopics(cctx, &tapesv1.CreateTopicsRequest{Topics: []*tapesv1.TopicSpec{spec}})
	if err != nil {
		return false, kerr.FromStatus(err)
	}
	for _, r := range resp.GetResults() {
		if r.GetName() != spec.GetName() {
			continue
		}
		err := kerr.FromDetail(r.GetError())
		if err == nil || kerr.Is(err, kerr.TopicAlreadyExists) {
			return true, nil
		}
		return false, err
	}
	return false, fmt.Errorf("no result for topic %s in the answer", spec.GetName())
}

func hasLeaders(t *tapesv1.TopicMetadata) bool {
	if len(t.GetPartitions()) == 0 {
		return false
	}
	for _, p := range t.GetPartitions() {
		if p.GetLeaderId() < 0 {
			return false
		}
	}
	return true
}

// progressHandler is a slog.Handler for a terminal: one line per record,
// the message and then key=value, no time; warnings and errors say so.
type progressHandler struct {
	w     io.Writer
	mu    *sync.Mutex
	level slog.Level
	attrs []slog.Attr
}

func (h *progressHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *progressHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	switch {
	case r.Level >= slog.LevelError:
		b.WriteString("error: ")
	case r.Level >= slog.LevelWarn:
		b.WriteString("warning: ")
	}
	b.WriteString(r.Message)
	write := func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	}
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(write)
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h *progressHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return &c
}

func (h *progressHandler) WithGroup(string) slog.Handler { return h }
