package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tapes-dev/tapes/internal/launch"
)

// dataDirLockName is the lock file brokerd keeps in its data directory.
const dataDirLockName = "brokerd.lock"

// lockDataDir takes the data directory's lock (created with the directory
// if missing) before anything in it is opened, so that a second brokerd on
// the same directory fails at once with the first one's PID instead of
// blocking, silent, in bbolt's file lock. The lock holds until the returned
// file is closed or the process dies. Called once, from run, before the
// broker starts.
func lockDataDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--data-dir %s: %w", dir, err)
	}
	f, holder, err := launch.LockPIDFile(filepath.Join(dir, dataDirLockName))
	switch {
	case errors.Is(err, launch.ErrPIDFileLocked) && holder > 0:
		return nil, fmt.Errorf("data dir %s is in use by pid %d (another brokerd); stop it first or use another --data-dir", dir, holder)
	case errors.Is(err, launch.ErrPIDFileLocked):
		return nil, fmt.Errorf("data dir %s is in use by another process; stop it first or use another --data-dir", dir)
	case err != nil:
		return nil, fmt.Errorf("--data-dir %s: %w", dir, err)
	}
	return f, nil
}
