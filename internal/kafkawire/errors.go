package kafkawire

import (
	"context"
	"errors"

	fkerr "github.com/twmb/franz-go/pkg/kerr"

	"github.com/tapes-dev/tapes/internal/kerr"
)

// Sentinel errors. A connection closes with one of these (wrapped with the
// offending value) and the server goes on serving every other connection.
var (
	// ErrFrameTooLarge: a frame's size prefix is negative or above
	// Config.MaxRequestBytes (Kafka's socket.request.max.bytes).
	ErrFrameTooLarge = errors.New("kafkawire: frame size out of range")
	// ErrTruncatedFrame: the connection ended inside a frame.
	ErrTruncatedFrame = errors.New("kafkawire: truncated frame")
	// ErrUnknownAPIKey: the request's API key is not registered (or not
	// known to kmsg at all).
	ErrUnknownAPIKey = errors.New("kafkawire: unknown API key")
	// ErrUnsupportedVersion: the request's version is outside the range
	// registered for its key (ApiVersions excepted: it is answered with
	// UNSUPPORTED_VERSION, KIP-511).
	ErrUnsupportedVersion = errors.New("kafkawire: unsupported API version")
	// ErrMalformedRequest: the header or body does not decode, or does not
	// encode back to the bytes sent (a negative length of a non-nullable
	// array or string, a length below -1, trailing bytes).
	ErrMalformedRequest = errors.New("kafkawire: malformed request")
	// ErrBadReply: a handler returned a Reply the server cannot send (the
	// zero Reply, a response of another API key, Later inside Later).
	ErrBadReply = errors.New("kafkawire: bad handler reply")
	// ErrServerClosed: Serve returns it after Close.
	ErrServerClosed = errors.New("kafkawire: server closed")
)

// kafkaCodes maps tapes' error names (internal/kerr) to Kafka's wire codes
// (franz-go's pkg/kerr). Every kerr.Code has an entry; the test reads
// internal/kerr's source to keep it so. Kafka renamed
// NOT_LEADER_FOR_PARTITION to NOT_LEADER_OR_FOLLOWER (KIP-392): same code 6.
var kafkaCodes = map[kerr.Code]*fkerr.Error{
	kerr.UnknownServerError:           fkerr.UnknownServerError,
	kerr.OffsetOutOfRange:             fkerr.OffsetOutOfRange,
	kerr.CorruptMessage:               fkerr.CorruptMessage,
	kerr.UnknownTopicOrPartition:      fkerr.UnknownTopicOrPartition,
	kerr.UnknownTopicID:               fkerr.UnknownTopicID,
	kerr.LeaderNotAvailable:           fkerr.LeaderNotAvailable,
	kerr.NotLeaderOrFollower:          fkerr.NotLeaderForPartition,
	kerr.RequestTimedOut:              fkerr.RequestTimedOut,
	kerr.BrokerNotAvailable:           fkerr.BrokerNotAvailable,
	kerr.RecordTooLarge:               fkerr.MessageTooLarge,
	kerr.InvalidTopic:                 fkerr.InvalidTopicException,
	kerr.NotEnoughReplicas:            fkerr.NotEnoughReplicas,
	kerr.NotEnoughReplicasAfterAppend: fkerr.NotEnoughReplicasAfterAppend,
	kerr.InvalidRequiredAcks:          fkerr.InvalidRequiredAcks,
	kerr.TopicAlreadyExists:           fkerr.TopicAlreadyExists,
	kerr.InvalidPartitions:            fkerr.InvalidPartitions,
	kerr.InvalidReplicationFactor:     fkerr.InvalidReplicationFactor,
	kerr.InvalidConfig:                fkerr.InvalidConfig,
	kerr.NotController:                fkerr.NotController,
	kerr.InvalidRequest:               fkerr.InvalidRequest,
	kerr.KafkaStorageError:            fkerr.KafkaStorageError,
	kerr.PolicyViolation:              fkerr.PolicyViolation,
	kerr.InvalidReplicaAssignment:     fkerr.InvalidReplicaAssignment,
	kerr.FencedLeaderEpoch:            fkerr.FencedLeaderEpoch,
	kerr.UnknownLeaderEpoch:           fkerr.UnknownLeaderEpoch,
	kerr.InvalidRecord:                fkerr.InvalidRecord,
	kerr.UnsupportedCompressionType:   fkerr.UnsupportedCompressionType,
	kerr.CoordinatorNotAvailable:      fkerr.CoordinatorNotAvailable,
	kerr.NotCoordinator:               fkerr.NotCoordinator,
	kerr.IllegalGeneration:            fkerr.IllegalGeneration,
	kerr.UnknownMemberID:              fkerr.UnknownMemberID,
	kerr.RebalanceInProgress:          fkerr.RebalanceInProgress,
	kerr.MemberIDRequired:             fkerr.MemberIDRequired,
	kerr.CoordinatorLoadInProgress:    fkerr.CoordinatorLoadInProgress,
	kerr.InvalidSessionTimeout:        fkerr.InvalidSessionTimeout,
	kerr.InconsistentGroupProtocol:    fkerr.InconsistentGroupProtocol,
	kerr.InvalidGroupID:               fkerr.InvalidGroupID,
	kerr.GroupIDNotFound:              fkerr.GroupIDNotFound,
	kerr.NonEmptyGroup:                fkerr.NonEmptyGroup,
	kerr.UnsupportedVersion:           fkerr.UnsupportedVersion,
	kerr.OutOfOrderSequenceNumber:     fkerr.OutOfOrderSequenceNumber,
	kerr.InvalidProducerEpoch:         fkerr.InvalidProducerEpoch,
	kerr.UnknownProducerID:            fkerr.UnknownProducerID,
	kerr.FetchSessionIDNotFound:       fkerr.FetchSessionIDNotFound,
	kerr.ReassignmentInProgress:       fkerr.ReassignmentInProgress,
	kerr.DuplicateBrokerRegistration:  fkerr.DuplicateBrokerRegistration,
	kerr.InvalidTxnState:              fkerr.InvalidTxnState,
	kerr.InvalidProducerIDMapping:     fkerr.InvalidProducerIDMapping,
	kerr.InvalidTransactionTimeout:    fkerr.InvalidTransactionTimeout,
	kerr.ConcurrentTransactions:       fkerr.ConcurrentTransactions,
	kerr.TransactionCoordinatorFenced: fkerr.TransactionCoordinatorFenced,
	kerr.OperationNotAttempted:        fkerr.OperationNotAttempted,
	kerr.ProducerFenced:               fkerr.ProducerFenced,
	kerr.TransactionalIDNotFound:      fkerr.TransactionalIDNotFound,
	kerr.UnstableOffsetCommit:         fkerr.UnstableOffsetCommit,
}

// ErrorCode is the Kafka error code a handler puts in a response field for
// err: 0 for nil, the code of the Kafka name err carries (internal/kerr),
// REQUEST_TIMED_OUT for a context deadline, UNKNOWN_SERVER_ERROR otherwise.
// It may be called from any goroutine.
func ErrorCode(err error) int16 {
	if err == nil {
		return 0
	}
	if code := kerr.CodeOf(err); code != "" {
		if ke, ok := kafkaCodes[code]; ok {
			return ke.Code
		}
		return fkerr.UnknownServerError.Code
	}
	var fe *fkerr.Error
	if errors.As(err, &fe) {
		return fe.Code
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fkerr.RequestTimedOut.Code
	}
	return fkerr.UnknownServerError.Code
}
