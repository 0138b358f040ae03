package launch

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A broker starts with BrokerTimerSlack and GOGC=brokerGOGC, and the
// launcher's own threads keep their timer slack.
func TestBrokerTimerSlackAndGOGC(t *testing.T) {
	before, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		t.Skipf("no timer slack here: %v", err)
	}
	dir := t.TempDir()
	c := start(t, fakeOptions(t, dir, 1))
	p, ok := c.Process("broker-1")
	if !ok {
		t.Fatal("no broker-1")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/timerslack_ns", p.PID))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); got != BrokerTimerSlack.Nanoseconds() {
		t.Fatalf("broker's timer slack %d ns, want %d", got, BrokerTimerSlack.Nanoseconds())
	}
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.PID))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("GOGC=%d", brokerGOGC); !strings.Contains("\x00"+string(env), "\x00"+want+"\x00") {
		t.Fatalf("broker's environment lacks %s", want)
	}
	if after, _ := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0); after != before {
		t.Fatalf("this thread's timer slack %d after the start, %d before", after, before)
	}
}
