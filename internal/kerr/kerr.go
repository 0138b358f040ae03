package kerr

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

// Code is a Kafka error name, e.g. "NOT_LEADER_OR_FOLLOWER".
type Code string

// The error names tapes uses, spelled as Kafka spells them.
const (
	UnknownServerError           Code = "UNKNOWN_SERVER_ERROR"
	OffsetOutOfRange             Code = "OFFSET_OUT_OF_RANGE"
	CorruptMessage               Code = "CORRUPT_MESSAGE"
	UnknownTopicOrPartition      Code = "UNKNOWN_TOPIC_OR_PARTITION"
	UnknownTopicID               Code = "UNKNOWN_TOPIC_ID"
	LeaderNotAvailable           Code = "LEADER_NOT_AVAILABLE"
	NotLeaderOrFollower          Code = "NOT_LEADER_OR_FOLLOWER"
	RequestTimedOut              Code = "REQUEST_TIMED_OUT"
	BrokerNotAvailable           Code = "BROKER_NOT_AVAILABLE"
	RecordTooLarge               Code = "RECORD_TOO_LARGE"
	InvalidTopic                 Code = "INVALID_TOPIC_EXCEPTION"
	NotEnoughReplicas            Code = "NOT_ENOUGH_REPLICAS"
	NotEnoughReplicasAfterAppend Code = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
	InvalidRequiredAcks          Code = "INVALID_REQUIRED_ACKS"
	TopicAlreadyExists           Code = "TOPIC_ALREADY_EXISTS"
	InvalidPartitions            Code = "INVALID_PARTITIONS"
	InvalidReplicationFactor     Code = "INVALID_REPLICATION_FACTOR"
	InvalidConfig                Code = "INVALID_CONFIG"
	NotController                Code = "NOT_CONTROLLER"
	InvalidRequest               Code = "INVALID_REQUEST"
	KafkaStorageError            Code = "KAFKA_STORAGE_ERROR"
	PolicyViolation              Code = "POLICY_VIOLATION"
	InvalidReplicaAssignment     Code = "INVALID_REPLICA_ASSIGNMENT"
	// Leader epoch fencing (Kafka's current_leader_epoch, KIP-320): the
	// client's epoch is older (FENCED) or newer (UNKNOWN) than the leader's.
	FencedLeaderEpoch  Code = "FENCED_LEADER_EPOCH"
	UnknownLeaderEpoch Code = "UNKNOWN_LEADER_EPOCH"
	// Record batches as Kafka clients send them (internal/kafkawire).
	InvalidRecord              Code = "INVALID_RECORD"
	UnsupportedCompressionType Code = "UNSUPPORTED_COMPRESSION_TYPE"
	// Consumer groups.
	CoordinatorNotAvailable Code = "COORDINATOR_NOT_AVAILABLE"
	NotCoordinator          Code = "NOT_COORDINATOR"
	IllegalGeneration       Code = "ILLEGAL_GENERATION"
	UnknownMemberID         Code = "UNKNOWN_MEMBER_ID"
	RebalanceInProgress     Code = "REBALANCE_IN_PROGRESS"
	MemberIDRequired        Code = "MEMBER_ID_REQUIRED"
	// Consumer groups, continued.
	CoordinatorLoadInProgress Code = "COORDINATOR_LOAD_IN_PROGRESS"
	InvalidSessionTimeout     Code = "INVALID_SESSION_TIMEOUT"
	InconsistentGroupProtocol Code = "INCONSISTENT_GROUP_PROTOCOL"
	InvalidGroupID            Code = "INVALID_GROUP_ID"
	GroupIDNotFound           Code = "GROUP_ID_NOT_FOUND"
	NonEmptyGroup             Code = "NON_EMPTY_GROUP"
	// UnsupportedVersion: a request asks for what this broker does not do
	// (a JoinGroup with group.instance.id: no static membership).
	UnsupportedVersion Code = "UNSUPPORTED_VERSION"
	// Idempotent producer.
	OutOfOrderSequenceNumber Code = "OUT_OF_ORDER_SEQUENCE_NUMBER"
	InvalidProducerEpoch     Code = "INVALID_PRODUCER_EPOCH"
	UnknownProducerID        Code = "UNKNOWN_PRODUCER_ID"
	// Kafka's Fetch: an incremental fetch session this broker does not hold.
	FetchSessionIDNotFound Code = "FETCH_SESSION_ID_NOT_FOUND"
	// A partition reassignment (cluster topics reassign) is already under way.
	ReassignmentInProgress Code = "REASSIGNMENT_IN_PROGRESS"
	// DuplicateBrokerRegistration: a joining broker's id is already
	// registered by another broker (brokerd --join, cluster brokers add).
	DuplicateBrokerRegistration Code = "DUPLICATE_BROKER_REGISTRATION"
	// The transaction coordinator (internal/txn).
	InvalidTxnState              Code = "INVALID_TXN_STATE"
	InvalidProducerIDMapping     Code = "INVALID_PRODUCER_ID_MAPPING"
	InvalidTransactionTimeout    Code = "INVALID_TRANSACTION_TIMEOUT"
	ConcurrentTransactions       Code = "CONCURRENT_TRANSACTIONS"
	TransactionCoordinatorFenced Code = "TRANSACTION_COORDINATOR_FENCED"
	OperationNotAttempted        Code = "OPERATION_NOT_ATTEMPTED"
	ProducerFenced               Code = "PRODUCER_FENCED"
	TransactionalIDNotFound      Code = "TRANSACTIONAL_ID_NOT_FOUND"
	// OffsetFetch with require_stable of a partition whose transactional
	// offsets are pending (KIP-447): the client retries.
	UnstableOffsetCommit Code = "UNSTABLE_OFFSET_COMMIT"
)

// retriable lists the codes for which Kafka's client retries the same request
// (after refreshing metadata where the leader moved).
var retriable = map[Code]bool{
	LeaderNotAvailable:           true,
	NotLeaderOrFollower:          true,
	RequestTimedOut:              true,
	BrokerNotAvailable:           true,
	NotEnoughReplicas:            true,
	NotEnoughReplicasAfterAppend: true,
	NotController:                true,
	KafkaStorageError:            true,
	CoordinatorNotAvailable:      true,
	NotCoordinator:               true,
	CoordinatorLoadInProgress:    true,
	UnknownTopicOrPartition:      true,
	CorruptMessage:               true,
	FencedLeaderEpoch:            true,
	UnknownLeaderEpoch:           true,
	FetchSessionIDNotFound:       true,
	ConcurrentTransactions:       true,
	UnstableOffsetCommit:         true,
}

// Retriable reports whether a request that failed with c may succeed if sent again.
func (c Code) Retriable() bool { return retriable[c] }

// grpcCode is the gRPC status code a Kafka error travels under. Clients do not
// rely on it (they read the detail); it keeps generic gRPC tools meaningful.
func (c Code) grpcCode() codes.Code {
	switch c {
	case UnknownTopicOrPartition, UnknownTopicID, UnknownMemberID, UnknownProducerID, GroupIDNotFound, TransactionalIDNotFound:
		return codes.NotFound
	case TopicAlreadyExists, DuplicateBrokerRegistration:
		return codes.AlreadyExists
	case OffsetOutOfRange:
		return codes.OutOfRange
	case RecordTooLarge, InvalidTopic, InvalidRequiredAcks, InvalidPartitions,
		InvalidReplicationFactor, InvalidConfig, InvalidRequest, CorruptMessage, MemberIDRequired,
		InvalidSessionTimeout, InconsistentGroupProtocol, InvalidGroupID, InvalidRecord, UnsupportedCompressionType,
		PolicyViolation, InvalidReplicaAssignment, UnsupportedVersion, InvalidTransactionTimeout:
		return codes.InvalidArgument
	case RequestTimedOut:
		return codes.DeadlineExceeded
	case LeaderNotAvailable, BrokerNotAvailable, NotEnoughReplicas, CoordinatorNotAvailable, CoordinatorLoadInProgress:
		return codes.Unavailable
	case NotLeaderOrFollower, NotController, NotCoordinator, IllegalGeneration,
		RebalanceInProgress, NotEnoughReplicasAfterAppend, OutOfOrderSequenceNumber, InvalidProducerEpoch, NonEmptyGroup,
		FencedLeaderEpoch, UnknownLeaderEpoch, FetchSessionIDNotFound, ReassignmentInProgress,
		InvalidTxnState, InvalidProducerIDMapping, ConcurrentTransactions, TransactionCoordinatorFenced, OperationNotAttempted, ProducerFenced, UnstableOffsetCommit:
		return codes.FailedPrecondition
	}
	return codes.Internal
}

// Error is a Kafka error with its context. The embedded detail is what travels
// over the wire.
type Error struct {
	Detail *tapesv1.ErrorDetail
}

// New returns an Error with code and a message naming the offending value.
func New(code Code, format string, args ...any) *Error {
	return &Error{Detail: &tapesv1.ErrorDetail{
		Code:      string(code),
		Message:   fmt.Sprintf(format, args...),
		Retriable: code.Retriable(),
	}}
}

// NotLeader returns NOT_LEADER_OR_FOLLOWER with the leader this broker knows
// (-1 and "" when it knows none).
func NotLeader(leaderID int32, leaderAddr string, epoch int64, format string, args ...any) *Error {
	e := New(NotLeaderOrFollower, format, args...)
	e.Detail.LeaderId = leaderID
	e.Detail.LeaderAddress = leaderAddr
	e.Detail.LeaderEpoch = epoch
	return e
}

// OutOfRange returns OFFSET_OUT_OF_RANGE with the partition's current bounds.
func OutOfRange(offset, logStart, highWatermark int64) *Error {
	e := New(OffsetOutOfRange, "offset %d is outside [%d, %d]", offset, logStart, highWatermark)
	e.Detail.LogStartOffset = logStart
	e.Detail.HighWatermark = highWatermark
	return e
}

// FromDetail wraps a detail received in a per-item result; nil stays nil.
func FromDetail(d *tapesv1.ErrorDetail) error {
	if d == nil || d.Code == "" {
		return nil
	}
	return &Error{Detail: d}
}

// Code returns the Kafka error name.
func (e *Error) Code() Code { return Code(e.Detail.GetCode()) }

func (e *Error) Error() string {
	if e.Detail.GetMessage() == "" {
		return e.Detail.GetCode()
	}
	return e.Detail.GetCode() + ": " + e.Detail.GetMessage()
}

// CodeOf returns the Kafka error name carried by err (wrapped or not), or ""
// when err carries none.
func CodeOf(err error) Code {
	var ke *Error
	if errors.As(err, &ke) {
		return ke.Code()
	}
	return ""
}

// Is reports whether err carries the Kafka error code.
func Is(err error, code Code) bool { return err != nil && CodeOf(err) == code }

// As returns the *Error inside err, if any.
func As(err error) (*Error, bool) {
	var ke *Error
	ok := errors.As(err, &ke)
	return ke, ok
}

// ToStatus converts a handler's error into a gRPC status error carrying an
// ErrorDetail. An error that carries no Kafka name becomes
// UNKNOWN_SERVER_ERROR (or REQUEST_TIMED_OUT for a context deadline) with the
// original text as message.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		if _, isK := As(err); !isK {
			return err // already a gRPC status (e.g. from a forwarded call)
		}
	}
	ke, ok := As(err)
	if !ok {
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			ke = New(RequestTimedOut, "%v", err)
		case errors.Is(err, context.Canceled):
			return status.Error(codes.Canceled, err.Error())
		default:
			ke = New(UnknownServerError, "%v", err)
		}
	}
	st := status.New(ke.Code().grpcCode(), ke.Error())
	if withDetail, derr := st.WithDetails(ke.Detail); derr == nil {
		st = withDetail
	}
	return st.Err()
}

// FromStatus converts an error returned by a gRPC call: a status carrying an
// ErrorDetail becomes *Error; anything else is returned unchanged.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		if ed, ok := d.(*tapesv1.ErrorDetail); ok {
			return &Error{Detail: ed}
		}
	}
	return err
}
