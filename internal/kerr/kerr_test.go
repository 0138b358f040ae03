package kerr

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestStatusRoundTrip(t *testing.T) {
	sent := NotLeader(2, "127.0.0.1:9092", 7, "partition %s-%d", "orders", 0)
	got := FromStatus(ToStatus(fmt.Errorf("produce: %w", sent)))
	ke, ok := As(got)
	if !ok {
		t.Fatalf("FromStatus(ToStatus(x)) = %v, want *Error", got)
	}
	if ke.Code() != NotLeaderOrFollower || ke.Detail.LeaderId != 2 || ke.Detail.LeaderAddress != "127.0.0.1:9092" || ke.Detail.LeaderEpoch != 7 {
		t.Fatalf("detail lost in transit: %+v", ke.Detail)
	}
	if !ke.Detail.Retriable {
		t.Fatalf("NOT_LEADER_OR_FOLLOWER must be retriable")
	}
}

func TestPlainErrorsBecomeKafkaNames(t *testing.T) {
	if c := CodeOf(FromStatus(ToStatus(errors.New("disk on fire")))); c != UnknownServerError {
		t.Fatalf("plain error became %q, want %q", c, UnknownServerError)
	}
	if c := CodeOf(FromStatus(ToStatus(fmt.Errorf("wait: %w", context.DeadlineExceeded)))); c != RequestTimedOut {
		t.Fatalf("deadline became %q, want %q", c, RequestTimedOut)
	}
	if CodeOf(errors.New("x")) != "" || Is(nil, UnknownServerError) {
		t.Fatalf("an error without a Kafka name must have no code")
	}
}

func TestOutOfRangeCarriesBounds(t *testing.T) {
	ke, _ := As(FromStatus(ToStatus(OutOfRange(3, 10, 20))))
	if ke.Code() != OffsetOutOfRange || ke.Detail.LogStartOffset != 10 || ke.Detail.HighWatermark != 20 {
		t.Fatalf("got %+v", ke.Detail)
	}
}
