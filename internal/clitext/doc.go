// Package clitext holds the text the operator CLI prints for topics and
// consumer groups, in the shape of kafka-topics --describe and
// kafka-consumer-groups --describe, as pure functions of what the cluster
// answered: `cluster topics describe`, `cluster groups describe` and the
// live page (internal/dashboard) print the same bytes from the same
// answers.
package clitext
