package dashboard

// The "Test yourself" panel's two predictions, run on the real cluster:
//
//   - predict-consumers: eight consumers join one group on a topic of six
//     partitions; the page then shows, from the group's real state in the
//     snapshot, which members got a partition (six) and which are idle (two).
//   - predict-order: A1 is written to one partition and acknowledged, then B1
//     to another, several times; each run's processing order is read back
//     from the two consumers' histories.
//
// Both are actions (POST /api/action) carrying the learner's answer, which
// the answer repeats beside what the cluster did.

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tapes-dev/tapes/internal/clitext"
	"github.com/tapes-dev/tapes/internal/consumer"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/producer"
)

// The predictions' topics, groups and sizes (the seed page's questions).
const (
	predictSixTopic      = "predict-six"
	predictSixGroup      = "predict-six"
	predictSixPartitions = 6
	predictSixConsumers  = 8
	predictOrderTopic    = "predict-order"
	predictOrderGroup    = "predict-order"
	defaultPredictRuns   = 5
	maxPredictRuns       = 20
	// predictOrderProcess is the order consumers' --process-time: the
	// other traffic each run writes first takes this long per record.
	predictOrderProcess = 30 * time.Millisecond
	predictTimeout      = 60 * time.Second
)

// predictBacklogs are the records of other traffic runs 1, 2, ... write
// ahead of A1 and of B1 (then again from the first).
var predictBacklogs = [][2]int{{0, 0}, {3, 0}, {0, 2}, {2, 0}, {1, 3}}

func predictBacklog(run int) [2]int { return predictBacklogs[(run-1)%len(predictBacklogs)] }

// Answers predict-order takes.
var predictOrderAnswers = []string{"A1", "B1", "either"}

// validatePredict checks predict-consumers and predict-order and fills
// the defaults.
func (a *action) validatePredict() error {
	switch a.Action {
	case "predict-consumers":
		n, err := strconv.Atoi(a.Answer)
		if err != nil || n < 0 || n > predictSixConsumers {
			return fmt.Errorf(`"answer" %q: how many of the %d consumers consume, 0 to %d`, a.Answer, predictSixConsumers, predictSixConsumers)
		}
	case "predict-order":
		if !slices.Contains(predictOrderAnswers, a.Answer) {
			return fmt.Errorf(`"answer" %q: which the group processes first, one of %s`, a.Answer, strings.Join(predictOrderAnswers, ", "))
		}
		if a.Runs == 0 {
			a.Runs = defaultPredictRuns
		}
		if a.Runs < 1 || a.Runs > maxPredictRuns {
			return fmt.Errorf(`"runs" %d: want 1 to %d`, a.Runs, maxPredictRuns)
		}
	}
	return nil
}

// predictConsumers creates predict-six if needed and starts the group's
// consumers that are not running; the page shows the group's assignment.
func (s *Server) predictConsumers(ctx context.Context, a *action) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, predictTimeout)
	defer cancel()
	if err := s.ensureTopic(ctx, predictSixTopic, predictSixPartitions); err != nil {
		return "", err
	}
	started, err := s.startPredictConsumers(predictSixGroup, predictSixTopic, predictSixConsumers, 0)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("you predicted %s of %d consume; %d consumers (%d started now) are in group %s on %s (%d partitions): the panel shows who got a partition",
		a.Answer, predictSixConsumers, predictSixConsumers, started, predictSixGroup, predictSixTopic, predictSixPartitions), nil
}

// predictOrder runs A1-then-B1 a.Runs times on the two partitions of
// predict-order and reports each run's processing order, from the
// consumers' histories. Before A1 and B1 each run writes a few records of
// other traffic to each partition (predictBacklog), which its consumer
// processes first, as on a busy topic: the partitions' consumers are where
// they are, each in its own partition.
func (s *Server) predictOrder(ctx context.Context, a *action) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, predictTimeout+time.Duration(a.Runs)*10*time.Second)
	defer cancel()
	if err := s.ensureTopic(ctx, predictOrderTopic, 2); err != nil {
		return "", err
	}
	if _, err := s.startPredictConsumers(predictOrderGroup, predictOrderTopic, 2, predictOrderProcess); err != nil {
		return "", err
	}
	names := predictConsumerNames(predictOrderGroup, 2)
	if err := s.waitAssigned(ctx, predictOrderGroup, 2, 2); err != nil {
		return "", err
	}
	prefix := fmt.Sprintf("predict-%d", time.Now().UnixNano())
	var runs []string
	aFirst := 0
	for run := 1; run <= a.Runs; run++ {
		id := func(what string) string { return fmt.Sprintf("%s-run%d-%s", prefix, run, what) }
		ahead := predictBacklog(run)
		for p, n := range ahead {
			for i := range n {
				if err := s.producePredict(ctx, int32(p), "other", id(fmt.Sprintf("p%d-other%d", p, i))); err != nil {
					return "", err
				}
			}
		}
		// A1 acknowledged before B1 is sent: A1 is first in time.
		if err := s.producePredict(ctx, 0, "A1", id("A1")); err != nil {
			return "", err
		}
		if err := s.producePredict(ctx, 1, "B1", id("B1")); err != nil {
			return "", err
		}
		first, err := s.processedFirst(ctx, names, id("A1"), id("B1"))
		if err != nil {
			return "", fmt.Errorf("run %d: %w", run, err)
		}
		order := "B1 then A1"
		if first == "A1" {
			aFirst++
			order = "A1 then B1"
		}
		runs = append(runs, fmt.Sprintf("run %d, %d other records ahead of A1 and %d of B1: %s", run, ahead[0], ahead[1], order))
	}
	return fmt.Sprintf("you predicted %s; A1 was processed first in %d of %d runs (%s). Partitions are consumed in parallel: order holds within a partition only",
		predictAnswerText(a.Answer), aFirst, a.Runs, strings.Join(runs, "; ")), nil
}

func predictAnswerText(answer string) string {
	if answer == "either" {
		return "either may come first"
	}
	return answer + " first"
}

// ensureTopic creates topic with partitions partitions (replication 3, or
// what the available brokers allow) unless it exists; an existing one with
// another partition count is a conflict.
func (s *Server) ensureTopic(ctx context.Context, topic string, partitions int32) error {
	md, err := s.cfg.Client.Metadata(ctx, []string{topic}, false)
	if err == nil && len(md.Topics) == 1 && md.Topics[0].GetError() == nil && len(md.Topics[0].Partitions) > 0 {
		if n := int32(len(md.Topics[0].Partitions)); n != partitions {
			return httpErrorf(http.StatusConflict, "topic %s has %d partitions, the prediction needs %d: delete it first", topic, n, partitions)
		}
		return nil
	}
	// As many replicas as the cluster takes, up to 3: a broker that is down
	// but still counted gets a replica that the two others outvote.
	brokers := int32(0)
	for _, n := range s.cfg.Cluster.Names() {
		if p, ok := s.cfg.Cluster.Process(n); ok && p.Kind == "broker" {
			brokers++
		}
	}
	for rf := min(max(brokers, 1), 3); ; rf-- {
		err = s.cfg.Client.CreateTopics(ctx, []*tapesv1.TopicSpec{{Name: topic, Partitions: partitions, ReplicationFactor: rf}}, false)
		switch {
		case err == nil, kerr.Is(err, kerr.TopicAlreadyExists):
			return nil
		case kerr.Is(err, kerr.InvalidReplicationFactor) && rf > 1:
			continue // fewer brokers available than launched
		}
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
}

// predictConsumerNames are the processes of a prediction's group.
func predictConsumerNames(group string, n int) []string {
	var out []string
	for i := 1; i <= n; i++ {
		out = append(out, fmt.Sprintf("%s-consumer-%d", group, i))
	}
	return out
}

// startPredictConsumers starts those of group's n consumers that are not
// running (without a sink: their effects stay out of the page's sink) and
// returns how many it started.
func (s *Server) startPredictConsumers(group, topic string, n int, processTime time.Duration) (int, error) {
	startMu.Lock()
	defer startMu.Unlock()
	c := s.cfg.Cluster
	started := 0
	for _, name := range predictConsumerNames(group, n) {
		if _, exists := c.Process(name); exists {
			if st, err := c.ProcessStatus(name); err == nil && (st.State == "running" || st.State == "paused") {
				continue
			}
			if err := c.Restart(name); err != nil {
				return started, err
			}
			started++
			continue
		}
		args := []string{"--group", group, "--topic", topic, "--process-time", processTime.String(), "--records-per-poll", "10",
			"--history", historyPath(c.Dir(), name), "--control-listen", "127.0.0.1:0", "--session-timeout", sessionTimeout}
		if err := s.startClient("consumer", s.cfg.Consumerd, name, args); err != nil {
			return started, err
		}
		s.col.procs.started(name, startSettings{topic: topic})
		started++
	}
	return started, nil
}

// waitAssigned waits until group is stable with members members, active
// of them owning a partition.
func (s *Server) waitAssigned(ctx context.Context, group string, members, active int) error {
	for {
		d, err := s.cfg.Client.DescribeGroup(ctx, group)
		if err == nil && d.GetState() == "Stable" && len(d.GetMembers()) == members {
			n := 0
			for _, m := range d.GetMembers() {
				if tps, err := clitext.MemberPartitions(d, m); err == nil && clitext.CountPartitions(tps) > 0 {
					n++
				}
			}
			if n == active {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return httpErrorf(http.StatusServiceUnavailable, "group %s is not stable with %d members owning partitions yet (try again): %v", group, members, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// producePredict writes one record (acks=all) to partition p of
// predict-order.
func (s *Server) producePredict(ctx context.Context, p int32, key, eventID string) error {
	_, err := s.cfg.Client.Produce(ctx, &tapesv1.ProduceRequest{Topic: predictOrderTopic, Partition: p, Acks: -1, TimeoutMs: 5000,
		Records: []*tapesv1.Record{{Key: []byte(key), Value: []byte(eventID), TimestampMs: time.Now().UnixMilli(),
			Headers: []*tapesv1.Header{{Key: producer.EventIDHeader, Value: []byte(eventID)}}}}})
	if err != nil {
		return fmt.Errorf("produce %s to %s-%d: %w", key, predictOrderTopic, p, err)
	}
	return nil
}

// processedFirst waits until the consumers' histories show both records
// processed and returns "A1" or "B1", whichever was processed first.
func (s *Server) processedFirst(ctx context.Context, names []string, a1, b1 string) (string, error) {
	for {
		at := map[string]time.Time{}
		for _, n := range names {
			lines, err := consumer.ReadHistory(historyPath(s.cfg.Cluster.Dir(), n))
			if err != nil {
				continue // not written yet
			}
			for _, l := range lines {
				if l.Type == consumer.HistoryRecord && l.EventID != nil && (*l.EventID == a1 || *l.EventID == b1) {
					if _, seen := at[*l.EventID]; !seen {
						at[*l.EventID] = l.At
					}
				}
			}
		}
		if ta, ok := at[a1]; ok {
			if tb, ok := at[b1]; ok {
				if tb.Before(ta) {
					return "B1", nil
				}
				return "A1", nil
			}
		}
		select {
		case <-ctx.Done():
			return "", httpErrorf(http.StatusServiceUnavailable, "A1 and B1 not both processed (%d of 2 seen in the histories): %v", len(at), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
