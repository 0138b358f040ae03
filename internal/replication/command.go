package replication

import (
	"encoding/binary"
	"fmt"

	"github.com/tapes-dev/tapes/internal/storage"
)

// The partition's Raft entries. The first byte names the kind.
//
//	cmdBatch:        kind | requestID uint64 | storage.Batch
//	cmdDeleteBefore: kind | offset int64
//
// requestID lets the leader's log store recognise an entry it just wrote
// (acks=1 answers at that moment); 0 means nobody waits.
const (
	cmdBatch        byte = 1
	cmdDeleteBefore byte = 2

	batchCmdHeader = 9 // kind and requestID: where a cmdBatch's batch begins
)

func encodeBatchCmd(requestID uint64, b storage.Batch) []byte {
	out := make([]byte, 9+len(b))
	out[0] = cmdBatch
	binary.BigEndian.PutUint64(out[1:9], requestID)
	copy(out[9:], b)
	return out
}

func encodeDeleteBeforeCmd(offset int64) []byte {
	out := make([]byte, 9)
	out[0] = cmdDeleteBefore
	binary.BigEndian.PutUint64(out[1:9], uint64(offset))
	return out
}

// decodedCmd is a parsed entry.
type decodedCmd struct {
	kind      byte
	requestID uint64
	batch     storage.Batch
	offset    int64
}

func decodeCmd(data []byte) (decodedCmd, error) {
	if len(data) < 9 {
		return decodedCmd{}, fmt.Errorf("partition command of %d bytes is too short", len(data))
	}
	c := decodedCmd{kind: data[0]}
	switch c.kind {
	case cmdBatch:
		c.requestID = binary.BigEndian.Uint64(data[1:9])
		c.batch = storage.Batch(data[9:])
	case cmdDeleteBefore:
		c.offset = int64(binary.BigEndian.Uint64(data[1:9]))
	default:
		return decodedCmd{}, fmt.Errorf("unknown partition command kind %d", c.kind)
	}
	return c, nil
}

// peekBatchCmd returns the request id and record count of a batch entry
// without validating it, and whether it is a plain batch (no producer id:
// the FSM appends all of it); ok is false for any other entry.
func peekBatchCmd(data []byte) (requestID uint64, count int, plain, ok bool) {
	if len(data) < 9 || data[0] != cmdBatch {
		return 0, 0, false, false
	}
	b := storage.Batch(data[9:])
	return binary.BigEndian.Uint64(data[1:9]), b.Count(), b.Producer().ID < 0, true
}
