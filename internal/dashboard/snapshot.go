package dashboard

import "time"

// Snapshot is the whole state the page shows: GET /api/state and every
// `event: state`. Field names are the JSON contract of the page
// (static/app.js); see doc.go.
type Snapshot struct {
	At             time.Time    `json:"at"`
	Dir            string       `json:"dir"`
	Brokers        []Broker     `json:"brokers"`
	Topics         []Topic      `json:"topics"`
	Groups         []Group      `json:"groups"`
	Consumers      []Consumer   `json:"consumers"`
	Producers      []Producer   `json:"producers"`
	Links          []Link       `json:"links"`
	Sink           SinkCounters `json:"sink"`
	Effects        []Effect     `json:"effects"`
	DescribeGroups string       `json:"describeGroups"`
	DescribeTopics string       `json:"describeTopics"`
	Experiments    []Experiment `json:"experiments"`
	Runs           []Run        `json:"runs"`

	// KafkaClients are the Kafka client programs the launcher supervises.
	KafkaClients []KafkaClient `json:"kafkaClients"`
}

// Broker is one broker process.
type Broker struct {
	ID      int32  `json:"id"`
	Name    string `json:"name"`
	Address string `json:"address"`
	// State is the launcher's: "running", "paused", "exited" or "never
	// started".
	State string `json:"state"`
	PID   int    `json:"pid"`
	// Controller: the broker leads the controller quorum (per metadata).
	Controller bool `json:"controller"`
	// LastExit is how its last run ended ("signal: killed"), "" while it
	// runs.
	LastExit string `json:"lastExit,omitempty"`
}

// Topic is one topic and its partitions (internal topics, whose names
// start with "__", are left out).
type Topic struct {
	Name       string      `json:"name"`
	Partitions []Partition `json:"partitions"`
}

// Partition is one partition as its leader reports it.
type Partition struct {
	Partition     int32   `json:"partition"`
	Leader        int32   `json:"leader"` // -1: none
	Epoch         int64   `json:"epoch"`
	Replicas      []int32 `json:"replicas"`
	ISR           []int32 `json:"isr"`
	LogStart      int64   `json:"logStart"`      // -1: unknown
	HighWatermark int64   `json:"highWatermark"` // -1: unknown
	// ReplicaEnds is each answering replica's log end offset, by broker id.
	ReplicaEnds map[int32]int64 `json:"replicaEnds"`
	// Records are the last RecordsPerTape records below the high watermark,
	// transaction markers as records of their own (Control set).
	Records []Record `json:"records"`
	// LastStable is the last stable offset: the first offset of the
	// oldest open transaction, the high watermark when none is open (-1:
	// unknown). read_committed readers stop there.
	LastStable int64 `json:"lastStable"`
	// LastStableLag is the high watermark − the last stable offset as of
	// the tape's read (the tape is read at its own high watermark, which
	// the partition's may have passed since): 0 while no transaction is
	// open.
	LastStableLag int64 `json:"lastStableLag"`
	// LastStableSince is when (milliseconds since the epoch) the page
	// first saw the last stable offset at its value while below the high
	// watermark: how long it has not moved (a hanging transaction); 0
	// when it equals the high watermark.
	LastStableSince int64 `json:"lastStableSince"`
	// Readers are the page's own two readers of the tape, read_uncommitted
	// then read_committed, each reading the tape's window as a consumer of
	// that isolation level does.
	Readers []TapeReader `json:"readers"`
	// Error is the partition's Kafka error name (LEADER_NOT_AVAILABLE).
	Error string `json:"error,omitempty"`
}

// Record is one record of a tape.
type Record struct {
	Offset int64   `json:"offset"`
	Key    *string `json:"key"` // null: keyless
	// Value is the value as text, cut to ValueChars characters.
	Value     string `json:"value"`
	EventID   string `json:"eventId"`
	Timestamp int64  `json:"timestamp"` // milliseconds since the epoch
	// Control is "commit" or "abort" for a transaction marker (a control
	// record, no key, value or event id), "" for a data record.
	Control string `json:"control,omitempty"`
	// Txn is a transactional record's transaction as of the read:
	// "committed" (its producer's commit marker follows it), "aborted"
	// (in the partition's aborted transactions, which read_committed
	// readers drop) or "open" (no marker yet: at or above the last stable
	// offset, pending); "" for a record outside transactions.
	Txn string `json:"txn,omitempty"`
	// ProducerID is the producer of a transactional record or a marker.
	ProducerID int64 `json:"producerId,omitempty"`
}

// TapeReader is one of the page's readers of a tape's window.
type TapeReader struct {
	// Isolation is "read_uncommitted" or "read_committed".
	Isolation string `json:"isolation"`
	// Position is where its next fetch begins: the high watermark for
	// read_uncommitted, the last stable offset for read_committed.
	Position int64 `json:"position"`
	// Records is how many records of the window it was given; Aborted how
	// many of them belong to aborted transactions (0 read_committed).
	Records int64 `json:"records"`
	Aborted int64 `json:"aborted"`
}

// Group is one consumer group as its coordinator describes it.
type Group struct {
	Group       string        `json:"group"`
	State       string        `json:"state"`
	Generation  int32         `json:"generation"`
	Assignor    string        `json:"assignor"`
	Coordinator int32         `json:"coordinator"`
	Members     []GroupMember `json:"members"`
	// Committed is topic -> partition -> committed offset.
	Committed map[string]map[int32]int64 `json:"committed"`
	// TotalLag sums high watermark - committed offset (log start where
	// nothing is committed) over the partitions of every topic the group
	// committed or is assigned, as `cluster sink stats --group` does.
	TotalLag int64 `json:"totalLag"`
}

// GroupMember is one member of a group.
type GroupMember struct {
	MemberID string `json:"memberId"`
	ClientID string `json:"clientId"`
	Host     string `json:"host"`
	// Partitions are its assigned partitions (of every topic).
	Partitions []int32 `json:"partitions"`
	// Assignment is the same as kafka-consumer-groups prints it:
	// "orders(0,1)".
	Assignment string `json:"assignment"`
}

// Consumer is one consumerd the launcher supervises.
type Consumer struct {
	Name string `json:"name"`
	// State: "running", "paused", "joining", "rebalancing" (fenced
	// members too), "crashed" (exit code 3, killed, or any failure) or
	// "stopped" (a clean exit).
	State      string              `json:"state"`
	Group      string              `json:"group"`
	Topic      string              `json:"topic"`
	Generation int32               `json:"generation"`
	MemberID   string              `json:"memberId"`
	Partitions []ConsumerPartition `json:"partitions"`
	Processed  int64               `json:"processed"`
	// Commit is "after", "before" or "auto".
	Commit         string `json:"commit"`
	RecordsPerPoll int32  `json:"recordsPerPoll"`
	IdempotentSink bool   `json:"idempotentSink"`
	Assignor       string `json:"assignor"`
	PID            int    `json:"pid"`
	LastExit       string `json:"lastExit,omitempty"`
}

// ConsumerPartition is a partition a consumer owns.
type ConsumerPartition struct {
	Partition int32 `json:"partition"`
	// Position is the next offset it processes.
	Position int64 `json:"position"`
	// Committed is the last offset it committed; absent when none.
	Committed *int64 `json:"committed,omitempty"`
}

// Producer is one producerd the launcher supervises.
type Producer struct {
	Name string `json:"name"`
	// State: "starting", "running", "paused", "stopping", "stopped" (a
	// clean exit) or "crashed".
	State       string           `json:"state"`
	Topic       string           `json:"topic"`
	Rate        float64          `json:"rate"`
	Acks        string           `json:"acks"` // "0", "1" or "all"
	Idempotent  bool             `json:"idempotent"`
	Keys        bool             `json:"keys"`
	HotKeyShare float64          `json:"hotKeyShare"`
	Sent        int64            `json:"sent"`
	Acked       int64            `json:"acked"`
	Failed      map[string]int64 `json:"failed"`
	Retried     int64            `json:"retried"`
	InFlight    int64            `json:"inFlight"`
	// AckedPerPartition counts acknowledged records per partition;
	// RatePerPartition is their rate (records/s) over the last seconds.
	AckedPerPartition map[int32]int64   `json:"ackedPerPartition"`
	RatePerPartition  map[int32]float64 `json:"ratePerPartition"`
	PID               int               `json:"pid"`
	LastExit          string            `json:"lastExit,omitempty"`
}

// Link is one fault-injection link of the launcher: what From sends to To.
type Link struct {
	From string `json:"from"`
	To   string `json:"to"`
	// Mode is "pass", "blackhole", "drop-back" or "drop-forward".
	Mode     string `json:"mode"`
	DelayMs  int64  `json:"delayMs"`
	JitterMs int64  `json:"jitterMs"`
}

// SinkCounters are the counters of DIR/sink.db (`cluster sink stats`);
// null where unknown.
type SinkCounters struct {
	Delivered       *int64 `json:"delivered"`
	Duplicates      *int64 `json:"duplicates"`
	NeverProcessed  *int64 `json:"neverProcessed"`
	OutOfKeyOrder   *int64 `json:"outOfKeyOrder"`
	TotalLag        *int64 `json:"totalLag"`
	ActiveConsumers *int64 `json:"activeConsumers"`
	Generation      *int64 `json:"generation"`
}

// Effect is one effect row of the sink, in apply order.
type Effect struct {
	EventID    string `json:"eventId"`
	Key        string `json:"key"`
	Partition  int32  `json:"partition"`
	Offset     int64  `json:"offset"`
	Consumer   string `json:"consumer"`
	Duplicate  bool   `json:"duplicate"`
	OutOfOrder bool   `json:"outOfOrder"`
}

// Experiment is one built-in chaos experiment (`chaos list`).
type Experiment struct {
	Name            string `json:"name"`
	About           string `json:"about"`
	DefaultDuration string `json:"defaultDuration"`
}

// Run is one experiment run under DIR/runs.
type Run struct {
	Name string `json:"name"`
	Dir  string `json:"dir"`
	// State is "running", "passed" or "failed".
	State string `json:"state"`
	// Report is the report's address on this server ("" until written).
	Report  string    `json:"report"`
	Started time.Time `json:"started,omitzero"`
}

// Entry is one line of the timeline.
type Entry struct {
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	Text string    `json:"text"`
}

// Timeline kinds.
const (
	KindLeader         = "leader"
	KindISR            = "isr"
	KindRebalance      = "rebalance"
	KindCommitRejected = "commit-rejected"
	KindLost           = "lost"
	KindFault          = "fault"
	KindExperiment     = "experiment"
)
