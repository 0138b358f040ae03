// Package systest holds the end-to-end tests of tapes: real brokerd
// processes, started by internal/launch on loopback ports the kernel picks,
// in temporary directories, driven through internal/client. Faults are real
// too: SIGKILL, SIGSTOP/SIGCONT and restarts of the broker processes.
//
// The package has no non-test code beyond this comment.
package systest
