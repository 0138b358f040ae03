package broker

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/connectivity"

	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/replication"
)

// watchPeers follows the connection to every other broker. When a
// connection that was up fails to come back because the peer's port refuses
// it (its process is gone: SIGKILL, crash, shutdown), peerGone starts the
// elections that peer's leaderships need at once, instead of after Raft's
// heartbeat timeout. A paused process or a cut link keeps or hangs its
// connections and is found by the timeouts, as Raft intends. Brokers that
// join later (peerIDs) are watched from the next heartbeat interval on.
func (b *Broker) watchPeers() {
	defer b.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-b.stop; cancel() }()
	var wg sync.WaitGroup
	defer wg.Wait()
	watched := map[metadata.BrokerID]bool{b.cfg.ID: true}
	for {
		for _, id := range b.peerIDs() {
			if watched[id] {
				continue
			}
			watched[id] = true
			wg.Add(1)
			go func(id metadata.BrokerID) {
				defer wg.Done()
				b.watchPeer(ctx, id)
			}(id)
		}
		if !b.sleep(b.cfg.HeartbeatInterval) {
			return
		}
	}
}

func (b *Broker) watchPeer(ctx context.Context, id metadata.BrokerID) {
	cc, err := b.peerConn(id)
	if err != nil {
		return
	}
	cc.Connect()
	wasUp := false
	state := cc.GetState()
	for {
		switch state {
		case connectivity.Ready:
			wasUp = true
		case connectivity.Idle:
			// The connection closed; find out at once whether the peer
			// is still there.
			cc.Connect()
		case connectivity.TransientFailure:
			if wasUp {
				wasUp = false
				b.peerGone(id)
			}
		}
		if !cc.WaitForStateChange(ctx, state) {
			return
		}
		state = cc.GetState()
	}
}

// peerGone starts elections for the partitions (and the controller quorum)
// that dead led, where this broker is the replica chosen to stand.
func (b *Broker) peerGone(dead metadata.BrokerID) {
	started := 0
	for _, r := range b.replicaList() {
		if r.CandidateAfterCrash(dead) {
			started++
		}
	}
	if b.ctrlRaft.State() == raft.Follower && b.controllerID() == dead && replication.StandFor(b.controllerVoters(), dead) == b.cfg.ID {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := b.ctrlTrans.TriggerElection(ctx, replication.ServerID(dead)); err == nil {
			started++
		}
		cancel()
	}
	b.log.Info("broker unreachable: its port refuses connections", "peer", dead, "elections_started", started)
}
