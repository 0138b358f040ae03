package storage

import "errors"

// Errors returned by this package. They are wrapped with context; match them
// with errors.Is.
var (
	// ErrCorruptBatch is returned when a batch, or a frame stored around it,
	// fails its length, structure or CRC32C check.
	ErrCorruptBatch = errors.New("corrupt record batch")

	// ErrBatchTooLarge is returned by Append for a batch a frame cannot hold
	// (its length field is an int32).
	ErrBatchTooLarge = errors.New("record batch too large")

	// ErrAlreadyApplied is returned by Append and DeleteBefore when the Raft
	// index is at or below LastRaftIndex: the entry's effect is already in
	// the log, and nothing was changed. An FSM replaying its Raft log after a
	// restart treats it as done.
	ErrAlreadyApplied = errors.New("raft index already applied")

	// ErrOffsetOutOfRange is returned by Read for an offset below StartOffset
	// or above EndOffset.
	ErrOffsetOutOfRange = errors.New("offset out of range")

	// ErrBadSnapshot is returned by Restore for a stream that is not a
	// complete, valid snapshot. The log is left as it was.
	ErrBadSnapshot = errors.New("invalid log snapshot")

	// ErrClosed is returned by every method called after Close, or after a
	// Restore that failed half-way through its swap.
	ErrClosed = errors.New("log closed")
)
