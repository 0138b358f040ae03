// Package partitioner owns the choice of partition for a record, the way
// Kafka's Java producer makes it: keyed records go to
// murmur2(key) mod partitions (bit-compatible with Kafka's Utils.murmur2, so a
// key lands on the same partition as with the Java client), and keyless
// records use the sticky partitioner (KIP-480/KIP-794), which fills one batch
// on one partition before moving on.
package partitioner
