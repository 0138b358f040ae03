package launch

import (
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// childAttrs puts a broker in its own process group, so that a terminal's
// Ctrl-C reaches only the launcher (which then stops the brokers itself), and
// asks the kernel to send it SIGTERM if the launcher dies first, so that a
// crashed launcher leaves no broker holding the directory and its ports.
// (The kernel ties that signal to the thread that forked; the Go runtime only
// ends a thread when a goroutine locked to it exits, which this package never
// does around Start or Restart.)
func childAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}

// startWithTimerSlack starts cmd from a thread whose timer slack is slack,
// so that the child and every thread it creates inherit it (Linux keeps a
// thread's timer slack across clone and execve), and puts this thread's
// own slack back. The thread stays locked only around the fork: a thread
// whose locked goroutine exits would end, and with it the children's
// parent-death signal (see childAttrs).
func startWithTimerSlack(cmd *exec.Cmd, slack time.Duration) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	old, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		return cmd.Start()
	}
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(slack.Nanoseconds()), 0, 0, 0); err != nil {
		return cmd.Start()
	}
	defer func() { _ = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(old), 0, 0, 0) }()
	return cmd.Start()
}
