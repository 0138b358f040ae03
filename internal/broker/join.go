package broker

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/replication"
)

// The peer table. A broker reaches broker id at its --peers entry (which
// may be a fault-injection link), else at the address id registered in the
// metadata (a broker that joined the running cluster, brokerd --join),
// else, on a joining broker whose copy of the metadata is still empty, at
// the address a --join broker's Metadata answer named.

// peerAddr returns the address this broker dials to reach broker id. It
// takes the metadata's read lock: never call it inside View.
func (b *Broker) peerAddr(id metadata.BrokerID) (string, bool) {
	if a, ok := b.cfg.Peers[id]; ok {
		return a, true
	}
	var reg metadata.Broker
	var ok bool
	b.meta.View(func(s *metadata.State) { reg, ok = s.Brokers[id] })
	if ok && reg.Address != "" {
		return reg.Address, true
	}
	b.joinMu.Lock()
	defer b.joinMu.Unlock()
	a, ok := b.joinPeers[id]
	return a, ok
}

// peerIDs returns every broker this broker knows, itself included, in id
// order: its --peers, the registered brokers and (while joining) those a
// --join broker named, less the removed ones. It takes the metadata's read
// lock: inside View, use peerIDsIn.
func (b *Broker) peerIDs() []metadata.BrokerID {
	var ids []metadata.BrokerID
	b.meta.View(func(s *metadata.State) { ids = b.peerIDsIn(s) })
	return ids
}

// peerIDsIn is peerIDs over s (held by the caller's View).
func (b *Broker) peerIDsIn(s *metadata.State) []metadata.BrokerID {
	ids := b.cfg.sortedPeers()
	for id := range s.Brokers {
		ids = append(ids, id)
	}
	b.joinMu.Lock()
	for id := range b.joinPeers {
		ids = append(ids, id)
	}
	b.joinMu.Unlock()
	slices.Sort(ids)
	ids = slices.Compact(ids)
	return slices.DeleteFunc(ids, func(id metadata.BrokerID) bool { return s.Removed[id] })
}

// joinController asks the --join brokers, in turn, for the controller
// quorum's leader (a broker that has not been added to the quorum yet
// hears from no leader): it records the addresses their answer lists in
// the peer table and returns the leader's id.
func (b *Broker) joinController(ctx context.Context) (metadata.BrokerID, error) {
	var last error
	for _, addr := range b.cfg.Join {
		id, err := b.askJoinBroker(ctx, addr)
		if err == nil {
			return id, nil
		}
		last = fmt.Errorf("--join %s: %w", addr, err)
	}
	return -1, kerr.New(kerr.NotController, "no --join broker named the controller's leader (last: %v)", last)
}

func (b *Broker) askJoinBroker(ctx context.Context, addr string) (metadata.BrokerID, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return -1, err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	md, err := tapesv1.NewBrokerServiceClient(cc).Metadata(ctx, &tapesv1.MetadataRequest{NoTopics: true})
	if err != nil {
		return -1, err
	}
	b.joinMu.Lock()
	for _, bi := range md.GetBrokers() {
		if id := metadata.BrokerID(bi.GetId()); id != b.cfg.ID && bi.GetAddress() != "" {
			b.joinPeers[id] = bi.GetAddress()
		}
	}
	b.joinMu.Unlock()
	if md.GetControllerId() < 0 {
		return -1, fmt.Errorf("it knows no controller leader")
	}
	return metadata.BrokerID(md.GetControllerId()), nil
}

// maxControllerVoters bounds the controller quorum's voters: five survive
// two failures; more only slow every commit. Brokers beyond it follow the
// controller log as non-voters.
const maxControllerVoters = 5

// wantVoters is how many of n controller members vote: the largest odd
// number up to n (an even one survives no more failures than one less),
// at most maxControllerVoters.
func wantVoters(n int) int {
	w := min(n, maxControllerVoters)
	if w > 1 && w%2 == 0 {
		w--
	}
	return w
}

// quorumChange is one change of the controller quorum's configuration.
type quorumChange struct {
	op string // "add-nonvoter" or "promote"
	id metadata.BrokerID
}

// nextQuorumChange decides the next change of the controller quorum's
// configuration (servers) from the registered brokers, at most one per
// call: a registered broker not in it (one that joined) is added as a
// non-voter, so that it receives the log without counting for the
// majority; then, while fewer members vote than wantVoters, the live
// non-voter of the lowest id is promoted. ok is false when nothing is to
// change. Removed brokers leave by removeControllerVoters.
func nextQuorumChange(servers []raft.Server, registered []metadata.BrokerID, live func(metadata.BrokerID) bool) (quorumChange, bool) {
	in := map[metadata.BrokerID]bool{}
	voters := 0
	var nonvoters []metadata.BrokerID
	for _, s := range servers {
		id := replication.BrokerOf(s.ID)
		in[id] = true
		if s.Suffrage == raft.Voter {
			voters++
		} else {
			nonvoters = append(nonvoters, id)
		}
	}
	for _, id := range registered {
		if !in[id] {
			return quorumChange{"add-nonvoter", id}, true
		}
	}
	if voters >= wantVoters(len(servers)) {
		return quorumChange{}, false
	}
	slices.Sort(nonvoters)
	for _, id := range nonvoters {
		if slices.Contains(registered, id) && live(id) {
			return quorumChange{"promote", id}, true
		}
	}
	return quorumChange{}, false
}

// addControllerMembers runs on reconcileLoop's goroutine: on the
// controller quorum's leader, it makes the changes nextQuorumChange
// decides (a joined broker becomes a non-voter of the quorum, and is
// promoted while the quorum has fewer voters than it should). Blocks for
// at most a few seconds per change.
func (b *Broker) addControllerMembers() {
	for range maxControllerVoters * 2 {
		if b.ctrlRaft.State() != raft.Leader {
			return
		}
		f := b.ctrlRaft.GetConfiguration()
		if f.Error() != nil {
			return
		}
		var registered []metadata.BrokerID
		b.meta.View(func(s *metadata.State) { registered = s.BrokerIDs() })
		ch, ok := nextQuorumChange(f.Configuration().Servers, registered, b.alive)
		if !ok {
			return
		}
		sid := replication.ServerID(ch.id)
		var err error
		if ch.op == "promote" {
			err = b.ctrlRaft.AddVoter(sid, raft.ServerAddress(sid), 0, 5*time.Second).Error()
		} else {
			err = b.ctrlRaft.AddNonvoter(sid, raft.ServerAddress(sid), 0, 5*time.Second).Error()
		}
		if err != nil {
			b.log.Warn("changing the controller quorum; retried next round", "change", ch.op, "broker", ch.id, "err", err)
			return
		}
		b.log.Info("controller quorum changed", "change", ch.op, "broker", ch.id)
	}
}

// controllerVoters returns the controller quorum's voters in id order
// (nil when its configuration cannot be read).
func (b *Broker) controllerVoters() []metadata.BrokerID {
	f := b.ctrlRaft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var out []metadata.BrokerID
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			out = append(out, replication.BrokerOf(s.ID))
		}
	}
	slices.Sort(out)
	return out
}
