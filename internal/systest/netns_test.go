package systest

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/clusterfile"
	"github.com/tapes-dev/tapes/internal/eventually"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/netns"
	"github.com/tapes-dev/tapes/internal/report"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// TestIPPartitionBehavesAsLinkCut runs acks1-leader-isolation and
// acksall-leader-isolation with the brokers on hosts of their own (three
// network namespaces joined by a bridge; the producer and the observer in
// this test's namespace reach them over it), the leader's isolation made by
// dropping its packets to and from the other hosts (nftables) instead of
// cutting links. As with the link cut: a broker other than the isolated one
// leads orders-0 before the heal (the majority elected it); with acks=1 the
// checker names acknowledged records that are lost (the minority-side
// leader acknowledged them, then lost its leadership and truncated them);
// with acks=all nothing is lost. Root only; nothing is left behind.
func TestIPPartitionBehavesAsLinkCut(t *testing.T) {
	if err := netns.Available(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	t.Cleanup(func() {
		if left := netns.Leftovers(context.Background(), netns.DefaultPrefix); len(left) > 0 {
			t.Errorf("left behind (now removed): %v", left)
		}
	})
	for _, c := range []struct {
		name  string
		check func(t *testing.T, r check.Result)
	}{
		{"acks1-leader-isolation", func(t *testing.T, r check.Result) {
			if r.Counts[check.LostWrite] == 0 || len(r.Anomalies) == 0 || len(r.Anomalies[0].Offsets) == 0 {
				t.Fatalf("acks=1 across a dropped-packet partition: no lost write named (%v)", r.Counts)
			}
		}},
		{"acksall-leader-isolation", func(t *testing.T, r check.Result) {
			if r.Acked == 0 {
				t.Fatal("nothing was acknowledged: the run proves nothing")
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), c.name)
			o := runExperimentIn(t, c.name, 0, out, true)
			c.check(t, o.Result)
			isolated, elected := leadersDuringIsolation(t, filepath.Join(out, "events.jsonl"))
			if len(elected) == 0 {
				t.Fatalf("no broker but %s led orders-0 while it was isolated", isolated)
			}
			t.Logf("isolated %s; leaders elected meanwhile: %v", isolated, elected)
		})
	}
}

// leadersDuringIsolation reads an experiment's timeline: the broker whose
// host was isolated, and the other brokers seen leading orders-0 between
// the fault's start and end.
func leadersDuringIsolation(t *testing.T, path string) (string, []string) {
	t.Helper()
	events, err := report.ReadEvents(path)
	if err != nil {
		t.Fatal(err)
	}
	var isolated string
	var start, end time.Time
	for _, e := range events {
		switch {
		case e.Type == report.EventFaultStart && strings.HasPrefix(e.What, "isolate "):
			isolated, start = strings.Fields(e.What)[1], e.At
		case e.Type == report.EventFaultEnd && isolated != "" && end.IsZero():
			end = e.At
		}
	}
	if isolated == "" || end.IsZero() {
		t.Fatalf("%s: no isolation fault with its end", path)
	}
	var elected []string
	for _, e := range events {
		name := fmt.Sprintf("broker-%d", e.Leader)
		if e.Type == report.EventLeader && e.Topic == "orders" && e.Partition == 0 && e.Leader > 0 &&
			name != isolated && e.At.After(start) && e.At.Before(end) {
			elected = append(elected, name)
		}
	}
	return isolated, elected
}

// TestClusterNetnsCLI drives `cluster up --netns` (what make cluster-netns
// runs) through the chaos commands: each broker runs in its own namespace
// on its own address; `ip-isolate --leader-of` makes the isolated leader
// refuse acks=1 writes sent to it directly (it lost its leadership) while
// another broker leads; `status` shows the drops, `heal` removes them and
// the broker rejoins the ISR; `ip-delay` applies netem or says why it
// cannot; Ctrl-C (SIGINT) removes every namespace, veth and bridge.
func TestClusterNetnsCLI(t *testing.T) {
	if err := netns.Available(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	dir := t.TempDir()
	var tag string
	t.Cleanup(func() { // after cluster up's own cleanup (SIGINT) below
		if tag == "" {
			return
		}
		names, _ := netns.Namespaces(context.Background())
		links, _ := netns.Links(context.Background())
		for _, n := range append(names, links...) {
			if strings.Contains(n, "-"+tag+"-") || strings.HasPrefix(n, "tp"+tag) {
				t.Errorf("%s left behind after Ctrl-C (removing it)", n)
				if strings.HasPrefix(n, "tp") {
					exec.Command("ip", "link", "del", n).Run()
				} else {
					exec.Command("ip", "netns", "del", n).Run()
				}
			}
		}
	})
	startClusterUp(t, dir, "--netns", "--netns-subnet", "auto")
	f, err := clusterfile.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	brokers := f.Brokers()
	if len(brokers) != 3 {
		t.Fatalf("cluster.json lists %d brokers", len(brokers))
	}
	tag = strings.SplitN(brokers[0].Netns, "-", 3)[1]
	for _, b := range brokers {
		ap, err := netip.ParseAddrPort(b.Address)
		if err != nil || !ap.Addr().IsPrivate() || ap.Addr().IsLoopback() || b.Netns == "" {
			t.Fatalf("%s at %q in namespace %q: want its own private address", b.Name, b.Address, b.Netns)
		}
		out, err := exec.Command("ip", "netns", "identify", strconv.Itoa(b.PID)).Output()
		if err != nil || strings.TrimSpace(string(out)) != b.Netns {
			t.Fatalf("%s (pid %d) runs in namespace %q (%v), want %s", b.Name, b.PID, strings.TrimSpace(string(out)), err, b.Netns)
		}
	}
	if code, out := chaosCmd(t, dir, "status"); code != 0 || !strings.Contains(out, "3 hosts") {
		t.Fatalf("status: %d\n%s", code, out)
	}

	cl, err := client.New(client.Config{Bootstrap: strings.Split(f.Bootstrap, ","), MetadataMaxAge: 200 * time.Millisecond, AddressMap: map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	var old int32
	eventually.Nil(t, 30*time.Second, "a leader of orders-0", func() error {
		var err error
		old, _, err = cl.Leader(ctx, "orders", 0)
		return err
	})
	code, out := chaosCmd(t, dir, "ip-isolate", "--leader-of", "orders/0")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("broker-%d's host drops every packet", old)) {
		t.Fatalf("ip-isolate: %d\n%s", code, out)
	}
	// The isolated leader is still reachable from here (the bridge is not
	// dropped): once its lease runs out it refuses writes as a follower.
	bc, err := cl.Broker(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 60*time.Second, fmt.Sprintf("broker-%d (isolated) refuses acks=1 with %s", old, kerr.NotLeaderOrFollower), func() bool {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := bc.Produce(pctx, &tapesv1.ProduceRequest{Topic: "orders", Partition: 0, Acks: 1, Records: testcluster.Records("minority", 0, 1), TimeoutMs: 2000})
		return kerr.Is(kerr.FromStatus(err), kerr.NotLeaderOrFollower)
	})
	eventually.True(t, 60*time.Second, "another broker leads orders-0", func() bool {
		for id := int32(1); id <= 3; id++ {
			if id == old {
				continue
			}
			b, err := cl.Broker(ctx, id)
			if err != nil {
				continue
			}
			mctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			md, err := b.Metadata(mctx, &tapesv1.MetadataRequest{Topics: []string{"orders"}})
			cancel()
			if err == nil && len(md.Topics) == 1 && len(md.Topics[0].Partitions) > 0 {
				if l := md.Topics[0].Partitions[0].LeaderId; l > 0 && l != old {
					return true
				}
			}
		}
		return false
	})
	if code, out := chaosCmd(t, dir, "status"); code != 0 || strings.Count(out, "broker-") < 6 || !strings.Contains(out, fmt.Sprintf("broker-%d  ", old)) {
		t.Fatalf("status after ip-isolate: %d\n%s", code, out)
	} else if !hostDrops(out, old) {
		t.Fatalf("status after ip-isolate does not show broker-%d's drops:\n%s", old, out)
	}
	if code, out := chaosCmd(t, dir, "ip-delay", "broker-1", "--ms", "20"); code != 0 && !strings.Contains(out, "netem") {
		t.Fatalf("ip-delay: %d\n%s", code, out)
	}
	if code, out := chaosCmd(t, dir, "heal"); code != 0 || !strings.Contains(out, "no host drops or delays packets") {
		t.Fatalf("heal: %d\n%s", code, out)
	}
	if code, out := chaosCmd(t, dir, "status"); code != 0 || hostDrops(out, old) || strings.Contains(out, "netem") {
		t.Fatalf("status after heal: %d\n%s", code, out)
	}
	eventually.True(t, 90*time.Second, fmt.Sprintf("broker-%d back in the ISR of orders-0", old), func() bool {
		md, err := cl.Metadata(ctx, []string{"orders"}, true)
		return err == nil && len(md.Topics) == 1 && len(md.Topics[0].Partitions) > 0 && len(md.Topics[0].Partitions[0].Isr) == 3
	})
	if code, out := chaosCmd(t, dir, "ip-partition", "broker-1", "--from", "nobody"); code != 2 || !strings.Contains(out, `no host "nobody"`) {
		t.Fatalf("ip-partition --from nobody: %d\n%s", code, out)
	}

	// Ctrl-C: the cleanup above checks that nothing of tag is left.
}

// hostDrops reports whether chaos status shows drops on broker id's host.
func hostDrops(status string, id int32) bool {
	for _, line := range strings.Split(status, "\n") {
		f := strings.Fields(line)
		if len(f) == 6 && f[0] == fmt.Sprintf("broker-%d", id) && f[1] != "NETNS" {
			return f[3] != "-" || f[4] != "-"
		}
	}
	return false
}
