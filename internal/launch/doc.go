// Package launch starts and supervises the brokers of a local tapes cluster
// as child processes: it binds every broker's listening socket itself (so
// ports are known before any broker starts and every broker gets the full
// --peers list), hands each socket to its brokerd as file descriptor 3,
// appends each child's output to DIR/logs/broker-N.log, keeps
// DIR/cluster.json current, and applies process faults by signal (kill,
// stop, pause, resume, restart on the same data dir and port).
//
// One launcher owns a cluster directory at a time (DIR/launcher.lock).
// Running Start again on a directory that holds a cluster.json restarts the
// same cluster: same broker ids, data dirs and, where they can be bound
// again, ports.
//
// The package needs a Unix system: it uses process groups and job-control
// signals. On Linux the brokers also die with their launcher (parent-death
// signal), so a crashed launcher leaves no broker behind.
package launch
