package client

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// partitionState is what the cache knows of one partition.
type partitionState struct {
	leader int32 // -1: unknown or none
	epoch  int64
}

// metadataCache holds the cluster view routing relies on. Safe for
// concurrent use.
//
// As in Kafka's clients, the cache holds the topics of interest, not the
// whole cluster: a topic enters interest on its first lookup (Partitions,
// Leader), a refresh asks for exactly those topics (for none, brokers
// only, when there are none), so that what one topic costs never depends
// on how many others the cluster has (issue 15.1). A topic leaves interest
// when it is deleted through this client or the cluster says it does not
// exist; the next lookup brings it back.
type metadataCache struct {
	mu      sync.Mutex
	brokers map[int32]string
	topics  map[string][]partitionState
	// interest is the set of topics a refresh asks for.
	interest map[string]bool
	// fetchedAt is the time of the last refresh; stale forces the next
	// lookup to refresh whatever the age.
	fetchedAt time.Time
	stale     bool
	// gen counts refreshes, so that a caller that saw the cache stale does
	// not refresh again when another caller just did; covered (or
	// coveredAll) is what the last refresh answered for, so that a caller
	// whose topic that refresh did not include still refreshes.
	gen        uint64
	covered    map[string]bool
	coveredAll bool
	// preferred is the address that answered the last metadata request.
	preferred string
}

func (m *metadataCache) init() {
	m.brokers = map[int32]string{}
	m.topics = map[string][]partitionState{}
	m.interest = map[string]bool{}
}

// answerScope says what a Metadata answer covers, for absorb.
type answerScope int

const (
	// answerNamed: topics named by a caller of Metadata, or none (brokers
	// only, for brokerConn and ListGroups): not a refresh.
	answerNamed answerScope = iota
	// answerInterest: a refresh of the topics of interest; the cache then
	// holds exactly the topics the answer lists.
	answerInterest
	// answerAll: every topic of the cluster (Metadata with nil topics);
	// topics it omits are gone.
	answerAll
)

// absorb stores what a Metadata response says. A partition whose cached
// leader came from a hint with a newer epoch keeps it: the answering broker
// may not have heard of the election yet.
func (m *metadataCache) absorb(resp *tapesv1.MetadataResponse, scope answerScope) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(resp.GetBrokers()) > 0 {
		brokers := make(map[int32]string, len(resp.GetBrokers()))
		for _, b := range resp.GetBrokers() {
			brokers[b.GetId()] = b.GetAddress()
		}
		m.brokers = brokers
	}
	old := m.topics
	full := scope != answerNamed
	if full {
		m.topics = make(map[string][]partitionState, len(resp.GetTopics()))
		m.covered = make(map[string]bool, len(resp.GetTopics()))
		m.coveredAll = scope == answerAll
	}
	for _, t := range resp.GetTopics() {
		if full {
			m.covered[t.GetName()] = true
		}
		if t.GetError().GetCode() == string(kerr.UnknownTopicOrPartition) {
			delete(m.topics, t.GetName())
			delete(m.interest, t.GetName())
			continue
		}
		parts := make([]partitionState, len(t.GetPartitions()))
		for i := range parts {
			parts[i].leader = -1
		}
		prev := old[t.GetName()]
		for _, p := range t.GetPartitions() {
			i := int(p.GetPartition())
			if i < 0 || i >= len(parts) {
				continue // a gap in the numbering: not routable
			}
			st := partitionState{leader: p.GetLeaderId(), epoch: p.GetLeaderEpoch()}
			if i < len(prev) && prev[i].leader >= 0 && prev[i].epoch > st.epoch {
				st = prev[i]
			}
			parts[i] = st
		}
		m.topics[t.GetName()] = parts
	}
	if full {
		m.fetchedAt = time.Now()
		m.stale = false
		m.gen++
	}
}

// expired reports whether the cache must be refreshed before it is trusted,
// and the generation the caller saw.
func (m *metadataCache) expired(maxAge time.Duration) (bool, uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stale || m.fetchedAt.IsZero() || time.Since(m.fetchedAt) > maxAge, m.gen
}

// refreshedSince reports whether a refresh that included topic ("": any
// refresh) completed after the caller saw generation gen.
func (m *metadataCache) refreshedSince(gen uint64, topic string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen != gen && (topic == "" || m.coveredAll || m.covered[topic])
}

// addInterest makes the next refreshes ask for topic.
func (m *metadataCache) addInterest(topic string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.interest[topic] = true
}

// interesting lists the topics of interest, sorted.
func (m *metadataCache) interesting() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.interest))
}

// partitions returns the partition count of topic, or
// UNKNOWN_TOPIC_OR_PARTITION.
func (m *metadataCache) partitions(topic string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	parts, ok := m.topics[topic]
	if !ok {
		return 0, kerr.New(kerr.UnknownTopicOrPartition, "topic %q does not exist", topic)
	}
	return len(parts), nil
}

// leader returns the cached leader of a partition and its address.
func (m *metadataCache) leader(topic string, partition int32) (int32, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	parts, ok := m.topics[topic]
	if !ok {
		return -1, "", kerr.New(kerr.UnknownTopicOrPartition, "topic %q does not exist", topic)
	}
	if partition < 0 || int(partition) >= len(parts) {
		return -1, "", kerr.New(kerr.UnknownTopicOrPartition, "partition %d of topic %q does not exist (it has %d)", partition, topic, len(parts))
	}
	st := parts[partition]
	if st.leader < 0 {
		return -1, "", kerr.New(kerr.LeaderNotAvailable, "partition %s-%d has no leader", topic, partition)
	}
	addr, ok := m.brokers[st.leader]
	if !ok || addr == "" {
		return -1, "", kerr.New(kerr.LeaderNotAvailable, "leader %d of %s-%d has no known address", st.leader, topic, partition)
	}
	return st.leader, addr, nil
}

func (m *metadataCache) brokerAddr(id int32) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	addr, ok := m.brokers[id]
	return addr, ok && addr != ""
}

// forget marks a partition's leader unknown and the cache stale.
func (m *metadataCache) forget(topic string, partition int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stale = true
	if parts, ok := m.topics[topic]; ok && partition >= 0 && int(partition) < len(parts) {
		parts[partition].leader = -1
	}
}

// hint applies a NOT_LEADER_OR_FOLLOWER leader hint when it names a leader
// with a newer epoch than the cached one, and reports whether it did.
func (m *metadataCache) hint(topic string, partition int32, d *tapesv1.ErrorDetail) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	parts, ok := m.topics[topic]
	if !ok || partition < 0 || int(partition) >= len(parts) || d.GetLeaderId() < 0 {
		return false
	}
	st := &parts[partition]
	if d.GetLeaderEpoch() <= st.epoch {
		return false
	}
	if d.GetLeaderAddress() != "" {
		m.brokers[d.GetLeaderId()] = d.GetLeaderAddress()
	} else if _, known := m.brokers[d.GetLeaderId()]; !known {
		return false
	}
	st.leader, st.epoch = d.GetLeaderId(), d.GetLeaderEpoch()
	return true
}

// markStale makes the next lookup refresh.
func (m *metadataCache) markStale() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stale = true
}

// dropTopics removes deleted topics, from the cache and from interest.
func (m *metadataCache) dropTopics(names []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range names {
		delete(m.topics, n)
		delete(m.interest, n)
	}
}

// candidates lists the addresses to try for a request any broker answers:
// the one that answered last, then the bootstrap list, then every known
// broker, without repeats.
func (m *metadataCache) candidates(bootstrap []string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	add := func(a string) {
		if a != "" && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	add(m.preferred)
	for _, a := range bootstrap {
		add(a)
	}
	for _, a := range m.brokers {
		add(a)
	}
	return out
}

func (m *metadataCache) setPreferred(addr string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.preferred = addr
}

// unprefer stops preferring addr after it failed.
func (m *metadataCache) unprefer(addr string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.preferred == addr {
		m.preferred = ""
	}
}

// Metadata asks any broker (the last one that answered first, then the
// others in turn) for brokers, topics and partitions; nil topics means every
// topic (for a caller that shows them all, like `cluster topics list`).
// With includeOffsets the answer carries each partition's high watermark
// and log start offset. Per-topic problems are in the response
// (TopicMetadata.Error), not in the error. The answer also updates the
// cache; the named topics do not become topics of interest.
func (c *Client) Metadata(ctx context.Context, topics []string, includeOffsets bool) (*tapesv1.MetadataResponse, error) {
	scope := answerNamed
	if len(topics) == 0 {
		scope = answerAll
	}
	return c.metadata(ctx, &tapesv1.MetadataRequest{Topics: topics, IncludeOffsets: includeOffsets}, scope)
}

// Brokers asks any broker for the brokers and the controller, and no topic
// (MetadataRequest.no_topics): what a caller that needs only addresses
// asks, whatever the number of topics. The answer updates the cache's
// broker addresses.
func (c *Client) Brokers(ctx context.Context) (*tapesv1.MetadataResponse, error) {
	return c.metadata(ctx, &tapesv1.MetadataRequest{NoTopics: true}, answerNamed)
}

// metadata sends req to any broker and absorbs the answer as scope says.
func (c *Client) metadata(ctx context.Context, req *tapesv1.MetadataRequest, scope answerScope) (*tapesv1.MetadataResponse, error) {
	var resp *tapesv1.MetadataResponse
	err := c.anyBroker(ctx, "metadata", func(ctx context.Context, bc tapesv1.BrokerServiceClient) error {
		r, err := bc.Metadata(ctx, req)
		resp = r
		return err
	})
	if err != nil {
		return nil, err
	}
	c.meta.absorb(resp, scope)
	return resp, nil
}

// RefreshMetadata fetches into the cache now the metadata of the topics of
// interest (every topic looked up so far through Partitions or Leader), or
// only the brokers when there are none.
func (c *Client) RefreshMetadata(ctx context.Context) error {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	return c.refresh(ctx)
}

// refreshSince refreshes unless a refresh that included topic completed
// after the caller saw generation gen.
func (c *Client) refreshSince(ctx context.Context, gen uint64, topic string) error {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	if c.meta.refreshedSince(gen, topic) {
		return nil
	}
	return c.refresh(ctx)
}

// refresh asks for the topics of interest. The caller holds refreshMu.
func (c *Client) refresh(ctx context.Context) error {
	topics := c.meta.interesting()
	_, err := c.metadata(ctx, &tapesv1.MetadataRequest{Topics: topics, NoTopics: len(topics) == 0}, answerInterest)
	return err
}

// cached runs lookup (of topic, which becomes a topic of interest first)
// against the cache, refreshing first when the cache is expired and again
// when lookup fails on a cache that was not just refreshed for topic. When
// a refresh fails but an older cached answer exists, the older answer is
// used.
func (c *Client) cached(ctx context.Context, topic string, lookup func() error) error {
	c.meta.addInterest(topic)
	expired, gen := c.meta.expired(c.cfg.MetadataMaxAge)
	if !expired {
		if err := lookup(); err == nil {
			return nil
		}
	}
	if err := c.refreshSince(ctx, gen, topic); err != nil {
		if lookup() == nil {
			return nil
		}
		return err
	}
	return lookup()
}

// Partitions returns the number of partitions of topic, from the cache,
// refreshing it when the topic is missing or the cache expired. A topic the
// cluster does not have is UNKNOWN_TOPIC_OR_PARTITION.
func (c *Client) Partitions(ctx context.Context, topic string) (int, error) {
	var n int
	err := c.cached(ctx, topic, func() (err error) {
		n, err = c.meta.partitions(topic)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("partitions of %q: %w", topic, err)
	}
	return n, nil
}

// Leader returns the leader of a partition and its address, from the cache,
// refreshing it when needed. Errors: UNKNOWN_TOPIC_OR_PARTITION,
// LEADER_NOT_AVAILABLE, or the failure to reach any broker.
func (c *Client) Leader(ctx context.Context, topic string, partition int32) (brokerID int32, addr string, err error) {
	err = c.cached(ctx, topic, func() (err error) {
		brokerID, addr, err = c.meta.leader(topic, partition)
		return err
	})
	return brokerID, addr, err
}
