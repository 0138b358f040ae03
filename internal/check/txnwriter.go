package check

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"
)

// TxnHistoryWriter appends TxnLine lines to a transactional history file,
// one write per line (a line is whole, or torn by a kill, never
// interleaved with another), safe for concurrent use. A nil writer writes
// nothing.
type TxnHistoryWriter struct {
	mu sync.Mutex
	f  *os.File
}

// CreateTxnHistory opens path for appending (created if missing: a
// restarted process continues its history).
func CreateTxnHistory(path string) (*TxnHistoryWriter, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("transactional history: %w", err)
	}
	return &TxnHistoryWriter{f: f}, nil
}

// Write appends l (At now when zero).
func (h *TxnHistoryWriter) Write(l TxnLine) error {
	if h == nil {
		return nil
	}
	if l.At.IsZero() {
		l.At = time.Now()
	}
	l.At = l.At.UTC().Truncate(time.Microsecond)
	if err := l.validate(); err != nil {
		return fmt.Errorf("transactional history: %w", err)
	}
	b, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("transactional history: %w", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, err := h.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("transactional history: %w", err)
	}
	return nil
}

// Close closes the file; a nil writer has nothing to close.
func (h *TxnHistoryWriter) Close() error {
	if h == nil {
		return nil
	}
	return h.f.Close()
}
