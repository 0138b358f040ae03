package compat

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadInputPositions reads every partition of topic from its start with
// franz-go at the isolation level, once its writers have stopped, until a
// poll of 15 s brings nothing, and returns each record's input position
// "PARTITION/OFFSET", from the headers in-partition and in-offset that the
// consume-transform-produce programs (TransactionalPipeline here, the
// GroupTransactSession of internal/systest) put on every output record, in
// the order read. Fetch errors other than the idle poll's deadline go to
// logf. It fails when records still arrive after 3 minutes.
func ReadInputPositions(bootstrap []string, topic string, level kgo.IsolationLevel, logf func(format string, args ...any)) ([]string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap...), kgo.FetchIsolationLevel(level),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []string
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				logf("fetch %s-%d: %v", t, p, err)
			}
		})
		if fs.NumRecords() == 0 {
			return out, nil
		}
		fs.EachRecord(func(r *kgo.Record) {
			var ip, io string
			for _, h := range r.Headers {
				switch h.Key {
				case "in-partition":
					ip = string(h.Value)
				case "in-offset":
					io = string(h.Value)
				}
			}
			out = append(out, ip+"/"+io)
		})
	}
	return nil, fmt.Errorf("reading %s: still records after 3 minutes (%d read)", topic, len(out))
}
