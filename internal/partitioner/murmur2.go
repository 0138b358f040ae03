package partitioner

// seed is the seed Kafka's Utils.murmur2 uses.
const seed uint32 = 0x9747b28c

// Murmur2 returns the 32-bit MurmurHash2 of data exactly as Kafka's Java
// Utils.murmur2 computes it (seed 0x9747b28c, little-endian 4-byte blocks),
// including its signed result.
func Murmur2(data []byte) int32 {
	const (
		m = 0x5bd1e995
		r = 24
	)
	n := len(data)
	h := seed ^ uint32(n)

	for len(data) >= 4 {
		k := uint32(data[0]) | uint32(data[1])<<8 | uint32(data[2])<<16 | uint32(data[3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
		data = data[4:]
	}

	// The tail: Java's switch falls through from 3 to 1.
	switch len(data) {
	case 3:
		h ^= uint32(data[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[0])
		h *= m
	}

	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// ToPositive clears the sign bit (Kafka's Utils.toPositive). It is not
// Math.abs: ToPositive(math.MinInt32) is 0.
func ToPositive(n int32) int32 { return n & 0x7fffffff }

// ForKey returns the partition of a keyed record among partitions (Kafka's
// BuiltInPartitioner.partitionForKey). partitions must be positive.
func ForKey(key []byte, partitions int32) int32 {
	if partitions <= 0 {
		panic("partitioner: ForKey with no partitions")
	}
	return ToPositive(Murmur2(key)) % partitions
}
