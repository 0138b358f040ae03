package launch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tapes-dev/tapes/internal/clusterfile"
)

// ErrExists: AddBroker was asked for a broker this cluster already has (a
// process of that name, or a data directory that is not empty).
var ErrExists = errors.New("broker exists")

// AddBroker starts one more broker, id, in the running cluster (`cluster
// brokers add`): a fresh data directory DIR/broker-ID, loopback ports the
// kernel picks (gRPC and Kafka, passed as file descriptors as Start does)
// and brokerd --join with the addresses of the other brokers, so that it
// registers through them and the controller quorum's leader adds it; the
// other brokers learn its address from the metadata. cluster.json lists
// it (its Kafka address in kafka_bootstrap too); Close stops it with the
// others. It returns once the process has started, not once it serves.
// With Options.Links it gets no links (the others reach it directly);
// with Options.Network it is refused (a new host would be needed).
func (c *Cluster) AddBroker(id int32) (clusterfile.Process, error) {
	if id <= 0 {
		return clusterfile.Process{}, fmt.Errorf("launch: broker id %d: want a positive integer", id)
	}
	if c.network != nil {
		return clusterfile.Process{}, fmt.Errorf("launch: the brokers run on hosts of their own (--netns); adding one needs a host of its own, which is not built")
	}
	name := fmt.Sprintf("broker-%d", id)
	ch := &child{
		kind:    "broker",
		id:      id,
		name:    name,
		dataDir: filepath.Join(c.dir, name),
		log:     filepath.Join(c.dir, "logs", name+".log"),
		join:    true,
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return clusterfile.Process{}, ErrClosed
	}
	if _, dup := c.byName[name]; dup {
		c.mu.Unlock()
		return clusterfile.Process{}, fmt.Errorf("launch: %s is already a process of this cluster: %w", name, ErrExists)
	}
	// Reserved under mu, so that a concurrent AddBroker of the same id
	// is refused; it is listed (and started) only below.
	c.byName[name] = ch
	c.mu.Unlock()
	release := func() {
		c.mu.Lock()
		delete(c.byName, name)
		c.mu.Unlock()
	}
	if entries, err := os.ReadDir(ch.dataDir); err == nil && len(entries) > 0 {
		release()
		return clusterfile.Process{}, fmt.Errorf("launch: %s: the data directory %s is not empty (a broker of that id ran here before): %w", name, ch.dataDir, ErrExists)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		release()
		return clusterfile.Process{}, fmt.Errorf("launch: %s: %w", name, err)
	}
	g, addr, listen, err := c.bindPort(name, "gRPC", "")
	if err != nil {
		release()
		return clusterfile.Process{}, err
	}
	k, kaddr, klisten, err := c.bindPort(name, "Kafka", "")
	if err != nil {
		g.Close()
		release()
		return clusterfile.Process{}, err
	}
	ch.addr, ch.listen = addr, listen
	ch.kafkaAddr, ch.kafkaListen = kaddr, klisten
	ch.proc = clusterfile.Process{Name: name, Kind: "broker", ID: id, Address: addr, KafkaAddress: kaddr, DataDir: ch.dataDir, Log: ch.log}
	ch.op.Lock()
	defer ch.op.Unlock()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		g.Close()
		k.Close()
		return clusterfile.Process{}, ErrClosed
	}
	c.added = append(c.added, ch)
	c.mu.Unlock()
	if err := c.spawn(ch, &brokerListeners{grpc: g, kafka: k}); err != nil {
		c.mu.Lock()
		c.added = slices.DeleteFunc(c.added, func(a *child) bool { return a == ch })
		delete(c.byName, name)
		if werr := c.writeFileLocked(); werr != nil {
			err = errors.Join(err, werr)
		}
		c.mu.Unlock()
		return clusterfile.Process{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return ch.proc, nil
}

// joinOf is a joining broker's --join value: the gRPC addresses of the
// other brokers (directly, links or not).
func (c *Cluster) joinOf(ch *child) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, b := range c.brokersLocked() {
		if b != ch {
			out = append(out, b.addr)
		}
	}
	return strings.Join(out, ",")
}
