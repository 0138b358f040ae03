package launch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// LockName is the lock file inside the cluster directory. It holds the PID
// of the launcher that owns the directory; the lock itself is an flock(2) on
// it, which the kernel drops when that launcher dies, however it dies.
const LockName = "launcher.lock"

// dirLock is a held lock on a cluster directory.
type dirLock struct{ f *os.File }

// lockDir takes the directory's lock without waiting. When another launcher
// holds it the error wraps ErrLocked and names that launcher's PID.
func lockDir(dir string) (*dirLock, error) {
	f, holder, err := LockPIDFile(filepath.Join(dir, LockName))
	switch {
	case errors.Is(err, ErrPIDFileLocked):
		who := "another process"
		if holder > 0 {
			who = fmt.Sprintf("pid %d", holder)
		}
		return nil, fmt.Errorf("%w: %s: another launcher (%s), such as a `cluster up`, runs on it; stop that one first (Ctrl-C in its terminal) or use another directory",
			ErrLocked, dir, who)
	case err != nil:
		return nil, fmt.Errorf("launch: %w", err)
	}
	return &dirLock{f: f}, nil
}

// ErrPIDFileLocked: LockPIDFile found the file locked by another process.
var ErrPIDFileLocked = errors.New("locked by another process")

// LockPIDFile takes an exclusive flock(2) on path (created if missing)
// without waiting and writes this process's PID into it; the kernel drops
// the lock when the process dies, however it dies. Keep the returned file
// open for as long as the lock must hold. When another process holds it,
// the error wraps ErrPIDFileLocked and holder is the PID that process wrote
// (0 if unknown). The launcher locks its cluster directory with it, and
// brokerd its data directory.
func LockPIDFile(path string) (f *os.File, holder int, err error) {
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, 0, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			if b, rerr := os.ReadFile(path); rerr == nil {
				if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
					holder = pid
				}
			}
			return nil, holder, fmt.Errorf("%s: %w", path, ErrPIDFileLocked)
		}
		return nil, 0, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := writePID(f, os.Getpid()); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("write %s: %w", path, err)
	}
	return f, 0, nil
}

// lockFile is what writePID needs of the lock file (an *os.File; a fake in
// tests, to make the writes fail).
type lockFile interface {
	Truncate(size int64) error
	WriteAt(b []byte, off int64) (int, error)
}

// writePID replaces the lock file's content with pid and a newline.
func writePID(f lockFile, pid int) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(strconv.Itoa(pid)+"\n"), 0)
	return err
}

// Launcher reports the launcher that dir's lock file names: known is false
// when dir has no lock file (no launcher ever ran there, or the cluster was
// not started by one); otherwise pid is the launcher's PID (0 when the file
// is empty: the last launcher stopped cleanly) and alive whether that
// process still exists. It only reads the file: taking the lock, even for
// a moment, could make a `cluster up` starting at the same time fail.
// The operator commands call it to tell "the launcher is gone" from "the
// cluster does not answer".
func Launcher(dir string) (pid int, alive, known bool) {
	b, err := os.ReadFile(filepath.Join(dir, LockName))
	if err != nil {
		return 0, false, false
	}
	pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false, true
	}
	return pid, processAlive(pid), true
}

// release empties the file and drops the lock. The file stays: removing a
// locked file would let two launchers lock two different files of one name.
func (l *dirLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	terr := l.f.Truncate(0)
	cerr := l.f.Close()
	l.f = nil
	if err := errors.Join(terr, cerr); err != nil {
		return fmt.Errorf("launch: release lock: %w", err)
	}
	return nil
}

// processAlive reports whether a process with this PID exists (signal 0).
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
