package main

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/tapes-dev/tapes/internal/kerr"
)

// TestTopicsReassignThrottleFlag: --throttle reaches the broker as the
// request's throttle_bytes_per_sec (absent: 0, unthrottled) and is echoed;
// a value that is not a number is a usage error that sends nothing; the
// broker's refusal of a negative one comes back with its Kafka name and
// the value, with nothing printed; --help explains the flag.
func TestTopicsReassignThrottleFlag(t *testing.T) {
	b := newMemBroker(t)
	b.addTopic("orders", 1, 3, nil)

	out, _, err := runTopics(t, b.addr, "reassign", "orders", "--partition", "0", "--replicas", "1,2,4", "--throttle", "262144", "--no-wait")
	if err != nil || out != "Reassigning orders-0 from 1,2,3 to 1,2,4, joining replicas throttled to 262144 B/s.\n" {
		t.Fatalf("reassign --throttle 262144 = %q, %v", out, err)
	}
	out, _, err = runTopics(t, b.addr, "reassign", "orders", "--partition", "0", "--replicas", "1,2,4", "--no-wait")
	if err != nil || out != "Reassigning orders-0 from 1,2,3 to 1,2,4.\n" {
		t.Fatalf("reassign without --throttle = %q, %v", out, err)
	}
	if _, _, err := runTopics(t, b.addr, "reassign", "orders", "--partition", "0", "--replicas", "1,2,4", "--throttle", "fast", "--no-wait"); err == nil || !strings.Contains(err.Error(), "throttle") {
		t.Fatalf("--throttle fast = %v, want a flag error naming it", err)
	}
	out, _, err = runTopics(t, b.addr, "reassign", "orders", "--partition", "0", "--replicas", "1,2,4", "--throttle", "-1", "--no-wait")
	if !kerr.Is(err, kerr.InvalidRequest) || !strings.Contains(err.Error(), "-1") || out != "" {
		t.Fatalf("--throttle -1 = %q, %v, want INVALID_REQUEST naming -1 and nothing printed", out, err)
	}
	b.mu.Lock()
	var got []int64
	for _, r := range b.reassigns {
		got = append(got, r.ThrottleBytesPerSec)
	}
	b.mu.Unlock()
	if len(got) != 3 || got[0] != 262144 || got[1] != 0 || got[2] != -1 {
		t.Fatalf("throttles sent %v, want [262144 0 -1]", got)
	}

	var errOut bytes.Buffer
	err = (&topicsCommand{stdout: &bytes.Buffer{}, stderr: &errOut}).Run(cmdCtx(t), []string{"reassign", "--help"})
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("reassign --help = %v", err)
	}
	for _, f := range []string{"-throttle", "bytes per second", "promoted to voter", "-replicas", "-no-wait"} {
		if !strings.Contains(errOut.String(), f) {
			t.Errorf("reassign --help does not explain %s:\n%s", f, errOut.String())
		}
	}
}
