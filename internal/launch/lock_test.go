package launch

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// failingFile fails the write that follows a successful truncate.
type failingFile struct{ truncated bool }

var errDiskFull = errors.New("no space left on device")

func (f *failingFile) Truncate(int64) error { f.truncated = true; return nil }
func (f *failingFile) WriteAt([]byte, int64) (int, error) {
	return 0, errDiskFull
}

// The PID write's error reaches lockDir's caller (it was dropped: the
// WriteAt's err shadowed the one checked after it).
func TestWritePIDReportsAFailedWrite(t *testing.T) {
	f := &failingFile{}
	if err := writePID(f, 42); !errors.Is(err, errDiskFull) || !f.truncated {
		t.Fatalf("writePID = %v (truncated %v); want the write's error", err, f.truncated)
	}
}

func TestLauncherReadsTheLockFile(t *testing.T) {
	dir := t.TempDir()
	if _, _, known := Launcher(dir); known {
		t.Fatalf("no lock file: known")
	}
	l, err := lockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if pid, alive, known := Launcher(dir); pid != os.Getpid() || !alive || !known {
		t.Fatalf("held lock: Launcher = %d, %v, %v; want this process, alive", pid, alive, known)
	}
	if err := l.release(); err != nil {
		t.Fatal(err)
	}
	if pid, alive, known := Launcher(dir); pid != 0 || alive || !known {
		t.Fatalf("released lock: Launcher = %d, %v, %v; want pid 0, known", pid, alive, known)
	}
	// A launcher that was killed leaves its PID behind.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skipf("cannot run true: %v", err)
	}
	dead := cmd.Process.Pid
	if err := os.WriteFile(filepath.Join(dir, LockName), []byte(strconv.Itoa(dead)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if pid, alive, known := Launcher(dir); pid != dead || alive || !known {
		t.Fatalf("killed launcher: Launcher = %d, %v, %v; want pid %d, not alive", pid, alive, known, dead)
	}
}
