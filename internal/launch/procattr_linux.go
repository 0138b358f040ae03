package launch

import "syscall"

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
