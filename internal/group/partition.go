package group

import "unicode/utf16"

// OffsetsTopic is the internal topic holding committed offsets and group
// metadata.
const OffsetsTopic = "__consumer_offsets"

// PartitionFor returns the partition of __consumer_offsets (of n) that
// holds groupID, as Kafka computes it: Utils.abs(groupId.hashCode()) % n,
// with Java's String.hashCode over UTF-16 code units.
func PartitionFor(groupID string, n int32) int32 {
	var h int32
	for _, u := range utf16.Encode([]rune(groupID)) {
		h = 31*h + int32(u)
	}
	if h == -1<<31 {
		h = 0
	} else if h < 0 {
		h = -h
	}
	return h % n
}
