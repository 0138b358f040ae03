package testcluster

import (
	"net"
	"testing"
)

// ClosedPort returns a loopback address nobody listens on (it was free a
// moment ago): what a stopped broker's address looks like to a client.
func ClosedPort(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}
