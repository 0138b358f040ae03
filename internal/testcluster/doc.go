// Package testcluster starts real brokerd processes for end-to-end tests and
// benchmarks: it builds the binaries once, launches a cluster on loopback
// ports the kernel picks in a temporary directory, and offers the checks the
// tests share (read a partition back, wait for an ISR, compare replicas' log
// files byte for byte). Every process is stopped by PID in the test's cleanup.
package testcluster
