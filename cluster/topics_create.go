package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// create is `cluster topics create NAME`.
func (c *topicsCommand) create(ctx context.Context, args []string) error {
	var (
		t            clusterTarget
		partitions   int
		replication  int
		configs      multiFlag
		validateOnly bool
		ifNotExists  bool
	)
	fs := commandFlags("topics create NAME --partitions N --replication-factor R [--config KEY=VALUE ...]",
		"Creates a topic through the controller quorum and prints \"Created topic NAME.\".", c.stderr)
	t.addFlags(fs)
	fs.IntVar(&partitions, "partitions", 0, "number of partitions (required, at least 1)")
	fs.IntVar(&replication, "replication-factor", 0, "number of replicas of each partition, i.e. brokers in its Raft group (required, at least 1)")
	fs.Var(&configs, "config", "topic config `KEY=VALUE`, e.g. min.insync.replicas=2; repeat for several")
	fs.BoolVar(&validateOnly, "validate-only", false, "have the broker check the request without creating anything")
	fs.BoolVar(&ifNotExists, "if-not-exists", false, "succeed quietly when the topic already exists")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: want exactly one topic NAME, got %d arguments", errUsage, len(pos))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["partitions"] || !set["replication-factor"] {
		return fmt.Errorf("%w: --partitions and --replication-factor are required", errUsage)
	}
	if partitions < 1 {
		return fmt.Errorf("%w: --partitions %d: need at least 1", errUsage, partitions)
	}
	if replication < 1 {
		return fmt.Errorf("%w: --replication-factor %d: need at least 1", errUsage, replication)
	}
	cfg, err := parseConfigs(configs)
	if err != nil {
		return err
	}

	cl, err := t.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	name := pos[0]
	err = cl.CreateTopics(ctx, []*tapesv1.TopicSpec{{
		Name: name, Partitions: int32(partitions), ReplicationFactor: int32(replication), Configs: cfg,
	}}, validateOnly)
	switch {
	case err == nil && validateOnly:
		fmt.Fprintf(c.stdout, "Topic %s is valid.\n", name)
	case err == nil:
		fmt.Fprintf(c.stdout, "Created topic %s.\n", name)
	case ifNotExists && kerr.Is(err, kerr.TopicAlreadyExists):
		return nil
	default:
		return err
	}
	return nil
}

// parseConfigs turns repeated KEY=VALUE flags into a map.
func parseConfigs(kvs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%w: --config %q: want KEY=VALUE", errUsage, kv)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%w: --config %q: key %q given twice", errUsage, kv, k)
		}
		out[k] = v
	}
	return out, nil
}
