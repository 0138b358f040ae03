// Package experiment owns the built-in chaos experiments and their runner:
// each starts a fresh 3-broker cluster with a fault-injection link on every
// ordered pair of processes (internal/launch), runs a workload of real
// producerd and consumerd processes, applies a fault schedule (process
// signals and link cuts the processes know nothing about), collects every
// history, reads each partition back in full, runs the checker
// (internal/check) against the experiment's expectation, and writes
// check.json and an HTML report (internal/report) into the output
// directory. `chaos run` and `chaos list` are its command line.
package experiment
