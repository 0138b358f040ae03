package broker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/replication"
)

// wantReplica is a partition the metadata assigns to this broker.
type wantReplica struct {
	topic     string
	id        metadata.TopicID
	partition int32
	replicas  []metadata.BrokerID
	config    metadata.TopicConfig
	// join: this broker is being added by a reassignment (Adding): a new
	// replica waits for the leader instead of bootstrapping the group.
	join bool
}

// reconcileLoop opens the replicas the metadata assigns to this broker and
// deletes those whose topic is gone, on every metadata change and every two
// seconds; it also re-sends leader reports the controller has not recorded.
func (b *Broker) reconcileLoop() {
	defer b.wg.Done()
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		b.reconcile()
		select {
		case <-b.stop:
			return
		case <-b.metaChanged:
			b.addControllerMembers()
		case <-t.C:
			b.resendStaleReports()
			b.removeControllerVoters()
			b.addControllerMembers()
		}
	}
}

// reconcile runs on reconcileLoop's goroutine only (the one place replicas
// are opened), so a partition directory that is neither wanted nor open is
// garbage. Until the broker is ready (its metadata has caught up with its
// registration, notReady) it does nothing: during the replay of the
// controller log a topic created and later deleted is briefly present, and
// opening its replicas would bring a deleted topic back.
func (b *Broker) reconcile() {
	if b.notReady() != "" {
		return
	}
	want := map[string]wantReplica{}
	b.meta.View(func(s *metadata.State) {
		for _, t := range s.Topics {
			for p, ps := range t.Partitions {
				if slices.Contains(ps.Replicas, b.cfg.ID) {
					name := replication.GroupName(t.Name, int32(p), t.ID)
					want[name] = wantReplica{topic: t.Name, id: t.ID, partition: int32(p), replicas: slices.Clone(trackedReplicas(ps)), config: t.Config(),
						join: slices.Contains(ps.Adding, b.cfg.ID)}
				}
			}
		}
	})
	b.mu.Lock()
	var drop []*replication.Replica
	for name, r := range b.replicas {
		if _, ok := want[name]; !ok {
			drop = append(drop, r)
			delete(b.replicas, name)
			delete(b.byRaft, r.Raft())
		}
	}
	var open []string
	for name := range want {
		if _, ok := b.replicas[name]; !ok {
			open = append(open, name)
		}
	}
	b.mu.Unlock()
	for _, r := range drop {
		c := r.Config()
		b.log.Info("deleting a replica this broker no longer hosts (topic deleted or partition reassigned)", "topic", c.Topic, "partition", c.Partition)
		if err := r.Delete(); err != nil {
			b.log.Warn("delete replica", "topic", c.Topic, "partition", c.Partition, "err", err)
		}
	}
	sort.Strings(open)
	for _, name := range open {
		// Opening hundreds of replicas takes seconds: one whose topic was
		// deleted meanwhile is not opened (the next round deletes the rest).
		if w := want[name]; !b.topicExists(w.topic, w.id) {
			continue
		}
		if err := b.openReplica(name, want[name]); err != nil {
			b.log.Error("open replica", "group", name, "err", err)
		}
	}
	b.removeStaleDirs(want)
	b.driveReassignments()
}

// topicExists reports whether this incarnation of topic is in the metadata.
func (b *Broker) topicExists(topic string, id metadata.TopicID) bool {
	ok := false
	b.meta.View(func(s *metadata.State) {
		t := s.Topics[topic]
		ok = t != nil && t.ID == id
	})
	return ok
}

// removeStaleDirs removes partition directories (named by GroupName) that
// the metadata does not assign to this broker and no open replica uses:
// replicas of topics deleted while this broker was down, or left by a crash
// in the middle of a delete; and their groups' entries in the shared Raft
// log and stable store. Called from reconcile only.
func (b *Broker) removeStaleDirs(want map[string]wantReplica) {
	stale := func(name string) bool {
		if _, ok := want[name]; ok {
			return false
		}
		b.mu.Lock()
		_, open := b.replicas[name]
		b.mu.Unlock()
		return !open
	}
	for _, name := range b.raftLog.Groups() {
		if !stale(name) {
			continue
		}
		if s, err := b.raftLog.Group(name); err == nil {
			b.log.Info("dropping the Raft log of a partition this broker no longer hosts", "group", name)
			if err := s.Drop(); err != nil {
				b.log.Warn("drop a partition's Raft log", "group", name, "err", err)
			}
		}
	}
	if groups, err := b.raftStable.Groups(); err != nil {
		b.log.Warn("list the shared stable store's groups", "err", err)
	} else {
		for _, name := range groups {
			if stale(name) {
				if err := b.raftStable.Group(name).Drop(); err != nil {
					b.log.Warn("drop a partition's term and vote", "group", name, "err", err)
				}
			}
		}
	}
	root := filepath.Join(b.cfg.DataDir, "partitions")
	entries, err := os.ReadDir(root)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			b.log.Warn("list partition directories", "dir", root, "err", err)
		}
		return
	}
	for _, e := range entries {
		name := e.Name()
		if !stale(name) {
			continue
		}
		b.log.Info("removing the directory of a partition this broker no longer hosts", "dir", name)
		if err := os.RemoveAll(filepath.Join(root, name)); err != nil {
			b.log.Warn("remove partition directory", "dir", name, "err", err)
		}
	}
}

func (b *Broker) openReplica(name string, w wantReplica) error {
	select {
	case <-b.stop:
		return nil
	default:
	}
	trans, err := b.mux.Group(name)
	if err != nil {
		return fmt.Errorf("transport: %w", err)
	}
	r, err := replication.Open(replication.Config{
		Topic: w.topic, TopicID: w.id, Partition: w.partition,
		Dir:                    filepath.Join(b.cfg.DataDir, "partitions", name), // name is GroupName: removeStaleDirs relies on it
		RaftLog:                b.raftLog,
		Stable:                 b.raftStable,
		NewRaftLog:             b.cfg.RaftLog,
		LocalID:                b.cfg.ID,
		Replicas:               w.replicas,
		Join:                   w.join,
		TopicConfig:            w.config,
		Raft:                   b.cfg.Raft,
		ReplicaLagTimeMax:      b.cfg.ReplicaLagTimeMax,
		RetentionCheckInterval: b.cfg.RetentionCheckInterval,
		PreferredLeaderDelay:   b.cfg.PreferredLeaderDelay,
		Transport:              trans,
		Observer:               b.observer,
		LeaderAddress:          b.brokerAddress,
		OnReport:               b.reports.add,
		PreviousISR: func() []metadata.BrokerID {
			return slices.Clone(b.partitionState(w.topic, w.id, w.partition).ISR)
		},
		Logger: b.cfg.Logger,
	})
	if err != nil {
		trans.Close()
		return err
	}
	b.mu.Lock()
	b.replicas[name] = r
	b.byRaft[r.Raft()] = r
	b.mu.Unlock()
	return nil
}

// partitionState returns what the controller's metadata, as this broker has
// applied it, records for one partition of topic incarnation id (zero if
// none). Safe from any goroutine; it holds the metadata's read lock briefly.
func (b *Broker) partitionState(topic string, id metadata.TopicID, p int32) metadata.PartitionState {
	var ps metadata.PartitionState
	b.meta.View(func(s *metadata.State) {
		if t, ok := s.Topics[topic]; ok && t.ID == id && int(p) < len(t.Partitions) {
			ps = t.Partitions[p]
		}
	})
	return ps
}

// brokerAddress returns a broker's advertised client address ("" if unknown).
func (b *Broker) brokerAddress(id metadata.BrokerID) string {
	var addr string
	b.meta.View(func(s *metadata.State) { addr = s.Brokers[id].Address })
	return addr
}

// replicaList returns the hosted replicas.
func (b *Broker) replicaList() []*replication.Replica {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*replication.Replica, 0, len(b.replicas))
	for _, r := range b.replicas {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		ci, cj := out[i].Config(), out[j].Config()
		if ci.Topic != cj.Topic {
			return ci.Topic < cj.Topic
		}
		return ci.Partition < cj.Partition
	})
	return out
}

// replica returns the hosted replica of topic/partition (current incarnation).
func (b *Broker) replica(topic string, id metadata.TopicID, partition int32) *replication.Replica {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.replicas[replication.GroupName(topic, partition, id)]
}

// resendStaleReports re-reports partitions this broker leads whose state
// the controller has not recorded (a report lost with a controller failover).
func (b *Broker) resendStaleReports() {
	for _, r := range b.replicaList() {
		isr := r.ISR()
		if isr == nil {
			continue
		}
		st := r.Status()
		c := r.Config()
		have := b.partitionState(c.Topic, c.TopicID, c.Partition)
		if have.Leader != b.cfg.ID || have.Epoch != int64(st.Term) || !slices.Equal(have.ISR, isr) {
			b.reports.add(replication.Report{Topic: c.Topic, TopicID: c.TopicID, Partition: c.Partition, Leader: b.cfg.ID, Epoch: int64(st.Term), ISR: isr})
		}
	}
}

// reporter sends leader reports to the controller, newest per partition,
// from one goroutine, so replicas never block on the controller.
type reporter struct {
	b       *Broker
	mu      sync.Mutex
	pending map[string]replication.Report // by group name; guarded by mu
	wake    chan struct{}
}

func newReporter(b *Broker) *reporter {
	return &reporter{b: b, pending: map[string]replication.Report{}, wake: make(chan struct{}, 1)}
}

// add queues a report; it never blocks.
func (r *reporter) add(rep replication.Report) {
	r.mu.Lock()
	r.pending[replication.GroupName(rep.Topic, rep.Partition, rep.TopicID)] = rep
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *reporter) run() {
	defer r.b.wg.Done()
	for {
		select {
		case <-r.b.stop:
			return
		case <-r.wake:
		}
		r.mu.Lock()
		batch := r.pending
		r.pending = map[string]replication.Report{}
		r.mu.Unlock()
		for name, rep := range batch {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			res, err := r.b.propose(ctx, &metadata.Command{Op: metadata.OpUpdatePartition, Name: rep.Topic, TopicID: rep.TopicID,
				Partition: rep.Partition, Leader: rep.Leader, Epoch: rep.Epoch, ISR: rep.ISR})
			cancel()
			if err == nil {
				err = res.Err()
			}
			if err != nil {
				r.b.log.Warn("leader report failed; the periodic check resends it", "group", name, "err", err)
			}
		}
	}
}
