package client

import (
	"context"
	"fmt"
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
type metadataCache struct {
	mu      sync.Mutex
	brokers map[int32]string
	topics  map[string][]partitionState
	// fetchedAt is the time of the last full refresh; stale forces the next
	// lookup to refresh whatever the age.
	fetchedAt time.Time
	stale     bool
	// gen counts full refreshes, so that a caller that saw the cache stale
	// does not refresh again when another caller just did.
	gen uint64
	// preferred is the address that answered the last metadata request.
	preferred string
}

func (m *metadataCache) init() {
	m.brokers = map[int32]string{}
	m.topics = map[string][]partitionState{}
}

// absorb stores what a Metadata response says. full means the response
// lists every topic (a refresh), so topics it omits are gone. A partition
// whose cached leader came from a hint with a newer epoch keeps it: the
// answering broker may not have heard of the election yet.
func (m *metadataCache) absorb(resp *tapesv1.MetadataResponse, full bool) {
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
	if full {
		m.topics = make(map[string][]partitionState, len(resp.GetTopics()))
	}
	for _, t := range resp.GetTopics() {
		if t.GetError().GetCode() == string(kerr.UnknownTopicOrPartition) {
			delete(m.topics, t.GetName())
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

func (m *metadataCache) generation() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen
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

// dropTopics removes deleted topics.
func (m *metadataCache) dropTopics(names []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range names {
		delete(m.topics, n)
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
// topic. With includeOffsets the answer carries each partition's high
// watermark and log start offset. Per-topic problems are in the response
// (TopicMetadata.Error), not in the error. The answer also updates the
// cache.
func (c *Client) Metadata(ctx context.Context, topics []string, includeOffsets bool) (*tapesv1.MetadataResponse, error) {
	var resp *tapesv1.MetadataResponse
	err := c.anyBroker(ctx, "metadata", func(ctx context.Context, bc tapesv1.BrokerServiceClient) error {
		r, err := bc.Metadata(ctx, &tapesv1.MetadataRequest{Topics: topics, IncludeOffsets: includeOffsets})
		resp = r
		return err
	})
	if err != nil {
		return nil, err
	}
	c.meta.absorb(resp, len(topics) == 0)
	return resp, nil
}

// RefreshMetadata fetches the metadata of every topic into the cache now.
func (c *Client) RefreshMetadata(ctx context.Context) error {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	_, err := c.Metadata(ctx, nil, false)
	return err
}

// refreshSince refreshes unless a refresh completed after the caller saw
// generation gen.
func (c *Client) refreshSince(ctx context.Context, gen uint64) error {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	if c.meta.generation() != gen {
		return nil
	}
	_, err := c.Metadata(ctx, nil, false)
	return err
}

// cached runs lookup against the cache, refreshing first when the cache is
// expired and again when lookup fails on a cache that was not just
// refreshed. When a refresh fails but an older cached answer exists, the
// older answer is used.
func (c *Client) cached(ctx context.Context, lookup func() error) error {
	expired, gen := c.meta.expired(c.cfg.MetadataMaxAge)
	if !expired {
		if err := lookup(); err == nil {
			return nil
		}
	}
	if err := c.refreshSince(ctx, gen); err != nil {
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
	err := c.cached(ctx, func() (err error) {
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
	err = c.cached(ctx, func() (err error) {
		brokerID, addr, err = c.meta.leader(topic, partition)
		return err
	})
	return brokerID, addr, err
}
