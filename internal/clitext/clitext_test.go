package clitext

import (
	"testing"
	"time"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

func TestLagTime(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second:                          "0s",
		0:                                     "0s",
		350 * time.Millisecond:                "350ms",
		12340 * time.Millisecond:              "12.3s",
		time.Hour + 2*time.Minute + 5:         "1h2m0s",
		3*time.Minute + 1600*time.Millisecond: "3m2s",
	} {
		if got := LagTime(d); got != want {
			t.Errorf("LagTime(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestAssignment(t *testing.T) {
	got := Assignment([]*tapesv1.TopicPartitions{{Topic: "pay", Partitions: []int32{2}}, {Topic: "orders", Partitions: []int32{1, 0}}, {Topic: "none"}})
	if got != "orders(0,1),pay(2)" {
		t.Fatalf("Assignment = %q", got)
	}
	if got := Assignment(nil); got != "-" {
		t.Fatalf("Assignment(nil) = %q", got)
	}
}
