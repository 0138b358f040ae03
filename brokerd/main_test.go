package main

import (
	"strings"
	"testing"
)

// TestKafkaListenerFlags: --kafka-listen, --kafka-listen-fd and
// --kafka-advertise together: off when none is given, the bound address
// advertised by default, and a clear error for what Kafka clients could
// not use.
func TestKafkaListenerFlags(t *testing.T) {
	lis, adv, err := kafkaListener("", -1, "")
	if lis != nil || adv != "" || err != nil {
		t.Fatalf("no flags = %v, %q, %v; want Kafka off", lis, adv, err)
	}
	lis, adv, err = kafkaListener("127.0.0.1:0", -1, "")
	if err != nil {
		t.Fatal(err)
	}
	if adv != lis.Addr().String() || strings.HasSuffix(adv, ":0") {
		t.Fatalf("advertised %q, bound %s", adv, lis.Addr())
	}
	lis.Close()
	lis, adv, err = kafkaListener("0.0.0.0:0", -1, "kafka.example:9093")
	if err != nil || adv != "kafka.example:9093" {
		t.Fatalf("wildcard with --kafka-advertise = %q, %v", adv, err)
	}
	lis.Close()
	for _, tc := range []struct {
		listen    string
		fd        int
		advertise string
		want      string
	}{
		{"0.0.0.0:0", -1, "", "wildcard address"},
		{":0", -1, "", "give --kafka-advertise"},
		{"", -1, "127.0.0.1:9093", "needs a Kafka listener"},
		{"127.0.0.1:0", -1, "no-port", "want HOST:PORT"},
		{"127.0.0.1:0", -1, "0.0.0.0:9093", "not empty or a wildcard"},
		{"127.0.0.1:0", -1, ":9093", "not empty or a wildcard"},
		{"127.0.0.1:0", -1, "h:0", "port must be 1-65535"},
		{"127.0.0.1:0", 4, "", "not both"},
		{"256.0.0.1:1", -1, "", "--kafka-listen 256.0.0.1:1"},
	} {
		lis, _, err := kafkaListener(tc.listen, tc.fd, tc.advertise)
		if lis != nil {
			lis.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--kafka-listen %q --kafka-listen-fd %d --kafka-advertise %q = %v, want an error with %q", tc.listen, tc.fd, tc.advertise, err, tc.want)
		}
	}
}
