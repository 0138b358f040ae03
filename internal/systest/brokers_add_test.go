package systest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/clusterfile"
	"github.com/tapes-dev/tapes/internal/eventually"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/launch"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// TestBrokersAdd: under a real `cluster up` of 3 brokers, `cluster brokers
// add` starts a 4th (brokerd --join, outside every other broker's
// --peers), which registers, is added to the controller quorum and shows
// alive in `cluster brokers`; cluster.json lists it. Adding a taken id is
// refused with DUPLICATE_BROKER_REGISTRATION and nothing is started. Under
// acks=all load a partition is then reassigned onto it: every acknowledged
// record reads back at its offset, and the new broker's replica holds the
// whole log. Stopping `cluster up` stops the added broker too.
func TestBrokersAdd(t *testing.T) {
	dir := t.TempDir()
	exited := startClusterUp(t, dir)
	if out, err := clusterCmd(t, dir, "topics", "create", "grow", "--partitions", "1", "--replication-factor", "3", "--config", "min.insync.replicas=2"); err != nil {
		t.Fatalf("create grow: %v\n%s", err, out)
	}
	began := time.Now()
	out, err := clusterCmd(t, dir, "brokers", "add", "--wait-timeout", "90s")
	if err != nil {
		t.Fatalf("brokers add: %v\n%s", err, out)
	}
	t.Logf("cluster brokers add (%v):\n%s", time.Since(began).Round(time.Millisecond), out)
	f, err := clusterfile.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	var added clusterfile.Process
	for _, p := range f.Brokers() {
		if p.ID == 4 {
			added = p
		}
	}
	if added.Name != "broker-4" || added.PID == 0 || added.KafkaAddress == "" || !strings.Contains(f.KafkaBootstrap, added.KafkaAddress) || !strings.Contains(f.Bootstrap, added.Address) {
		t.Fatalf("cluster.json after the add: broker 4 = %+v, bootstrap %q, kafka_bootstrap %q", added, f.Bootstrap, f.KafkaBootstrap)
	}
	var row []string
	for _, l := range strings.Split(out, "\n") {
		if fs := strings.Fields(l); len(fs) == 6 && fs[0] == "4" {
			row = fs
		}
	}
	if want := []string{"4", added.Address, added.KafkaAddress, "alive", "0", "0"}; !slices.Equal(row, want) {
		t.Fatalf("brokers add printed row %q, want %q\n%s", row, want, out)
	}
	if ids := brokerRows(t, dir); ids != "1 alive,2 alive,3 alive,4 alive" {
		t.Fatalf("cluster brokers after the add: %s", ids)
	}
	for _, taken := range []string{"4", "2"} {
		out, err := clusterCmd(t, dir, "brokers", "add", "--id", taken)
		if err == nil || !strings.Contains(out, string(kerr.DuplicateBrokerRegistration)) || !strings.Contains(out, "broker id "+taken+" is already registered") || !strings.Contains(out, "nothing was started") {
			t.Fatalf("brokers add --id %s (taken): %v\n%s", taken, err, out)
		}
	}
	if g, err := clusterfile.Read(dir); err != nil || len(g.Processes) != len(f.Processes) {
		t.Fatalf("cluster.json changed by refused adds: %v, %d processes, was %d", err, len(g.Processes), len(f.Processes))
	}

	cl, err := client.New(client.Config{Bootstrap: strings.Split(f.Bootstrap, ","), MetadataMaxAge: 200 * time.Millisecond, RequestTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	e := &testcluster.Env{T: t, Client: cl, Dir: dir}
	pm := e.Partition("grow", 0)
	target := append(slices.Clone(pm.Replicas[:2]), 4)
	ids := make([]string, len(target))
	for i, id := range target {
		ids[i] = strconv.Itoa(int(id))
	}

	stopLoad := acksAllLoad(cl, "grow", 0)
	time.Sleep(2 * time.Second)
	out, err = clusterCmd(t, dir, "topics", "reassign", "grow", "--partition", "0", "--replicas", strings.Join(ids, ","), "--wait-timeout", "120s")
	if err != nil {
		t.Fatalf("reassign onto broker 4: %v\n%s", err, out)
	}
	t.Logf("cluster topics reassign:\n%s", out)
	time.Sleep(2 * time.Second)
	acks := stopLoad()
	n := len(acks)
	if n < 10 {
		t.Fatalf("only %d batches acknowledged under the reassignment", n)
	}
	recs := e.ReadAll("grow", 0)
	checkAcked(t, "after the move onto broker 4", acks, recs)
	end := recs[len(recs)-1].Offset + 1
	t.Logf("%d batches of 20 acknowledged under the reassignment; log end %d", n, end)
	eventually.True(t, 60*time.Second, "broker 4's replica of grow-0 to hold the whole log", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		dr, err := cl.DescribeReplicas(ctx, 4)
		if err != nil {
			return false
		}
		for _, r := range dr.Replicas {
			if r.Topic == "grow" && r.Partition == 0 {
				return r.LogEndOffset >= end && r.HighWatermark >= end
			}
		}
		return false
	})
	if ids := brokerRows(t, dir); !strings.Contains(ids, "4 alive") {
		t.Fatalf("cluster brokers after the move: %s", ids)
	}

	// Stopping cluster up stops the added broker.
	pid, alive, _ := launch.Launcher(dir)
	if !alive {
		t.Fatalf("the launcher of %s is not running", dir)
	}
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatal("cluster up did not exit within 60s of SIGINT")
	}
	if err := syscall.Kill(added.PID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("broker 4 (pid %d) after cluster up stopped: kill -0 = %v, want ESRCH", added.PID, err)
	}

	// A later cluster up on the directory starts the four, the added one
	// among the others' --peers, and the records are still there.
	startClusterUp(t, dir, "--brokers", "4")
	eventually.True(t, 60*time.Second, "the four brokers alive after the restart", func() bool {
		out, err := clusterCmd(t, dir, "brokers")
		return err == nil && strings.Count(out, " alive ") == 4
	})
	checkAcked(t, "after the restart", acks, e.ReadAll("grow", 0))
}

// ackedBatch is one batch an acks=all produce acknowledged.
type ackedBatch struct {
	base   int64
	values []string
}

// acksAllLoad writes batches of 20 records to topic-p with acks=all, one
// after the other, until the function it returns is called; that waits for
// the batch in flight and returns every acknowledged one.
func acksAllLoad(cl *client.Client, topic string, p int32) (stop func() []ackedBatch) {
	var (
		mu   sync.Mutex
		acks []ackedBatch
		quit = make(chan struct{})
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-quit:
				return
			default:
			}
			recs := testcluster.Records(fmt.Sprintf("b%05d", i), 0, 20)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			resp, err := cl.Produce(ctx, &tapesv1.ProduceRequest{Topic: topic, Partition: p, Acks: -1, Records: recs})
			cancel()
			if err == nil {
				mu.Lock()
				acks = append(acks, ackedBatch{resp.BaseOffset, testcluster.Values(recs)})
				mu.Unlock()
			}
		}
	}()
	return func() []ackedBatch {
		close(quit)
		<-done
		mu.Lock()
		defer mu.Unlock()
		return acks
	}
}

// checkAcked fails t unless every acknowledged record reads back at its
// offset in recs.
func checkAcked(t *testing.T, when string, acks []ackedBatch, recs []*tapesv1.Record) {
	t.Helper()
	byOffset := map[int64]string{}
	for _, r := range recs {
		byOffset[r.Offset] = string(r.Value)
	}
	for _, a := range acks {
		for i, v := range a.values {
			if got := byOffset[a.base+int64(i)]; got != v {
				t.Fatalf("%s: offset %d holds %q, want the acknowledged %q", when, a.base+int64(i), got, v)
			}
		}
	}
}
