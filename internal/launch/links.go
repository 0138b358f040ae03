package launch

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tapes-dev/tapes/internal/clusterfile"
	"github.com/tapes-dev/tapes/internal/netfault"
)

// ErrNoLinks: the cluster was started without Options.Links.
var ErrNoLinks = errors.New("the cluster has no fault-injection links (start it with links)")

// AddressMapEnv is the environment variable through which a process started
// by StartProcess learns its links: "BROKER_ADDR=LINK_ADDR,..." (the Go
// client, internal/client, dials LINK_ADDR whenever it would dial
// BROKER_ADDR). Its value is client.AddressMapEnv's; launch does not import
// the client.
const AddressMapEnv = "TAPES_ADDRESS_MAP"

// linkKey names the link that carries connections opened by process from
// to process to.
type linkKey struct{ from, to string }

// brokerLinks creates a link for every ordered pair of brokers. Called by
// Start before any broker runs.
func (c *Cluster) brokerLinks() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, from := range c.children {
		for _, to := range c.children {
			if from != to {
				if _, err := c.linkLocked(from.name, to); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// linkLocked returns (creating it) the link from -> to. c.mu held.
func (c *Cluster) linkLocked(from string, to *child) (*netfault.Link, error) {
	k := linkKey{from, to.name}
	if l, ok := c.links[k]; ok {
		return l, nil
	}
	l, err := netfault.Listen(to.addr, c.log.With("link", from+"->"+to.name))
	if err != nil {
		return nil, fmt.Errorf("launch: link %s->%s: %w", from, to.name, err)
	}
	c.links[k] = l
	return l, nil
}

// peersOf is broker ch's --peers value: itself directly, the others through
// its links to them (or directly without links).
func (c *Cluster) peersOf(ch *child) string {
	if !c.withLinks || c.network != nil {
		return c.peers
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, b := range c.children {
		addr := b.addr
		if b != ch {
			addr = c.links[linkKey{ch.name, b.name}].Addr()
		}
		out = append(out, strconv.Itoa(int(b.id))+"="+addr)
	}
	return strings.Join(out, ",")
}

// kafkaLinkLocked returns (creating it) the Kafka link from the Kafka
// client from to the broker named to at its Kafka address addr. c.mu held.
func (c *Cluster) kafkaLinkLocked(from, to, addr string) (*netfault.Link, error) {
	k := linkKey{from, to}
	if l, ok := c.links[k]; ok {
		return l, nil
	}
	resolve := func(node int32, host string, port int32) (string, error) {
		return c.kafkaResolve(from, node, net.JoinHostPort(host, strconv.Itoa(int(port))))
	}
	l, err := netfault.ListenKafka(addr, c.log.With("link", from+"->"+to), resolve)
	if err != nil {
		return nil, fmt.Errorf("launch: link %s->%s: %w", from, to, err)
	}
	c.links[k] = l
	return l, nil
}

// kafkaResolve is the resolver of every Kafka link of the client from: the
// address of its link to the broker a Kafka answer names (node id, its
// Kafka address addr). A broker of this cluster is known by its Kafka
// address; one the launcher did not start (it joined later) gets a link
// named broker-NODE on first sight (or its address, if a broker of that
// name has another one). Called on a link's answer goroutine.
func (c *Cluster) kafkaResolve(from string, node int32, addr string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return "", ErrClosed
	}
	to := ""
	for _, b := range c.children {
		if b.kafkaAddr == addr {
			to = b.name
		}
	}
	if to == "" {
		to = fmt.Sprintf("broker-%d", node)
		if l, ok := c.links[linkKey{from, to}]; ok && l.Target() != addr || c.byName[to] != nil {
			to = addr
		}
	}
	l, err := c.kafkaLinkLocked(from, to, addr)
	if err != nil {
		return "", err
	}
	return l.Addr(), nil
}

func (c *Cluster) closeLinks() {
	c.mu.Lock()
	links := c.links
	c.links = map[linkKey]*netfault.Link{}
	c.mu.Unlock()
	for _, l := range links {
		l.Close()
	}
}

// KafkaBootstrapEnv is the environment variable that gives a Kafka client
// started by StartProcess (kind KafkaKind) its bootstrap servers,
// "HOST:PORT,...": its own links to the brokers' Kafka listeners (or the
// listeners themselves without links).
const KafkaBootstrapEnv = "KAFKA_BOOTSTRAP"

// KafkaBootstrapArg, in a Kafka client's arguments, is replaced by the same
// list as KafkaBootstrapEnv.
const KafkaBootstrapArg = "{kafka-bootstrap}"

// KafkaKind is the kind of a process that speaks Kafka's protocol (any
// Kafka client program: kcat, a franz-go or Java program).
const KafkaKind = "kafka"

// ProcessSpec describes a process for StartProcess.
type ProcessSpec struct {
	// Name addresses it ("producer-1", "consumer-2", "kcat-1"); unique in
	// the cluster.
	Name string
	// Kind is "producer" or "consumer" (producerd, consumerd: tapes'
	// protocol, links through AddressMapEnv) or KafkaKind (a Kafka
	// client: links that rewrite Kafka's answers, KafkaBootstrapEnv and
	// KafkaBootstrapArg).
	Kind string
	// Path is the program; Args its arguments (the launcher adds nothing:
	// pass --dir or --bootstrap-server yourself, except that a Kafka
	// client's KafkaBootstrapArg is replaced).
	Path string
	Args []string
}

// StartProcess starts a client process of the cluster (a producerd or
// consumerd, or any Kafka client) that the launcher supervises like a
// broker: Kill, Stop, Pause, Resume and Restart address it by name, its
// output goes to DIR/logs/NAME.log and cluster.json lists it. With links,
// it reaches every broker through a link of its own: through AddressMapEnv
// for producerd and consumerd; a Kafka client is given its links to the
// brokers' Kafka listeners as bootstrap (KafkaBootstrapEnv,
// KafkaBootstrapArg), and the links rewrite the brokers' addresses in
// Metadata and FindCoordinator answers to its links (netfault.ListenKafka),
// so that every connection it opens crosses one.
func (c *Cluster) StartProcess(spec ProcessSpec) error {
	if spec.Name == "" || spec.Path == "" {
		return fmt.Errorf("launch: a process needs a name and a program")
	}
	if spec.Kind != "producer" && spec.Kind != "consumer" && spec.Kind != KafkaKind {
		return fmt.Errorf("launch: process kind %q: want producer, consumer or %s", spec.Kind, KafkaKind)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	if _, dup := c.byName[spec.Name]; dup {
		c.mu.Unlock()
		return fmt.Errorf("launch: a process named %s already exists", spec.Name)
	}
	log := filepath.Join(c.dir, "logs", spec.Name+".log")
	ch := &child{kind: spec.Kind, name: spec.Name, log: log, path: spec.Path, args: append([]string(nil), spec.Args...),
		proc: clusterfile.Process{Name: spec.Name, Kind: spec.Kind, Log: log}}
	switch {
	case spec.Kind == KafkaKind:
		bootstrap := c.addrsLocked(true)
		if c.withLinks {
			for i, b := range c.children {
				l, err := c.kafkaLinkLocked(spec.Name, b.name, b.kafkaAddr)
				if err != nil {
					c.mu.Unlock()
					return err
				}
				bootstrap[i] = l.Addr()
			}
		}
		list := strings.Join(bootstrap, ",")
		for i, a := range ch.args {
			ch.args[i] = strings.ReplaceAll(a, KafkaBootstrapArg, list)
		}
		ch.env = []string{KafkaBootstrapEnv + "=" + list}
	case c.withLinks:
		var pairs []string
		for _, b := range c.children {
			l, err := c.linkLocked(spec.Name, b)
			if err != nil {
				c.mu.Unlock()
				return err
			}
			pairs = append(pairs, b.addr+"="+l.Addr())
		}
		ch.env = []string{AddressMapEnv + "=" + strings.Join(pairs, ",")}
	}
	c.byName[spec.Name] = ch
	c.extra = append(c.extra, ch)
	c.mu.Unlock()
	ch.op.Lock()
	defer ch.op.Unlock()
	return c.spawn(ch, nil)
}

// LinkState is one link as Links reports it.
type LinkState struct {
	From, To string
	// Addr is the link's own listening address; Target the process it
	// forwards to.
	Addr, Target string
	Mode         netfault.Mode
	Delay        time.Duration
	Jitter       time.Duration
	// Kafka: the link rewrites Kafka answers (a Kafka client's link to a
	// broker's Kafka listener). Stats are its counters (Links fills
	// them; CutChanges and the rest ignore them).
	Kafka bool
	Stats netfault.Stats
}

// Links returns every link, sorted by from, then to.
func (c *Cluster) Links() []LinkState {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]LinkState, 0, len(c.links))
	for k, l := range c.links {
		d, j := l.Delay()
		out = append(out, LinkState{From: k.from, To: k.to, Addr: l.Addr(), Target: l.Target(), Mode: l.Mode(), Delay: d, Jitter: j,
			Kafka: l.Kafka(), Stats: l.Stats()})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].From != out[j].From {
			return out[i].From < out[j].From
		}
		return out[i].To < out[j].To
	})
	return out
}

// SetLink changes the link from -> to: which directions carry bytes, and
// the delay (± jitter) of each chunk.
func (c *Cluster) SetLink(from, to string, mode netfault.Mode, delay, jitter time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.withLinks {
		return fmt.Errorf("launch: %w", ErrNoLinks)
	}
	l, ok := c.links[linkKey{from, to}]
	if !ok {
		return fmt.Errorf("launch: no link %s->%s (links go from a process to a broker): %w", from, to, ErrUnknownProcess)
	}
	l.SetMode(mode)
	l.SetDelay(delay)
	l.SetJitter(jitter)
	return nil
}

// Heal restores every link: bytes flow both ways, no delay.
func (c *Cluster) Heal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.links {
		l.SetMode(netfault.Pass)
		l.SetDelay(0)
		l.SetJitter(0)
	}
}

// CutChanges returns the new state of every link that carries bytes between
// the process name and one of others, cut: both ways, or with oneWay only
// what others send to name (name's own messages still arrive). A
// connection's bytes from X to Y travel forward on link X->Y and back on
// link Y->X, so a one-way cut is link name->other dropping its answers
// (drop-back) plus link other->name dropping its requests (drop-forward).
// Delays are kept. links is what Links returns (or the same read from the
// control endpoint); nothing is applied.
func CutChanges(links []LinkState, name string, others []string, oneWay bool) []LinkState {
	var out []LinkState
	for _, l := range links {
		switch {
		case l.From == name && slices.Contains(others, l.To):
			l.Mode = netfault.Blackhole
			if oneWay {
				l.Mode = netfault.DropBack // answers from the other side to name
			}
		case l.To == name && slices.Contains(others, l.From):
			l.Mode = netfault.Blackhole
			if oneWay {
				l.Mode = netfault.DropFwd // requests from the other side to name
			}
		default:
			continue
		}
		out = append(out, l)
	}
	return out
}

// DelayChanges returns the new state of every link from or to the process
// name with delay ± jitter; modes are kept. Nothing is applied.
func DelayChanges(links []LinkState, name string, delay, jitter time.Duration) []LinkState {
	var out []LinkState
	for _, l := range links {
		if l.From == name || l.To == name {
			l.Delay, l.Jitter = delay, jitter
			out = append(out, l)
		}
	}
	return out
}

// ApplyLinks sets each link of changes (From, To, Mode, Delay, Jitter) as
// SetLink does, after checking that every one of them exists.
func (c *Cluster) ApplyLinks(changes []LinkState) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.withLinks {
		return fmt.Errorf("launch: %w", ErrNoLinks)
	}
	for _, ch := range changes {
		if _, ok := c.links[linkKey{ch.From, ch.To}]; !ok {
			return fmt.Errorf("launch: no link %s->%s (links go from a process to a broker): %w", ch.From, ch.To, ErrUnknownProcess)
		}
	}
	for _, ch := range changes {
		l := c.links[linkKey{ch.From, ch.To}]
		l.SetMode(ch.Mode)
		l.SetDelay(ch.Delay)
		l.SetJitter(ch.Jitter)
	}
	return nil
}

// CutBetween cuts the links between name and each of others (see
// CutChanges) and returns the links it changed. No link between them is an
// error.
func (c *Cluster) CutBetween(name string, others []string, oneWay bool) ([]LinkState, error) {
	if !c.withLinks {
		return nil, fmt.Errorf("launch: %w", ErrNoLinks)
	}
	changes := CutChanges(c.Links(), name, others, oneWay)
	if len(changes) == 0 {
		return nil, fmt.Errorf("launch: no link between %s and %s: %w", name, strings.Join(others, ", "), ErrUnknownProcess)
	}
	return changes, c.ApplyLinks(changes)
}

// DelayLinks delays every link from or to name by delay ± jitter (see
// DelayChanges) and returns the links it changed. A process without links
// is an error.
func (c *Cluster) DelayLinks(name string, delay, jitter time.Duration) ([]LinkState, error) {
	if !c.withLinks {
		return nil, fmt.Errorf("launch: %w", ErrNoLinks)
	}
	changes := DelayChanges(c.Links(), name, delay, jitter)
	if len(changes) == 0 {
		return nil, fmt.Errorf("launch: %s has no links: %w", name, ErrUnknownProcess)
	}
	return changes, c.ApplyLinks(changes)
}
