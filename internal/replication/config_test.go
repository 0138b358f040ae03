package replication

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestRaftTimingsValidate(t *testing.T) {
	if err := DefaultRaftTimings().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	cases := []struct {
		name string
		edit func(*RaftTimings)
	}{
		{"lease above heartbeat timeout", func(r *RaftTimings) { r.LeaderLeaseTimeout = r.HeartbeatTimeout + time.Millisecond }},
		{"election below heartbeat timeout", func(r *RaftTimings) { r.ElectionTimeout = r.HeartbeatTimeout / 2 }},
		{"negative linger", func(r *RaftTimings) { r.HeartbeatLinger = -time.Millisecond }},
		// 500 ms lease minus two 50 ms heartbeat periods, halved: 200 ms.
		{"linger past the lease", func(r *RaftTimings) { halfSecond(r); r.HeartbeatLinger = 201 * time.Millisecond }},
		{"no commit timeout", func(r *RaftTimings) { r.CommitTimeout = 0 }},
	}
	for _, c := range cases {
		r := DefaultRaftTimings()
		c.edit(&r)
		if err := r.Validate(); !errors.Is(err, ErrBadTiming) {
			t.Errorf("%s: got %v, want ErrBadTiming", c.name, err)
		}
	}
	r := DefaultRaftTimings()
	halfSecond(&r)
	r.HeartbeatLinger = 200 * time.Millisecond
	if err := r.Validate(); err != nil {
		t.Errorf("linger at the bound: %v", err)
	}
	r.HeartbeatLinger = 0
	if err := r.Validate(); err != nil {
		t.Errorf("no linger: %v", err)
	}
}

// halfSecond sets 500 ms heartbeat, election and lease timeouts.
func halfSecond(r *RaftTimings) {
	r.HeartbeatTimeout, r.ElectionTimeout, r.LeaderLeaseTimeout = 500*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond
}

func TestParseRaftLogKind(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want RaftLogKind
		ok   bool
	}{{"wal", RaftLogWAL, true}, {"bolt", RaftLogBolt, true}, {"", "", false}, {"WAL", "", false}, {"boltdb", "", false}} {
		got, err := ParseRaftLogKind(tc.in)
		if got != tc.want || (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrBadRaftLog)) {
			t.Errorf("ParseRaftLogKind(%q) = %q, %v", tc.in, got, err)
		}
		if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.in)) {
			t.Errorf("error %q does not name the value %q", err, tc.in)
		}
	}
}
