package metadata

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/tapes-dev/tapes/internal/kerr"
)

// Topic config keys, as Kafka names them.
const (
	ConfigMinInsyncReplicas = "min.insync.replicas"
	ConfigRetentionMs       = "retention.ms"
	ConfigRetentionBytes    = "retention.bytes"
	ConfigSegmentBytes      = "segment.bytes"
	ConfigMaxMessageBytes   = "max.message.bytes"
)

// TopicConfig is a topic's configuration with Kafka's defaults filled in.
type TopicConfig struct {
	MinInsyncReplicas int   // default 1
	RetentionMs       int64 // default 7 days; -1 keeps records forever
	RetentionBytes    int64 // default -1 (no size limit)
	SegmentBytes      int64 // default 1 GiB
	MaxMessageBytes   int64 // largest batch a Produce may carry; default 1048588
}

// DefaultTopicConfig returns Kafka's defaults.
func DefaultTopicConfig() TopicConfig {
	return TopicConfig{MinInsyncReplicas: 1, RetentionMs: 7 * 24 * 3600 * 1000, RetentionBytes: -1,
		SegmentBytes: 1 << 30, MaxMessageBytes: 1048588}
}

// configLimits: key -> minimum allowed value.
var configLimits = map[string]int64{
	ConfigMinInsyncReplicas: 1,
	ConfigRetentionMs:       -1,
	ConfigRetentionBytes:    -1,
	ConfigSegmentBytes:      1024,
	ConfigMaxMessageBytes:   0,
}

// ParseTopicConfig validates configs and returns them typed. An unknown key,
// a non-integer or a value below the key's minimum is INVALID_CONFIG naming
// the key and the value.
func ParseTopicConfig(configs map[string]string) (TopicConfig, error) {
	c := DefaultTopicConfig()
	keys := make([]string, 0, len(configs))
	for k := range configs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := configs[k]
		min, known := configLimits[k]
		if !known {
			return c, kerr.New(kerr.InvalidConfig, "unknown topic config %q (known: %s)", k, knownConfigs())
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return c, kerr.New(kerr.InvalidConfig, "%s=%q is not an integer", k, v)
		}
		if n < min {
			return c, kerr.New(kerr.InvalidConfig, "%s=%d is below the minimum %d", k, n, min)
		}
		switch k {
		case ConfigMinInsyncReplicas:
			c.MinInsyncReplicas = int(n)
		case ConfigRetentionMs:
			c.RetentionMs = n
		case ConfigRetentionBytes:
			c.RetentionBytes = n
		case ConfigSegmentBytes:
			c.SegmentBytes = n
		case ConfigMaxMessageBytes:
			c.MaxMessageBytes = n
		}
	}
	return c, nil
}

func knownConfigs() string { return strings.Join(TopicConfigKeys(), ", ") }

// MaxTopicNameLength is Kafka's limit.
const MaxTopicNameLength = 249

// ValidateTopicName applies Kafka's rules: 1 to 249 characters from
// [a-zA-Z0-9._-], and not "." or "..".
func ValidateTopicName(name string) error {
	if name == "" {
		return kerr.New(kerr.InvalidTopic, "topic name is empty")
	}
	if name == "." || name == ".." {
		return kerr.New(kerr.InvalidTopic, "topic name %q is not allowed", name)
	}
	if len(name) > MaxTopicNameLength {
		return kerr.New(kerr.InvalidTopic, "topic name is %d characters long, the limit is %d", len(name), MaxTopicNameLength)
	}
	for _, r := range name {
		ok := r == '.' || r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
		if !ok {
			return kerr.New(kerr.InvalidTopic, "topic name %q contains %q; allowed are ASCII letters, digits, '.', '_' and '-'", name, r)
		}
	}
	return nil
}

// CollisionError is the INVALID_TOPIC_EXCEPTION for a name that collides
// with an existing topic in metric names ('.' and '_' both become '_').
func CollisionError(name, existing string) error {
	return kerr.New(kerr.InvalidTopic, "topic %q collides with existing topic %q: '.' and '_' are the same in metric names", name, existing)
}

// Assign spreads partitions over brokers: partition p's replicas are the rf
// brokers starting at (start+p) in id order, so preferred leaders (the first
// replica) rotate over the brokers and every broker holds about the same
// number of replicas. start varies per topic so that leaders of small topics
// do not all land on the first broker.
func Assign(brokers []BrokerID, partitions, rf int, start int) ([][]BrokerID, error) {
	if partitions <= 0 {
		return nil, kerr.New(kerr.InvalidPartitions, "partition count %d: it must be at least 1", partitions)
	}
	if rf <= 0 {
		return nil, kerr.New(kerr.InvalidReplicationFactor, "replication factor %d: it must be at least 1", rf)
	}
	if rf > len(brokers) {
		return nil, kerr.New(kerr.InvalidReplicationFactor, "replication factor %d is larger than the %d available brokers", rf, len(brokers))
	}
	sorted := append([]BrokerID(nil), brokers...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	out := make([][]BrokerID, partitions)
	for p := range out {
		r := make([]BrokerID, rf)
		for i := range r {
			r[i] = sorted[(start+p+i)%len(sorted)]
		}
		out[p] = r
	}
	return out, nil
}

// String renders a broker id list as Kafka's tools do: "1,2,3".
func JoinIDs(ids []BrokerID) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprint(id)
	}
	return strings.Join(parts, ",")
}

// TopicConfigKeys lists the topic config keys tapes knows, sorted (what
// ParseTopicConfig accepts; Kafka's DescribeConfigs lists each).
func TopicConfigKeys() []string {
	keys := make([]string, 0, len(configLimits))
	for k := range configLimits {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Value is key's value in c as ParseTopicConfig reads it back (decimal);
// ok is false for a key tapes does not know.
func (c TopicConfig) Value(key string) (v string, ok bool) {
	var n int64
	switch key {
	case ConfigMinInsyncReplicas:
		n = int64(c.MinInsyncReplicas)
	case ConfigRetentionMs:
		n = c.RetentionMs
	case ConfigRetentionBytes:
		n = c.RetentionBytes
	case ConfigSegmentBytes:
		n = c.SegmentBytes
	case ConfigMaxMessageBytes:
		n = c.MaxMessageBytes
	default:
		return "", false
	}
	return strconv.FormatInt(n, 10), true
}
