package partitioner

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestMurmur2MatchesKafka checks the vectors of Kafka's own unit test,
// clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java
// (testMurmur2), plus values printed by running Kafka's Java Utils.murmur2
// (kafkajs keeps them in src/producer/partitioners/defaultJava/murmur2.spec.js,
// generated with its defaultJava/Test.java against the Java client). Together
// they cover every tail length (0 to 3 bytes after the 4-byte blocks).
func TestMurmur2MatchesKafka(t *testing.T) {
	cases := []struct {
		in   string
		want int32
	}{
		// UtilsTest.testMurmur2.
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"a-little-bit-longer-string", -1486304829},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
		{"abc", 479470107},
		// Java Utils.murmur2 output (kafkajs defaultJava vectors).
		{"0", 971027396},
		{"1", -1993445489},
		{"128", -326012175},
		{"2187", -1508407203},
		{"16384", -325739742},
		{"78125", -1654490814},
		{"279936", 1462227128},
		{"823543", -2014198330},
		{"2097152", 607668903},
		{"10000000", -1830336757},
		{"170859375", -1658323481},
		{"100:48069", 1009543857},
	}
	for _, c := range cases {
		if got := Murmur2([]byte(c.in)); got != c.want {
			t.Errorf("Murmur2(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestToPositiveClearsTheSignBitOnly(t *testing.T) {
	for in, want := range map[int32]int32{
		0: 0, 7: 7, -1: math.MaxInt32, math.MinInt32: 0, math.MaxInt32: math.MaxInt32, -973932308: 1173551340,
	} {
		if got := ToPositive(in); got != want {
			t.Errorf("ToPositive(%d) = %d, want %d", in, got, want)
		}
	}
}

// TestForKeyMatchesJavaPartitioner uses keys whose partition Kafka's
// BuiltInPartitioner.partitionForKey gives for 10 partitions ("a"→4, "b"→6,
// "c"→4, "d"→3, "e"→4, as a Spock spec running the Java client asserts), and
// keys whose hash is negative, where toPositive (not abs) matters.
func TestForKeyMatchesJavaPartitioner(t *testing.T) {
	for key, want := range map[string]int32{"a": 4, "b": 6, "c": 4, "d": 3, "e": 4} {
		if got := ForKey([]byte(key), 10); got != want {
			t.Errorf("ForKey(%q, 10) = %d, want %d", key, got, want)
		}
	}
	// "21" hashes to -973932308: toPositive gives 1173551340, and
	// 1173551340 mod 7 = 3, whereas abs would give 973932308 mod 7 = 6.
	if got := ForKey([]byte("21"), 7); got != 3 {
		t.Errorf("ForKey(\"21\", 7) = %d, want 3", got)
	}
	if got := ForKey([]byte("anything"), 1); got != 0 {
		t.Errorf("one partition: got %d", got)
	}
}

func TestStickyStaysUntilBatchFullThenMoves(t *testing.T) {
	s := NewSticky(rand.New(rand.NewPCG(1, 2)))
	const n = 6
	first := s.Next(n, false)
	for i := 0; i < 100; i++ {
		if p := s.Next(n, false); p != first {
			t.Fatalf("moved from %d to %d before the batch was full", first, p)
		}
	}
	seen := map[int32]bool{first: true}
	prev := first
	for i := 0; i < 500; i++ {
		p := s.Next(n, true)
		if p == prev {
			t.Fatalf("batch full: stayed on %d", p)
		}
		if p < 0 || p >= n {
			t.Fatalf("partition %d out of [0,%d)", p, n)
		}
		if again := s.Next(n, false); again != p {
			t.Fatalf("did not stick: %d then %d", p, again)
		}
		seen[p] = true
		prev = p
	}
	if len(seen) != n {
		t.Fatalf("500 moves visited only %d of %d partitions: %v", len(seen), n, seen)
	}
}

func TestStickyEdgeCases(t *testing.T) {
	var s Sticky // zero value works
	for i := 0; i < 10; i++ {
		if p := s.Next(1, true); p != 0 {
			t.Fatalf("one partition: got %d", p)
		}
	}
	// Two partitions: a full batch always flips.
	s2 := NewSticky(rand.New(rand.NewPCG(3, 4)))
	p := s2.Next(2, false)
	for i := 0; i < 20; i++ {
		q := s2.Next(2, true)
		if q != 1-p {
			t.Fatalf("two partitions: from %d to %d", p, q)
		}
		p = q
	}
	// The partition count shrinking below the current one forces a new choice.
	s3 := NewSticky(rand.New(rand.NewPCG(5, 6)))
	for s3.Next(8, true) < 4 {
	}
	if p := s3.Next(4, false); p >= 4 {
		t.Fatalf("after shrinking to 4 partitions got %d", p)
	}
}
