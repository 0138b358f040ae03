// Package launchtest is a stand-in brokerd for the tests of code that
// launches brokers (internal/launch, `cluster up`): a test binary that calls
// MainIfRequested first thing becomes a fake brokerd when started with
// EnvVar=1. The fake keeps brokerd's command-line contract (--id, --data-dir,
// --listen or --listen-fd, --advertise, --peers), serves BrokerService
// Metadata and CreateTopics, and leaves evidence of what it was given in its
// data dir. It replicates nothing; it exists to make process handling
// observable, and must never be imported by a binary.
package launchtest
