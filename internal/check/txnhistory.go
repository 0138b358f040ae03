package check

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"
)

// A transactional history is a JSON-lines file, one TxnLine per line,
// written by the processes of a transactional pipeline (a transactional
// producer, a read-process-write processor, a reader with an isolation
// level, an external sink) and read by Check through Input.TxnHistories.
// It sits beside the producer and consumer histories, which keep their
// format: a run without transactional histories is checked exactly as
// before. Several processes may write one file, or each its own; lines of
// one process appear in the order it wrote them. The format and what the
// checker derives from it are in doc.go and ARCHITECTURE.md
// ("Transactional histories").

// TxnLine types.
const (
	// TxnBegin: Process began transaction Txn of TransactionalID at
	// ProducerID/Epoch.
	TxnBegin = "begin"
	// TxnSend: a record (EventID, Topic, Partition, Offset, Status, Error)
	// sent inside Txn. Offset is -1 when unknown.
	TxnSend = "send"
	// TxnEnd: the end of Txn: Outcome "commit" or "abort", Status
	// "requested" (written before EndTxn is sent), "ok" (answered without
	// error: the outcome is known), "error" (Error names it) or "unknown"
	// (no answer). The requested line is what makes "never committed"
	// sound: a transaction without any end line of outcome commit was never
	// asked to commit, so it cannot have committed.
	TxnEnd = "end"
	// TxnIsolation: Process reads with Isolation from here on (its read
	// lines in the same file follow it).
	TxnIsolation = "isolation"
	// TxnRead: Process read the record EventID at Topic/Partition/Offset
	// (with the level of its last isolation line).
	TxnRead = "read"
	// TxnStep: a read-process-write step: inside Txn, Process consumed
	// Inputs (and committed their offsets in the transaction); its outputs
	// are Txn's send lines.
	TxnStep = "step"
	// TxnLSO: a read_committed Process observed, at At, partition
	// Topic/Partition's last stable offset LSO and high watermark HW.
	TxnLSO = "lso"
	// TxnEffect: an external sink (Process names it) applied the effect of
	// input InputEventID once.
	TxnEffect = "effect"
)

// Isolation levels, Kafka's names.
const (
	ReadCommitted   = "read_committed"
	ReadUncommitted = "read_uncommitted"
)

// End outcomes and statuses.
const (
	OutcomeCommit = "commit"
	OutcomeAbort  = "abort"
	EndRequested  = "requested"
	EndOK         = "ok"
	EndError      = "error"
	EndUnknown    = "unknown"
	SendOK        = "ok"
	SendError     = "error"
)

// TxnLine is one line of a transactional history. Only the fields of its
// Type are set; the others are omitted.
type TxnLine struct {
	Type    string    `json:"type"`
	Process string    `json:"process"`
	At      time.Time `json:"at"`
	// Txn names one transaction, unique in the run (the writer's choice,
	// e.g. TRANSACTIONAL_ID/EPOCH/N): begin, send, end, step.
	Txn             string `json:"txn,omitempty"`
	TransactionalID string `json:"transactional_id,omitempty"`
	ProducerID      *int64 `json:"producer_id,omitempty"`
	Epoch           *int16 `json:"epoch,omitempty"`
	// Outcome and Status: end ("commit"/"abort"; "requested", "ok",
	// "error", "unknown") and send ("ok", "error").
	Outcome string `json:"outcome,omitempty"`
	Status  string `json:"status,omitempty"`
	// Error is the Kafka error name of a failed send or end.
	Error     string  `json:"error,omitempty"`
	Topic     string  `json:"topic,omitempty"`
	Partition *int32  `json:"partition,omitempty"`
	Offset    *int64  `json:"offset,omitempty"`
	EventID   string  `json:"event_id,omitempty"`
	Key       *string `json:"key,omitempty"`
	// Isolation: isolation (read_committed or read_uncommitted).
	Isolation string `json:"isolation,omitempty"`
	// Inputs: step, the input records consumed.
	Inputs []TxnInput `json:"inputs,omitempty"`
	// LSO and HW: lso.
	LSO *int64 `json:"lso,omitempty"`
	HW  *int64 `json:"hw,omitempty"`
	// InputEventID: effect.
	InputEventID string `json:"input_event_id,omitempty"`
}

// TxnInput is one input record of a read-process-write step.
type TxnInput struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	EventID   string `json:"event_id"`
}

// ReadTxnHistory reads a transactional history file. A torn last line (not
// ended by a newline, not JSON: the writer was killed mid-write) is
// ignored, as the producer and consumer histories' readers do. It fails on
// any other line that is not JSON, has an unknown type, or lacks a field
// its type requires, naming the file, the line and the field.
func ReadTxnHistory(path string) ([]TxnLine, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("transactional history: %w", err)
	}
	var lines []TxnLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		raw := sc.Bytes()
		var l TxnLine
		if err := json.Unmarshal(raw, &l); err != nil {
			if torn := !bytes.HasSuffix(b, []byte("\n")) && !sc.Scan(); torn {
				break
			}
			return nil, fmt.Errorf("transactional history %s: line %d: %w", path, n, err)
		}
		if err := l.validate(); err != nil {
			return nil, fmt.Errorf("transactional history %s: line %d: %w", path, n, err)
		}
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("transactional history %s: %w", path, err)
	}
	return lines, nil
}

// validate checks that l has the fields its type requires.
func (l TxnLine) validate() error {
	need := func(ok bool, field string) error {
		if !ok {
			return fmt.Errorf("a %s line without %s", l.Type, field)
		}
		return nil
	}
	if l.Process == "" {
		return need(false, "process")
	}
	switch l.Type {
	case TxnBegin:
		return need(l.Txn != "", "txn")
	case TxnSend:
		return errors.Join(need(l.Txn != "", "txn"), need(l.EventID != "", "event_id"),
			need(l.Partition != nil, "partition"), need(l.Offset != nil, "offset"),
			need(l.Status == SendOK || l.Status == SendError, `status "ok" or "error"`))
	case TxnEnd:
		return errors.Join(need(l.Txn != "", "txn"),
			need(l.Outcome == OutcomeCommit || l.Outcome == OutcomeAbort, `outcome "commit" or "abort"`),
			need(l.Status == EndRequested || l.Status == EndOK || l.Status == EndError || l.Status == EndUnknown,
				`status "requested", "ok", "error" or "unknown"`))
	case TxnIsolation:
		return need(l.Isolation == ReadCommitted || l.Isolation == ReadUncommitted, `isolation "read_committed" or "read_uncommitted"`)
	case TxnRead:
		return errors.Join(need(l.EventID != "", "event_id"), need(l.Partition != nil, "partition"), need(l.Offset != nil, "offset"))
	case TxnStep:
		for _, in := range l.Inputs {
			if in.EventID == "" {
				return need(false, "event_id in an input")
			}
		}
		return errors.Join(need(l.Txn != "", "txn"), need(len(l.Inputs) > 0, "inputs"))
	case TxnLSO:
		return errors.Join(need(l.Partition != nil, "partition"), need(l.LSO != nil, "lso"), need(l.HW != nil, "hw"), need(!l.At.IsZero(), "at"))
	case TxnEffect:
		return need(l.InputEventID != "", "input_event_id")
	default:
		return fmt.Errorf("unknown line type %q", l.Type)
	}
}
