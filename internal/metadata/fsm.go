package metadata

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/tapes-dev/tapes/internal/kerr"
)

// Op names a controller command.
type Op string

// The controller commands.
const (
	OpRegisterBroker  Op = "register_broker"
	OpCreateTopic     Op = "create_topic"
	OpDeleteTopic     Op = "delete_topic"
	OpUpdatePartition Op = "update_partition"
	OpAllocProducerID Op = "alloc_producer_id"
	// Reassignment (see reassign.go): an operator's target, the partition
	// leader's progress reports and its completion.
	OpReassignPartition    Op = "reassign_partition"
	OpReassignProgress     Op = "reassign_progress"
	OpCompleteReassignment Op = "complete_reassignment"
	// OpUnregisterBroker removes a broker that hosts no replica (cluster
	// brokers remove, after moving its replicas away).
	OpUnregisterBroker Op = "unregister_broker"
)

// Command is one entry of the controller's Raft log.
type Command struct {
	Op Op `json:"op"`
	// RequestID, when set, makes the command idempotent: applied again
	// under the same id (the proposing broker retried after losing the
	// answer), it returns the first result and changes nothing. Brokers set
	// a fresh id per client request.
	RequestID string `json:"request_id,omitempty"`
	// OpRegisterBroker.
	Broker *Broker `json:"broker,omitempty"`
	// OpRegisterBroker: the broker joins a running cluster (brokerd
	// --join, without a controller state of its own yet): its id must be
	// new, not one registered at another address (a second process given
	// a taken id) nor a removed one. A broker of the bootstrap --peers
	// re-registers freely (a new address after a restart).
	Join bool `json:"join,omitempty"`
	// OpCreateTopic: name, configs and the partitions' replicas (the ID is assigned on apply).
	Topic *Topic `json:"topic,omitempty"`
	// OpCreateTopic: the proposing broker's --max-partitions-per-broker,
	// checked here, in log order, so that two concurrent creates cannot
	// both pass (State.CheckBudget); 0 checks nothing.
	MaxPartitionsPerBroker int `json:"max_partitions_per_broker,omitempty"`
	// OpDeleteTopic, OpUpdatePartition: the topic's name.
	Name string `json:"name,omitempty"`
	// OpUpdatePartition: the reporting leader's view.
	TopicID   TopicID    `json:"topic_id,omitempty"`
	Partition int32      `json:"partition,omitempty"`
	Leader    BrokerID   `json:"leader,omitempty"`
	Epoch     int64      `json:"epoch,omitempty"`
	ISR       []BrokerID `json:"isr,omitempty"`
	// OpReassignPartition: the target replica set. OpReassignProgress,
	// OpCompleteReassignment: the partition's Raft voters and non-voters
	// as its leader (at Epoch) sees them.
	Target   []BrokerID `json:"target,omitempty"`
	Voters   []BrokerID `json:"voters,omitempty"`
	Learners []BrokerID `json:"learners,omitempty"`
	// OpReassignProgress: the step the leader just took ("" for none).
	Step string `json:"step,omitempty"`
	// OpReassignPartition: the catch-up throttle, bytes per second (0
	// none; negative is refused).
	Throttle int64 `json:"throttle,omitempty"`
}

// Encode returns the command's bytes for raft.Apply or a forwarded Propose.
func (c *Command) Encode() []byte {
	b, err := json.Marshal(c)
	if err != nil {
		panic(fmt.Sprintf("metadata: encode command: %v", err)) // only plain data types: cannot happen
	}
	return b
}

// Result is what applying a command returns.
type Result struct {
	// ErrorCode and ErrorMessage are set when the command was refused; the
	// state is then unchanged.
	ErrorCode    kerr.Code `json:"error_code,omitempty"`
	ErrorMessage string    `json:"error_message,omitempty"`
	TopicID      TopicID   `json:"topic_id,omitempty"`
	ProducerID   int64     `json:"producer_id,omitempty"`
	// Index is the Raft index the command was applied at: a broker whose
	// State.Index has reached it holds every change committed before it.
	Index uint64 `json:"index,omitempty"`
}

// Err returns the refusal as a *kerr.Error, or nil.
func (r *Result) Err() error {
	if r == nil || r.ErrorCode == "" {
		return nil
	}
	return kerr.New(r.ErrorCode, "%s", r.ErrorMessage)
}

func refuse(err error) *Result {
	if ke, ok := kerr.As(err); ok {
		return &Result{ErrorCode: ke.Code(), ErrorMessage: ke.Detail.Message}
	}
	return &Result{ErrorCode: kerr.UnknownServerError, ErrorMessage: err.Error()}
}

// FSM is the controller's raft.FSM. Raft calls Apply, Snapshot and Restore
// from its FSM goroutine, one at a time; readers call View and Clone from any
// goroutine. OnChange, if set before Raft starts, is called after every
// change from the FSM goroutine and must not block.
type FSM struct {
	OnChange func()

	mu    sync.RWMutex
	state *State // guarded by mu; replaced whole by Restore
}

// NewFSM returns an FSM with empty state.
func NewFSM() *FSM { return &FSM{state: newState()} }

// View calls fn with the current state under a read lock; fn must not keep
// references to it or block.
func (f *FSM) View(fn func(*State)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.state)
}

// Clone returns a deep copy of the current state.
func (f *FSM) Clone() *State {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.clone()
}

// Apply implements raft.FSM.
func (f *FSM) Apply(l *raft.Log) interface{} {
	var cmd Command
	if err := json.Unmarshal(l.Data, &cmd); err != nil {
		return &Result{ErrorCode: kerr.CorruptMessage, ErrorMessage: fmt.Sprintf("controller command at index %d: %v", l.Index, err)}
	}
	f.mu.Lock()
	s := f.state
	var res *Result
	changed := false
	if prev, seen := s.Requests[cmd.RequestID]; cmd.RequestID != "" && seen {
		res = &prev
	} else {
		res, changed = f.apply(&cmd)
		res.Index = l.Index
		if cmd.RequestID != "" {
			s.remember(cmd.RequestID, *res)
		}
	}
	s.Index = l.Index
	f.mu.Unlock()
	if changed && f.OnChange != nil {
		f.OnChange()
	}
	return res
}

// remember records a request's result, forgetting the oldest beyond
// MaxRememberedRequests.
func (s *State) remember(id string, r Result) {
	s.Requests[id] = r
	s.RequestOrder = append(s.RequestOrder, id)
	for len(s.RequestOrder) > MaxRememberedRequests {
		delete(s.Requests, s.RequestOrder[0])
		s.RequestOrder = s.RequestOrder[1:]
	}
}

// Index returns the Raft index of the last command applied.
func (f *FSM) Index() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.Index
}

// apply mutates the state; the caller holds mu. It is deterministic: every
// broker reaches the same state from the same log.
func (f *FSM) apply(cmd *Command) (*Result, bool) {
	s := f.state
	switch cmd.Op {
	case OpRegisterBroker:
		if cmd.Broker == nil || cmd.Broker.ID <= 0 {
			return refuse(kerr.New(kerr.InvalidRequest, "register_broker without a valid broker")), false
		}
		if s.Removed[cmd.Broker.ID] {
			return refuse(kerr.New(kerr.InvalidRequest, "broker %d was removed from the cluster (cluster brokers remove); it cannot register again", cmd.Broker.ID)), false
		}
		old, ok := s.Brokers[cmd.Broker.ID]
		if ok && old == *cmd.Broker {
			return &Result{}, false
		}
		if ok && cmd.Join && old.Address != cmd.Broker.Address {
			return refuse(kerr.New(kerr.DuplicateBrokerRegistration, "broker id %d is already registered at %s; a joining broker (at %s) needs an id of its own",
				cmd.Broker.ID, old.Address, cmd.Broker.Address)), false
		}
		s.Brokers[cmd.Broker.ID] = *cmd.Broker
		return &Result{}, true
	case OpCreateTopic:
		t := cmd.Topic
		if t == nil {
			return refuse(kerr.New(kerr.InvalidRequest, "create_topic without a topic")), false
		}
		if err := ValidateTopicName(t.Name); err != nil {
			return refuse(err), false
		}
		if _, exists := s.Topics[t.Name]; exists {
			return refuse(kerr.New(kerr.TopicAlreadyExists, "topic %q already exists", t.Name)), false
		}
		if other := s.CollidingTopic(t.Name); other != "" {
			return refuse(CollisionError(t.Name, other)), false
		}
		if _, err := ParseTopicConfig(t.Configs); err != nil {
			return refuse(err), false
		}
		if len(t.Partitions) == 0 {
			return refuse(kerr.New(kerr.InvalidPartitions, "topic %q has no partitions", t.Name)), false
		}
		nt := &Topic{Name: t.Name, ID: s.NextTopicID, Configs: map[string]string{}, Partitions: make([]PartitionState, len(t.Partitions))}
		for k, v := range t.Configs {
			nt.Configs[k] = v
		}
		for i, p := range t.Partitions {
			for _, r := range p.Replicas {
				if _, ok := s.Brokers[r]; !ok {
					return refuse(kerr.New(kerr.InvalidReplicationFactor, "partition %d assigned to unknown broker %d", i, r)), false
				}
			}
			nt.Partitions[i] = PartitionState{Replicas: slices.Clone(p.Replicas), Leader: -1}
		}
		assignment := make([][]BrokerID, len(t.Partitions))
		for i, p := range t.Partitions {
			assignment[i] = p.Replicas
		}
		if err := s.CheckBudget(t.Name, assignment, cmd.MaxPartitionsPerBroker); err != nil {
			return refuse(err), false
		}
		s.NextTopicID++
		s.Topics[t.Name] = nt
		return &Result{TopicID: nt.ID}, true
	case OpDeleteTopic:
		if _, ok := s.Topics[cmd.Name]; !ok {
			return refuse(kerr.New(kerr.UnknownTopicOrPartition, "topic %q does not exist", cmd.Name)), false
		}
		delete(s.Topics, cmd.Name)
		return &Result{}, true
	case OpUpdatePartition:
		t, ok := s.Topics[cmd.Name]
		if !ok || t.ID != cmd.TopicID || cmd.Partition < 0 || int(cmd.Partition) >= len(t.Partitions) {
			return refuse(kerr.New(kerr.UnknownTopicOrPartition, "partition %s-%d (topic id %d) does not exist", cmd.Name, cmd.Partition, cmd.TopicID)), false
		}
		p := &t.Partitions[cmd.Partition]
		if cmd.Epoch < p.Epoch {
			// A deposed leader's late report: ignored, not an error.
			return &Result{}, false
		}
		if !slices.Contains(p.Replicas, cmd.Leader) {
			return refuse(kerr.New(kerr.InvalidRequest, "leader %d is not a replica of %s-%d", cmd.Leader, cmd.Name, cmd.Partition)), false
		}
		isr := make([]BrokerID, 0, len(cmd.ISR))
		for _, r := range p.Replicas { // keep assignment order, drop non-replicas
			if slices.Contains(cmd.ISR, r) {
				isr = append(isr, r)
			}
		}
		if !slices.Contains(isr, cmd.Leader) {
			isr = append([]BrokerID{cmd.Leader}, isr...)
		}
		if p.Leader == cmd.Leader && p.Epoch == cmd.Epoch && slices.Equal(p.ISR, isr) {
			return &Result{}, false
		}
		p.Leader, p.Epoch, p.ISR = cmd.Leader, cmd.Epoch, isr
		return &Result{}, true
	case OpReassignPartition, OpReassignProgress, OpCompleteReassignment:
		return s.applyReassign(cmd)
	case OpUnregisterBroker:
		return s.applyUnregister(cmd.Leader)
	case OpAllocProducerID:
		id := s.NextProducerID
		s.NextProducerID++
		return &Result{ProducerID: id}, true
	}
	return refuse(kerr.New(kerr.InvalidRequest, "unknown controller command %q", cmd.Op)), false
}

// Snapshot implements raft.FSM: a copy of the state, encoded in Persist.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	return &snapshot{state: f.Clone()}, nil
}

// Restore implements raft.FSM.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	s := newState()
	if err := json.NewDecoder(rc).Decode(s); err != nil {
		return fmt.Errorf("restore controller snapshot: %w", err)
	}
	if s.Brokers == nil {
		s.Brokers = map[BrokerID]Broker{}
	}
	if s.Topics == nil {
		s.Topics = map[string]*Topic{}
	}
	if s.Requests == nil {
		s.Requests = map[string]Result{}
	}
	if s.Removed == nil {
		s.Removed = map[BrokerID]bool{}
	}
	f.mu.Lock()
	f.state = s
	f.mu.Unlock()
	if f.OnChange != nil {
		f.OnChange()
	}
	return nil
}

type snapshot struct{ state *State }

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode(s.state); err != nil {
		sink.Cancel()
		return fmt.Errorf("persist controller snapshot: %w", err)
	}
	return sink.Close()
}

func (s *snapshot) Release() {}
