//go:build compat

package compat

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// transactionsCommand is kafka-transactions.sh's main class in 4.x.
const transactionsCommand = "org.apache.kafka.tools.TransactionsCommand"

// javaTransactions: the Java client's consume-transform-produce
// (TransactionalPipeline: read_committed, sendOffsetsToTransaction, one
// transaction per poll) through a SIGKILL of an output partition's leader.
// Read with read_committed by franz-go afterwards, the output holds every
// input record exactly once. While it runs, `kafka-transactions list`
// lists its transactional id and `kafka-transactions describe` describes
// it with the producer id the list shows.
func (s *suite) javaTransactions(t *testing.T) {
	needJava(t)
	in, out, group, txnID, n := s.name("java-txn-in"), s.name("java-txn-out"), s.name("java-txn"), s.name("java-txn"), 1200
	s.tg.createTopic(t, in, 3)
	s.tg.createTopic(t, out, 3)
	s.tg.fill(t, in, 3, n, 12)
	stored := s.storedAtLeast(t, in, n)
	end := map[int32]int64{}
	for _, r := range stored {
		end[r.Partition] = max(end[r.Partition], r.Offset+1)
	}
	name, args := JavaCmd(javaPrograms(t), "TransactionalPipeline", s.tg.bootstrap, in, out, group, txnID)
	p := startProc(t, nil, name, args...)
	// committedTo is where the pipeline's last commit of each partition
	// left its offsets (its COMMIT lines).
	committedTo := func() map[int32]int64 {
		at := map[int32]int64{}
		for _, l := range strings.Split(string(p.output()), "\n") {
			f := strings.Fields(l)
			if len(f) != 3 || f[0] != "COMMIT" {
				continue
			}
			for _, po := range strings.Split(f[2], ",") {
				ps, os, _ := strings.Cut(po, ":")
				pi, err1 := strconv.Atoi(ps)
				o, err2 := strconv.ParseInt(os, 10, 64)
				if err1 == nil && err2 == nil {
					at[int32(pi)] = max(at[int32(pi)], o)
				}
			}
		}
		return at
	}
	progress := func(all bool) func() string {
		return func() string {
			if p.exited() {
				return "" // reported below
			}
			at, done := committedTo(), 0
			for part, e := range end {
				if at[part] >= e {
					done++
				}
			}
			if (all && done == len(end)) || (!all && p.lines("COMMIT") >= 5) {
				return ""
			}
			return fmt.Sprintf("%d transactions committed, offsets at %v of %v", p.lines("COMMIT"), at, end)
		}
	}
	waitFor(t, 2*time.Minute, "five transactions committed", progress(false))
	if p.exited() {
		failf(t, "the pipeline exited: %v: %s", p.err, why(p.errb.Bytes()))
	}

	// kafka-transactions list and describe, while the pipeline runs.
	lname, largs := JavaCmd("", transactionsCommand, "--bootstrap-server", s.tg.bootstrap, "list")
	listed := string(run(t, 2*time.Minute, "", nil, lname, largs...))
	var producerID string
	for _, l := range strings.Split(listed, "\n") {
		if f := strings.Fields(l); len(f) >= 4 && f[0] == txnID {
			producerID = f[2]
		}
	}
	if producerID == "" {
		failf(t, "kafka-transactions list does not list %s:\n%s", txnID, listed)
	}
	dname, dargs := JavaCmd("", transactionsCommand, "--bootstrap-server", s.tg.bootstrap, "describe", "--transactional-id", txnID)
	described := string(run(t, 2*time.Minute, "", nil, dname, dargs...))
	if !strings.Contains(described, txnID) || !strings.Contains(described, producerID) {
		failf(t, "kafka-transactions describe --transactional-id %s does not name it with producer id %s:\n%s", txnID, producerID, described)
	}
	t.Logf("kafka-transactions list:\n%s\nkafka-transactions describe:\n%s", listed, described)

	restart := s.tg.killLeader(t, out, 0)
	waitFor(t, 4*time.Minute, "every input offset committed", progress(true))
	restart()
	p.stdin.Close()
	if err := p.wait(time.Minute); err != nil {
		failf(t, "the pipeline: %v: %s", err, tail(p.errb.Bytes()))
	}
	t.Logf("the pipeline committed %d transactions and aborted %d", p.lines("COMMIT"), p.lines("ABORT"))

	got := s.tg.readCommittedInputs(t, out)
	var dup, missing []string
	for _, r := range stored {
		switch c := got[fmt.Sprintf("%d/%d", r.Partition, r.Offset)]; {
		case c == 0:
			missing = append(missing, fmt.Sprintf("%d/%d", r.Partition, r.Offset))
		case c > 1:
			dup = append(dup, fmt.Sprintf("%d/%d x%d", r.Partition, r.Offset, c))
		}
	}
	if len(dup) > 0 || len(missing) > 0 {
		failf(t, "read_committed output of %d inputs: %d duplicated (%s), %d missing (%s)", len(stored), len(dup), few(dup), len(missing), few(missing))
	}
}

// readCommittedInputs reads topic with read_committed, once its writers
// have stopped, and counts its records by input position.
func (tg *target) readCommittedInputs(t *testing.T, topic string) map[string]int {
	t.Helper()
	read, err := ReadInputPositions(strings.Split(tg.bootstrap, ","), topic, kgo.ReadCommitted(), t.Logf)
	if err != nil {
		failf(t, "%v", err)
	}
	got := map[string]int{}
	for _, in := range read {
		got[in]++
	}
	return got
}
