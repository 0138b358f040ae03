package launch

import (
	"reflect"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/netfault"
)

// TestCutChanges: both ways, every link of the pair is cut; one way (what
// the others send to name), name's link drops the answers and the other's
// link drops the requests. Other links and delays are left alone.
func TestCutChanges(t *testing.T) {
	links := []LinkState{
		{From: "broker-1", To: "broker-2", Delay: 50 * time.Millisecond},
		{From: "broker-1", To: "broker-3"},
		{From: "broker-2", To: "broker-1"},
		{From: "broker-3", To: "broker-1"},
		{From: "producer-1", To: "broker-1"},
	}
	got := CutChanges(links, "broker-1", []string{"broker-2"}, false)
	want := []LinkState{
		{From: "broker-1", To: "broker-2", Mode: netfault.Blackhole, Delay: 50 * time.Millisecond},
		{From: "broker-2", To: "broker-1", Mode: netfault.Blackhole},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("both ways: %+v, want %+v", got, want)
	}
	got = CutChanges(links, "broker-1", []string{"broker-2", "producer-1"}, true)
	want = []LinkState{
		{From: "broker-1", To: "broker-2", Mode: netfault.DropBack, Delay: 50 * time.Millisecond},
		{From: "broker-2", To: "broker-1", Mode: netfault.DropFwd},
		{From: "producer-1", To: "broker-1", Mode: netfault.DropFwd},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("one way: %+v, want %+v", got, want)
	}
	got = DelayChanges(links, "broker-3", 200*time.Millisecond, 10*time.Millisecond)
	want = []LinkState{
		{From: "broker-1", To: "broker-3", Delay: 200 * time.Millisecond, Jitter: 10 * time.Millisecond},
		{From: "broker-3", To: "broker-1", Delay: 200 * time.Millisecond, Jitter: 10 * time.Millisecond},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("delay: %+v, want %+v", got, want)
	}
	if m, err := netfault.ParseMode("drop-forward"); err != nil || m != netfault.DropFwd {
		t.Fatalf("ParseMode = %v, %v", m, err)
	}
	if _, err := netfault.ParseMode("cut"); err == nil {
		t.Fatalf("ParseMode accepted %q", "cut")
	}
}
