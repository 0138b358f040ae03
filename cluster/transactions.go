package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tapes-dev/tapes/internal/clitext"
)

// `cluster list-transactions` and `cluster describe-transactions`: the
// transaction coordinators' state in the shape of kafka-transactions.sh
// list and describe (same columns), asked over the brokers' Kafka
// listeners with franz-go's kadm (ListTransactions of every broker;
// FindCoordinator key type 1, then DescribeTransactions). The brokers are
// found as every operator command finds them (--dir or
// --bootstrap-server, then Metadata for their Kafka addresses).

type txnCommand struct {
	stdout, stderr io.Writer
	now            func() time.Time
}

func init() {
	c := &txnCommand{stdout: os.Stdout, stderr: os.Stderr, now: time.Now}
	register("list-transactions", "list the transactions the coordinators hold (kafka-transactions.sh list)", c.list)
	register("describe-transactions", "describe one transactional id (kafka-transactions.sh describe)", c.describe)
}

// errNoKafkaListener: no live broker of the cluster serves Kafka's protocol.
var errNoKafkaListener = errors.New("no live broker has a Kafka listener (brokerd --kafka-listen)")

// parseNoArgs parses the flags of command name, which takes no
// positional arguments.
func parseNoArgs(fs *flag.FlagSet, args []string, name string) error {
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("%w: %s takes no arguments, got %q", errUsage, name, pos)
	}
	return nil
}

// session returns ctx bounded by t's --timeout and a kadm client over the
// Kafka listeners of the cluster t names; done releases both.
func (c *txnCommand) session(ctx context.Context, t *clusterTarget) (context.Context, *kadm.Client, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	adm, kc, err := c.kadmClient(ctx, t)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return ctx, adm, func() { kc.Close(); cancel() }, nil
}

// kadmClient returns a kadm client over the Kafka listeners of the
// cluster t names; the caller closes the kgo client.
func (c *txnCommand) kadmClient(ctx context.Context, t *clusterTarget) (*kadm.Client, *kgo.Client, error) {
	cl, err := t.client()
	if err != nil {
		return nil, nil, err
	}
	defer cl.Close()
	md, err := cl.Brokers(ctx)
	if err != nil {
		return nil, nil, err
	}
	var seeds []string
	for _, b := range md.GetBrokers() {
		if b.GetAlive() && b.GetKafkaAddress() != "" {
			seeds = append(seeds, b.GetKafkaAddress())
		}
	}
	if len(seeds) == 0 {
		return nil, nil, errNoKafkaListener
	}
	kc, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return nil, nil, fmt.Errorf("kafka client: %w", err)
	}
	return kadm.NewClient(kc), kc, nil
}

// list is `cluster list-transactions`.
func (c *txnCommand) list(ctx context.Context, args []string) error {
	var t clusterTarget
	fs := commandFlags("list-transactions",
		"Prints every transactional id the brokers' transaction coordinators hold, sorted, under\n"+
			"kafka-transactions.sh list's header: TransactionalId, Coordinator (the broker id),\n"+
			"ProducerId, TransactionState (Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit,\n"+
			"CompleteAbort). Every live broker is asked; one that does not answer makes the command\n"+
			"fail after printing what the others listed.", c.stderr)
	t.addFlags(fs)
	var states string
	fs.StringVar(&states, "state", "", "comma-separated `states` to list (default: all)")
	if err := parseNoArgs(fs, args, "list-transactions"); err != nil {
		return err
	}
	var filter []string
	for _, s := range strings.Split(states, ",") {
		if s = strings.TrimSpace(s); s != "" {
			filter = append(filter, s)
		}
	}
	ctx, adm, done, err := c.session(ctx, &t)
	if err != nil {
		return err
	}
	defer done()
	listed, listErr := adm.ListTransactions(ctx, nil, filter)
	if listErr != nil && len(listed) == 0 {
		return listErr
	}
	tw := clitext.NewTable(c.stdout)
	clitext.Row(tw, "TransactionalId", "Coordinator", "ProducerId", "TransactionState")
	for _, l := range listed.Sorted() {
		clitext.Row(tw, l.TxnID, strconv.Itoa(int(l.Coordinator)), strconv.FormatInt(l.ProducerID, 10), l.State)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return listErr
}

// describe is `cluster describe-transactions --transactional-id ID`.
func (c *txnCommand) describe(ctx context.Context, args []string) error {
	var t clusterTarget
	fs := commandFlags("describe-transactions --transactional-id ID",
		"Describes one transactional id as its coordinator holds it, in kafka-transactions.sh\n"+
			"describe's columns: CoordinatorId, TransactionalId, ProducerId, ProducerEpoch,\n"+
			"TransactionState, TransactionTimeoutMs, CurrentTransactionStartTimeMs and\n"+
			"TransactionDurationMs (None when no transaction is open), TopicPartitions (the\n"+
			"partitions of the open transaction, comma-separated). An id no coordinator knows is\n"+
			"TRANSACTIONAL_ID_NOT_FOUND.", c.stderr)
	t.addFlags(fs)
	var id string
	fs.StringVar(&id, "transactional-id", "", "the transactional `id` to describe (required)")
	if err := parseNoArgs(fs, args, "describe-transactions"); err != nil {
		return err
	}
	if id == "" {
		return fmt.Errorf("%w: --transactional-id is required", errUsage)
	}
	ctx, adm, done, err := c.session(ctx, &t)
	if err != nil {
		return err
	}
	defer done()
	ds, err := adm.DescribeTransactions(ctx, id)
	d, ok := ds[id]
	switch {
	case ok && d.Err != nil:
		return fmt.Errorf("transactional id %s: %w", id, d.Err)
	case !ok && err != nil:
		return fmt.Errorf("transactional id %s: %w", id, err)
	case !ok:
		return fmt.Errorf("transactional id %s: no coordinator answered", id)
	}
	start, duration := "None", "None"
	if d.StartTimestamp >= 0 {
		start = strconv.FormatInt(d.StartTimestamp, 10)
		duration = strconv.FormatInt(max(c.now().UnixMilli()-d.StartTimestamp, 0), 10)
	}
	var parts []string
	for _, tp := range d.Topics.Sorted() {
		for _, p := range tp.Partitions {
			parts = append(parts, tp.Topic+"-"+strconv.Itoa(int(p)))
		}
	}
	slices.Sort(parts)
	tw := clitext.NewTable(c.stdout)
	clitext.Row(tw, "CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState", "TransactionTimeoutMs",
		"CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions")
	clitext.Row(tw, strconv.Itoa(int(d.Coordinator)), d.TxnID, strconv.FormatInt(d.ProducerID, 10), strconv.Itoa(int(d.ProducerEpoch)),
		d.State, strconv.Itoa(int(d.TimeoutMillis)), start, duration, strings.Join(parts, ","))
	return tw.Flush()
}
