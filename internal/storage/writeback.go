package storage

// writebackChunk is how many bytes a segment takes between two calls of
// startWriteback.
//
// Appends are not fsynced (the Raft log is the durable copy), so without
// this the page cache holds every byte written in the last half minute
// (Linux's dirty_expire_centisecs): at 150,000 records/s on 3 brokers that
// was 1.4 GB, flushed at once, and for the second or so the flush took,
// every raft-boltdb fsync queued behind it (StoreLogs stalls of 230-300 ms,
// commit stalls of 400-540 ms, producer p99 in seconds). Starting the
// writeback of each few MiB as it is written keeps the flushes small and
// steady.
const writebackChunk = 4 << 20
