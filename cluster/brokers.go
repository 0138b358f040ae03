package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/clitext"
	"github.com/tapes-dev/tapes/internal/clusterfile"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// brokersCommand is `cluster brokers [list]`, `cluster brokers add` and
// `cluster brokers remove ID`.
type brokersCommand struct {
	stdout, stderr io.Writer
}

func init() {
	register("brokers", "list the brokers; add a broker to the running cluster; remove a broker: move its replicas away, unregister and stop it", (&brokersCommand{stdout: os.Stdout, stderr: os.Stderr}).Run)
}

const brokersUsage = `Usage:
  cluster brokers [list] [--dir DIR | --bootstrap-server ADDR]
  cluster brokers add [--id N] [--dir DIR] [--wait-timeout D]
  cluster brokers remove ID [--dir DIR] [--wait-timeout D]
`

// Run dispatches to the action named by args[0]; no action (or only
// flags) is list.
func (c *brokersCommand) Run(ctx context.Context, args []string) error {
	help := len(args) > 0 && slices.Contains([]string{"-h", "-help", "--help", "help"}, args[0])
	switch {
	case len(args) == 0 || strings.HasPrefix(args[0], "-") && !help:
		return c.list(ctx, args)
	case args[0] == "list":
		return c.list(ctx, args[1:])
	case args[0] == "add":
		return c.add(ctx, args[1:])
	case args[0] == "remove":
		return c.remove(ctx, args[1:])
	}
	fmt.Fprint(c.stderr, brokersUsage)
	if help {
		return nil
	}
	return fmt.Errorf("%w: want the action list, add or remove, got %q", errUsage, args[0])
}

// list is `cluster brokers [list]`: one row per registered broker, by id,
// with its gRPC and Kafka addresses, whether the controller sees it alive,
// and how many partitions it leads and holds a replica of.
func (c *brokersCommand) list(ctx context.Context, args []string) error {
	var t clusterTarget
	fs := commandFlags("brokers [list]",
		"Prints the registered brokers: ID, ADDRESS (gRPC), KAFKA-ADDRESS, STATE (alive or down, as the controller\n"+
			"sees its heartbeats), LEADER (partitions it leads) and REPLICAS (partitions it holds a replica of).", c.stderr)
	t.addFlags(fs)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("%w: brokers list takes no arguments, got %q", errUsage, pos)
	}
	md, err := t.metadata(ctx)
	if err != nil {
		return err
	}
	return brokerTable(c.stdout, md, nil)
}

// brokerTable prints the rows of `cluster brokers list` from md: every
// registered broker, or only those only names when it is not nil.
func brokerTable(out io.Writer, md *tapesv1.MetadataResponse, only []int32) error {
	led, held := map[int32]int{}, map[int32]int{}
	for _, tm := range md.GetTopics() {
		for _, pm := range tm.GetPartitions() {
			led[pm.GetLeaderId()]++
			for _, r := range pm.GetReplicas() {
				held[r]++
			}
		}
	}
	brokers := slices.Clone(md.GetBrokers())
	slices.SortFunc(brokers, func(a, b *tapesv1.BrokerInfo) int { return int(a.GetId()) - int(b.GetId()) })
	w := clitext.NewTable(out)
	clitext.Row(w, "ID", "ADDRESS", "KAFKA-ADDRESS", "STATE", "LEADER", "REPLICAS")
	for _, b := range brokers {
		if only != nil && !slices.Contains(only, b.GetId()) {
			continue
		}
		state := "down"
		if b.GetAlive() {
			state = "alive"
		}
		clitext.Row(w, strconv.Itoa(int(b.GetId())), clitext.Cell(b.GetAddress()), clitext.Cell(b.GetKafkaAddress()), state,
			strconv.Itoa(led[b.GetId()]), strconv.Itoa(held[b.GetId()]))
	}
	return w.Flush()
}

// move is one partition's reassignment off the removed broker.
type move struct {
	topic     string
	partition int32
	from, to  []int32
}

// remove is `cluster brokers remove ID`: it plans, for every partition
// holding a replica on ID, a target that replaces ID with the registered,
// live broker holding the fewest replicas and none of this partition;
// refuses, before moving anything, when some partition has no such broker
// (naming it); reassigns them all and waits; then stops the broker under
// the launcher of --dir and unregisters it.
func (c *brokersCommand) remove(ctx context.Context, args []string) error {
	var (
		t    clusterTarget
		wait time.Duration
	)
	fs := commandFlags("brokers remove ID",
		"Moves every replica broker ID holds to the other brokers (cluster topics reassign, one partition at a time),\n"+
			"then stops the broker (under the launcher of --dir) and unregisters it. Refused, with nothing moved, when a\n"+
			"partition cannot keep its replication factor on the other live brokers.", c.stderr)
	t.addFlags(fs)
	fs.DurationVar(&wait, "wait-timeout", 5*time.Minute, "how long to wait for the replicas to move")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: want exactly one broker ID", errUsage)
	}
	n, err := strconv.ParseInt(pos[0], 10, 32)
	if err != nil || n <= 0 {
		return fmt.Errorf("%w: broker ID %q: want a positive integer", errUsage, pos[0])
	}
	id := int32(n)
	rctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	f, cl, md, err := t.underLauncher(rctx, "brokers remove stops the broker")
	if err != nil {
		return err
	}
	defer cl.Close()
	var live []int32
	known := false
	for _, b := range md.GetBrokers() {
		if b.GetId() == id {
			known = true
		} else if b.GetAlive() {
			live = append(live, b.GetId())
		}
	}
	if !known {
		return kerr.New(kerr.InvalidRequest, "broker %d is not registered", id)
	}
	load := map[int32]int{}
	for _, tm := range md.GetTopics() {
		for _, pm := range tm.GetPartitions() {
			for _, r := range pm.GetReplicas() {
				load[r]++
			}
		}
	}
	var moves []move
	for _, tm := range md.GetTopics() {
		for _, pm := range tm.GetPartitions() {
			i := slices.Index(pm.GetReplicas(), id)
			if i < 0 {
				continue
			}
			best := int32(-1)
			for _, b := range live {
				if !slices.Contains(pm.GetReplicas(), b) && (best < 0 || load[b] < load[best]) {
					best = b
				}
			}
			if best < 0 {
				return kerr.New(kerr.InvalidReplicationFactor, "cannot remove broker %d: %s-%d has replication factor %d and only %d other live brokers (%s) to hold it; nothing was moved",
					id, tm.GetName(), pm.GetPartition(), len(pm.GetReplicas()), len(live), clitext.BrokerList(live))
			}
			to := slices.Clone(pm.GetReplicas())
			to[i] = best
			load[best]++
			moves = append(moves, move{tm.GetName(), pm.GetPartition(), pm.GetReplicas(), to})
		}
	}
	for _, m := range moves {
		if err := cl.ReassignPartition(rctx, m.topic, m.partition, m.to); err != nil {
			return fmt.Errorf("reassign %s-%d: %w", m.topic, m.partition, err)
		}
		fmt.Fprintf(c.stdout, "Reassigning %s-%d from %s to %s.\n", m.topic, m.partition, clitext.BrokerList(m.from), clitext.BrokerList(m.to))
	}
	wctx, wcancel := context.WithTimeout(ctx, wait)
	defer wcancel()
	for _, m := range moves {
		for {
			pm, err := partitionMetadata(wctx, cl, m.topic, m.partition)
			if err == nil && slices.Equal(pm.GetReplicas(), m.to) && len(pm.GetAddingReplicas())+len(pm.GetRemovingReplicas()) == 0 {
				fmt.Fprintf(c.stdout, "Moved %s-%d: replicas %s, ISR %s.\n", m.topic, m.partition, clitext.BrokerList(pm.GetReplicas()), clitext.BrokerList(pm.GetIsr()))
				break
			}
			select {
			case <-wctx.Done():
				return fmt.Errorf("%s-%d did not reach %s within %v (the reassignment goes on); broker %d is still registered", m.topic, m.partition, clitext.BrokerList(m.to), wait, id)
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	cc, err := grpc.NewClient(f.Control, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	sctx, scancel := context.WithTimeout(ctx, t.timeout)
	defer scancel()
	name := fmt.Sprintf("broker-%d", id)
	if _, err := tapesv1.NewClusterControlServiceClient(cc).StopProcess(sctx, &tapesv1.StopProcessRequest{Name: name}); err != nil {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	if err := cl.UnregisterBroker(sctx, id); err != nil {
		return fmt.Errorf("unregister broker %d (stopped, holding no replica): %w", id, err)
	}
	fmt.Fprintf(c.stdout, "Removed broker %d: %d partitions moved, broker stopped and unregistered.\n", id, len(moves))
	return nil
}

// underLauncher is the start of brokers add and remove, which act through
// the launcher of --dir (why says what for): its cluster.json, which must
// name a control endpoint, a client of the cluster (the caller closes it)
// and the cluster's metadata (every topic).
func (t *clusterTarget) underLauncher(ctx context.Context, why string) (*clusterfile.File, *client.Client, *tapesv1.MetadataResponse, error) {
	f, err := clusterfile.Read(t.dir)
	if err != nil || f.Control == "" {
		return nil, nil, nil, fmt.Errorf("%s through the launcher of --dir %s (cluster up), which has no control endpoint: %v", why, t.dir, err)
	}
	cl, err := t.client()
	if err != nil {
		return nil, nil, nil, err
	}
	md, err := cl.Metadata(ctx, nil, false)
	if err != nil {
		cl.Close()
		return nil, nil, nil, err
	}
	return f, cl, md, nil
}
