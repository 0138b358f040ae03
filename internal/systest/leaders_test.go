package systest

import (
	"testing"
)

// TestNewTopicFirstLeadersArePreferred: a new topic's partitions are first
// led by their preferred replicas (the first of each assignment), as
// Kafka's controller makes them, so that no broker hands leadership over
// in the middle of the topic's first writes.
func TestNewTopicFirstLeadersArePreferred(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("fresh", 6, 3, nil) // waits until the preferred replicas lead
	for p := int32(0); p < 6; p++ {
		md := e.Partition("fresh", p)
		if md.LeaderId != md.Replicas[0] {
			t.Errorf("partition %d led by %d, preferred %d", p, md.LeaderId, md.Replicas[0])
		}
	}
	for _, b := range e.Brokers() {
		if e.LogContains(b.Name, "handing leadership to the preferred replica") {
			t.Errorf("%s handed leadership over: a non-preferred replica won a first election", b.Name)
		}
	}
}
