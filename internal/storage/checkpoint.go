package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

const checkpointName = "checkpoint.json"

// checkpoint is DIR/checkpoint.json: what the segments alone cannot tell.
// It is replaced atomically (temporary file, fsync, rename, fsync of the
// directory), so a crash leaves either the old or the new one.
type checkpoint struct {
	Version int `json:"version"`
	// LogStartOffset is the first retained offset. Segments wholly below it
	// are garbage (a crash may have left them) and Open deletes them.
	LogStartOffset int64 `json:"log_start_offset"`
	// RaftIndex is the Raft index of the entry that last moved
	// LogStartOffset (a DeleteBefore), or of the snapshot restored.
	RaftIndex uint64 `json:"raft_index"`
}

const checkpointVersion = 1

// readCheckpoint reads DIR/checkpoint.json; a missing file is a zero
// checkpoint (a new log).
func readCheckpoint(dir string) (checkpoint, error) {
	b, err := os.ReadFile(filepath.Join(dir, checkpointName))
	if errors.Is(err, os.ErrNotExist) {
		return checkpoint{Version: checkpointVersion}, nil
	}
	if err != nil {
		return checkpoint{}, fmt.Errorf("read checkpoint: %w", err)
	}
	var c checkpoint
	if err := json.Unmarshal(b, &c); err != nil {
		return checkpoint{}, fmt.Errorf("parse %s: %w", filepath.Join(dir, checkpointName), err)
	}
	if c.Version != checkpointVersion {
		return checkpoint{}, fmt.Errorf("%s: version %d, want %d", filepath.Join(dir, checkpointName), c.Version, checkpointVersion)
	}
	return c, nil
}

func writeCheckpoint(dir string, c checkpoint) error {
	c.Version = checkpointVersion
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, checkpointName)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = SyncFile(f, FsyncCheckpoint)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	return SyncDir(dir)
}

// SyncDir fsyncs a directory, making the creation, removal and renaming of
// its entries durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync dir: %w", err)
	}
	err = SyncFile(d, FsyncDir)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}
