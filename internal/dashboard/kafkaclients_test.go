package dashboard

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/launch"
	"github.com/tapes-dev/tapes/internal/launch/launchtest"
	"github.com/tapes-dev/tapes/internal/netfault"
)

func init() { launchtest.MainIfRequested() }

// TestKafkaClientsListed: a Kafka client under the launcher is listed with
// its pid, its command (bootstrap replaced by its links) and one link per
// broker with the fault on it, as the launcher knows them.
func TestKafkaClientsListed(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c, err := launch.Start(context.Background(), launch.Options{Dir: t.TempDir(), Brokers: 3, BrokerdPath: self, Links: true,
		Env: []string{launchtest.EnvVar + "=1", "GORACE=atexit_sleep_ms=0"}, StopTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.StartProcess(launch.ProcessSpec{Name: "kcat-1", Kind: launch.KafkaKind, Path: "/bin/sleep",
		Args: []string{"600", "{kafka-bootstrap}"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetLink("kcat-1", "broker-2", netfault.Blackhole, 0, 0); err != nil {
		t.Fatal(err)
	}
	var procs []procState
	for _, name := range c.Names() {
		st, err := c.ProcessStatus(name)
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, procState{Name: name, Kind: st.Proc.Kind, State: st.State, PID: st.Proc.PID, LastExit: st.LastExit})
	}
	got := kafkaClients(c, procs, c.Links())
	if len(got) != 1 {
		t.Fatalf("kafka clients %+v, want kcat-1 only", got)
	}
	k := got[0]
	if k.Name != "kcat-1" || k.State != "running" || k.PID <= 0 || len(k.Links) != 3 {
		t.Fatalf("listed %+v", k)
	}
	for i, l := range k.Links {
		wantMode := "pass"
		if l.Broker == "broker-2" {
			wantMode = "blackhole"
		}
		if l.Broker != "broker-"+string(rune('1'+i)) || l.Mode != wantMode {
			t.Errorf("link %d: %+v, want broker-%d %s", i, l, i+1, wantMode)
		}
	}
	var links []string
	for _, l := range c.Links() {
		if l.From == "kcat-1" {
			links = append(links, l.Addr)
		}
	}
	if want := "/bin/sleep 600 " + strings.Join(links, ","); k.Command != want {
		t.Errorf("command %q, want %q", k.Command, want)
	}
}
