//go:build unix && !linux

package launch

import (
	"os/exec"
	"syscall"
	"time"
)

// childAttrs puts a broker in its own process group, so that a terminal's
// Ctrl-C reaches only the launcher, which then stops the brokers itself.
// (This system has no parent-death signal: brokers outlive a launcher that
// is killed with SIGKILL, and the next Start refuses until they are gone.)
func childAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// startWithTimerSlack starts cmd; this system has no per-thread timer slack
// to hand down.
func startWithTimerSlack(cmd *exec.Cmd, _ time.Duration) error { return cmd.Start() }
