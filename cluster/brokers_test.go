package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"github.com/tapes-dev/tapes/internal/clusterfile"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// runBrokers runs `cluster brokers ARGS` and returns stdout and stderr.
func runBrokers(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := (&brokersCommand{stdout: &out, stderr: &errOut}).Run(cmdCtx(t), args)
	return out.String(), errOut.String(), err
}

// `cluster brokers` and `cluster brokers list` print one row per broker,
// sorted by id, with the partitions each leads and holds a replica of.
func TestBrokersList(t *testing.T) {
	b := newMemBroker(t)
	b.brokers = []*tapesv1.BrokerInfo{
		{Id: 4, Address: "127.0.0.1:9404", Alive: true},
		{Id: 1, Address: b.addr, KafkaAddress: "127.0.0.1:9092", Alive: true},
		{Id: 2, Address: "127.0.0.1:9402", KafkaAddress: "127.0.0.1:9093"},
	}
	b.addTopic("orders", 3, 2, nil)
	placement := [][]int32{{1, 2}, {2, 4}, {4, 1}}
	b.replicas = func(_ string, p int32) (int32, []int32) { return placement[p][0], placement[p] }
	header := "ID ADDRESS KAFKA-ADDRESS STATE LEADER REPLICAS"
	want := [][]string{
		{"1", b.addr, "127.0.0.1:9092", "alive", "1", "2"},
		{"2", "127.0.0.1:9402", "127.0.0.1:9093", "down", "1", "2"},
		{"4", "127.0.0.1:9404", "-", "alive", "1", "2"},
	}
	for _, args := range [][]string{{"--bootstrap-server", b.addr}, {"list", "--bootstrap-server", b.addr}} {
		out, _, err := runBrokers(t, args...)
		if err != nil {
			t.Fatalf("brokers %q: %v", args, err)
		}
		got := tableCells(t, out, header)
		if len(got) != len(want) {
			t.Fatalf("brokers %q =\n%s", args, out)
		}
		for i := range want {
			for j := range want[i] {
				if got[i][j] != want[i][j] {
					t.Fatalf("brokers %q row %d = %q, want %q\n%s", args, i, got[i], want[i], out)
				}
			}
		}
	}
	if _, _, err := runBrokers(t, "list", "extra", "--bootstrap-server", b.addr); err == nil {
		t.Fatal("brokers list extra: no error")
	}
	if _, _, err := runBrokers(t, "add-ish"); err == nil {
		t.Fatal("brokers add-ish: no error")
	}
}

// fakeLauncher is the control endpoint of a `cluster up` for brokers add:
// StartBroker registers the broker on the memBroker (at the memBroker's
// own address, alive) as a started brokerd would, and records the call.
type fakeLauncher struct {
	tapesv1.UnimplementedClusterControlServiceServer
	b       *memBroker
	mu      sync.Mutex
	started []int32
}

func (l *fakeLauncher) StartBroker(_ context.Context, req *tapesv1.StartBrokerRequest) (*tapesv1.StartBrokerResponse, error) {
	l.mu.Lock()
	l.started = append(l.started, req.BrokerId)
	l.mu.Unlock()
	l.b.mu.Lock()
	l.b.brokers = append(l.b.brokers, &tapesv1.BrokerInfo{Id: req.BrokerId, Address: l.b.addr, KafkaAddress: "127.0.0.1:9099", Alive: true})
	l.b.mu.Unlock()
	name := fmt.Sprintf("broker-%d", req.BrokerId)
	return &tapesv1.StartBrokerResponse{Process: &tapesv1.ProcessInfo{Name: name, Kind: "broker", BrokerId: req.BrokerId, Pid: 1, State: "running", Address: l.b.addr, Log: name + ".log"}}, nil
}

// `cluster brokers add`: a registered id is DUPLICATE_BROKER_REGISTRATION
// and a removed one INVALID_REQUEST, each naming the id, with nothing
// started; without --id the id is the highest known (here the removed 3)
// plus one, and the new broker's row is printed once it is registered,
// alive and answering.
func TestBrokersAdd(t *testing.T) {
	b := newMemBroker(t)
	b.brokers = []*tapesv1.BrokerInfo{{Id: 1, Address: b.addr, Alive: true}, {Id: 2, Address: "127.0.0.1:9402", Alive: true}}
	b.removed = []int32{3}
	l := &fakeLauncher{b: b}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	tapesv1.RegisterClusterControlServiceServer(srv, l)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	dir := t.TempDir()
	if err := clusterfile.Write(dir, &clusterfile.File{Bootstrap: b.addr, Control: lis.Addr().String(),
		Processes: []clusterfile.Process{{Name: "broker-1", Kind: "broker", ID: 1, Address: b.addr}, {Name: "broker-2", Kind: "broker", ID: 2, Address: "127.0.0.1:9402"}}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ id, want, msg string }{
		{"2", string(kerr.DuplicateBrokerRegistration), "broker id 2 is already registered (at 127.0.0.1:9402); nothing was started"},
		{"3", string(kerr.InvalidRequest), "broker id 3 was removed from the cluster"},
	} {
		_, _, err := runBrokers(t, "add", "--id", tc.id, "--dir", dir)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("brokers add --id %s: %v, want %s %q", tc.id, err, tc.want, tc.msg)
		}
	}
	if len(l.started) != 0 {
		t.Fatalf("refused adds started brokers %v", l.started)
	}
	out, _, err := runBrokers(t, "add", "--dir", dir)
	if err != nil {
		t.Fatalf("brokers add: %v", err)
	}
	if !slices.Equal(l.started, []int32{4}) {
		t.Fatalf("started %v, want broker 4", l.started)
	}
	got := tableCells(t, out, "ID ADDRESS KAFKA-ADDRESS STATE LEADER REPLICAS")
	if len(got) != 1 || !slices.Equal(got[0], []string{"4", b.addr, "127.0.0.1:9099", "alive", "0", "0"}) {
		t.Fatalf("brokers add printed\n%s", out)
	}
	if _, errOut, err := runBrokers(t, "add", "--help"); (err != nil && !errors.Is(err, flag.ErrHelp)) || !strings.Contains(errOut, "brokerd --join") {
		t.Fatalf("brokers add --help: %v\n%s", err, errOut)
	}
}
