package broker

import (
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/replication"
)

func validConfig(t *testing.T) Config {
	c := DefaultConfig()
	c.ID = 1
	c.DataDir = t.TempDir()
	c.Advertise = "127.0.0.1:1"
	c.Peers = map[metadata.BrokerID]string{1: "127.0.0.1:1"}
	return c
}

// TestValidateConfigKeepsTheCause: a bad Raft timing is both ErrTiming and
// replication.ErrBadTiming to errors.Is (issue 11.4), and a partition
// budget below 1 is ErrBudget.
func TestValidateConfigKeepsTheCause(t *testing.T) {
	c := validConfig(t)
	if err := ValidateConfig(&c); err != nil {
		t.Fatal(err)
	}
	c.Raft.LeaderLeaseTimeout = 2 * c.Raft.HeartbeatTimeout
	err := ValidateConfig(&c)
	if !errors.Is(err, ErrTiming) || !errors.Is(err, replication.ErrBadTiming) {
		t.Fatalf("lease above heartbeat timeout: %v, want ErrTiming wrapping replication.ErrBadTiming", err)
	}
	c = validConfig(t)
	c.MaxPartitionsPerBroker = 0
	if err := ValidateConfig(&c); !errors.Is(err, ErrBudget) {
		t.Fatalf("budget 0: %v, want ErrBudget", err)
	}
}

// stuckPeer answers BrokerHeartbeat only when the caller gives up.
type stuckPeer struct {
	tapesv1.UnimplementedControllerServiceServer
	called chan struct{}
}

func (p *stuckPeer) BrokerHeartbeat(ctx context.Context, _ *tapesv1.BrokerHeartbeatRequest) (*tapesv1.BrokerHeartbeatResponse, error) {
	select {
	case p.called <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestShutdownWaitsForHeartbeats (issue 11.4): Shutdown returns only after
// the goroutines sending heartbeats to peers have ended, even when a peer
// holds the call open.
func TestShutdownWaitsForHeartbeats(t *testing.T) {
	peerLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	peer := &stuckPeer{called: make(chan struct{}, 1)}
	srv := grpc.NewServer()
	tapesv1.RegisterControllerServiceServer(srv, peer)
	go srv.Serve(peerLis)
	defer srv.Stop()

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := validConfig(t)
	c.Advertise = lis.Addr().String()
	c.Peers = map[metadata.BrokerID]string{1: c.Advertise, 2: peerLis.Addr().String()}
	// A heartbeat may take up to an interval: long, so that it is still
	// in flight when Shutdown runs.
	c.HeartbeatInterval, c.SessionTimeout = time.Minute, 2*time.Minute
	b, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	go b.Serve(lis)
	select {
	case <-peer.called:
	case <-time.After(30 * time.Second):
		t.Fatal("no heartbeat reached the peer")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// A goroutine past its wg.Done may still be on its way out (CI caught
	// one at the closure's last line), so what must be gone is the work
	// that Done covers: a heartbeat call, or the loop's sleep.
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	for _, f := range []string{"(*Broker).sendHeartbeat(", "(*Broker).sleep("} {
		if strings.Contains(stacks, f) {
			t.Fatalf("a heartbeat goroutine outlived Shutdown (in %s):\n%s", f, stacks)
		}
	}
}

// TestMetadataFitsTheBudget: what one partition replica adds to a Metadata
// answer stays within maxPartitionMetadataBytes in the worst case (longest
// name, largest ids, epochs and offsets, no leader), so that ValidateConfig's
// bound (budget x brokers x that <= a gRPC client's 4 MiB) holds.
func TestMetadataFitsTheBudget(t *testing.T) {
	name := strings.Repeat("x", metadata.MaxTopicNameLength)
	for _, rf := range []int{1, 3} {
		const n = 2000
		tp := &metadata.Topic{Name: name, ID: 1 << 62}
		for range n {
			reps := make([]metadata.BrokerID, rf)
			for i := range reps {
				reps[i] = metadata.BrokerID(1<<31 - 1 - i)
			}
			tp.Partitions = append(tp.Partitions, metadata.PartitionState{Replicas: reps, ISR: reps, Leader: -1, Epoch: 1 << 62})
		}
		per := proto.Size(&tapesv1.MetadataResponse{Topics: []*tapesv1.TopicMetadata{topicMetadata(tp)}}) / (n * rf)
		t.Logf("replication factor %d: %d bytes per replica", rf, per)
		if per > maxPartitionMetadataBytes {
			t.Errorf("replication factor %d: %d bytes per replica, over maxPartitionMetadataBytes (%d)", rf, per, maxPartitionMetadataBytes)
		}
	}
	c := validConfig(t)
	c.Peers = map[metadata.BrokerID]string{1: "a:1", 2: "b:1", 3: "c:1"}
	c.MaxPartitionsPerBroker = 10000
	if err := ValidateConfig(&c); !errors.Is(err, ErrBudget) {
		t.Fatalf("budget whose Metadata would exceed 4 MiB: %v, want ErrBudget", err)
	}
}
