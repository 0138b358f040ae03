package netns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// inNetns runs fn on a thread that has entered namespace ns: sockets fn
// creates belong to ns for their whole life.
func inNetns(t *testing.T, ns string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		// The thread is not unlocked: it ends with this goroutine
		// instead of returning to the pool in another namespace.
		f, err := os.Open("/run/netns/" + ns)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			t.Errorf("setns %s: %v", ns, err)
			return
		}
		fn()
	}()
	<-done
}

func newNetwork(t *testing.T, hosts ...string) *Network {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := Create(ctx, Config{Hosts: hosts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
		assertGone(t, n)
	})
	return n
}

// assertGone fails unless every namespace and interface of n is gone.
func assertGone(t *testing.T, n *Network) {
	t.Helper()
	names, err := Namespaces(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	links, err := Links(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range append(names, links...) {
		if strings.Contains(s, n.Tag) {
			t.Errorf("%s left behind after Close", s)
		}
	}
}

// listen starts a TCP echo-less acceptor on h's address.
func listen(t *testing.T, h Host) string {
	var ln net.Listener
	inNetns(t, h.Netns, func() {
		var err error
		if ln, err = net.Listen("tcp", netip.AddrPortFrom(h.IP, 0).String()); err != nil {
			t.Error(err)
		}
	})
	if ln == nil {
		t.FailNow()
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("x"))
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// reach reports whether a connection from namespace ns ("" for the host
// namespace) to addr gets the acceptor's byte within d.
func reach(t *testing.T, ns, addr string, d time.Duration) bool {
	var c net.Conn
	var err error
	dial := func() { c, err = net.DialTimeout("tcp", addr, d) }
	if ns == "" {
		dial()
	} else {
		inNetns(t, ns, dial)
	}
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(d))
	b := make([]byte, 1)
	_, err = c.Read(b)
	return err == nil
}

// TestDropBetweenHosts: hosts reach each other and the host namespace
// reaches them; a drop on one host cuts it from the other both ways, a
// one-way drop cuts what the other sends (a TCP handshake cannot
// complete either way), the host namespace is not cut; Undrop and Heal
// restore; Close removes everything.
func TestDropBetweenHosts(t *testing.T) {
	n := newNetwork(t, "a", "b")
	a, b := n.Hosts[0], n.Hosts[1]
	if a.IP == b.IP || !n.Subnet.Contains(a.IP) || !n.Subnet.Contains(n.Gateway) {
		t.Fatalf("addresses %v %v gateway %v subnet %v", a.IP, b.IP, n.Gateway, n.Subnet)
	}
	addrA, addrB := listen(t, a), listen(t, b)
	const ok, cut = 10 * time.Second, 2 * time.Second
	if !reach(t, a.Netns, addrB, ok) || !reach(t, b.Netns, addrA, ok) || !reach(t, "", addrA, ok) {
		t.Fatal("hosts do not reach each other before any fault")
	}
	ctx := context.Background()
	if err := a.Drop(ctx, []netip.Addr{b.IP}, false); err != nil {
		t.Fatal(err)
	}
	f, err := a.Faults(ctx)
	if err != nil || !slices.Equal(f.DropIn, []netip.Addr{b.IP}) || !slices.Equal(f.DropOut, []netip.Addr{b.IP}) {
		t.Fatalf("faults %+v, %v; want b dropped both ways", f, err)
	}
	if reach(t, a.Netns, addrB, cut) || reach(t, b.Netns, addrA, cut) {
		t.Fatal("a and b still reach each other through a drop")
	}
	if !reach(t, "", addrA, ok) {
		t.Fatal("the host namespace lost a: the drop is wider than b")
	}
	if err := a.Undrop(ctx, []netip.Addr{b.IP}); err != nil {
		t.Fatal(err)
	}
	if !reach(t, a.Netns, addrB, ok) {
		t.Fatal("a does not reach b after Undrop")
	}
	if err := a.Drop(ctx, []netip.Addr{b.IP}, true); err != nil {
		t.Fatal(err)
	}
	if f, _ := a.Faults(ctx); !slices.Equal(f.DropIn, []netip.Addr{b.IP}) || len(f.DropOut) != 0 {
		t.Fatalf("one-way faults %+v: want b in drop_in only", f)
	}
	if reach(t, b.Netns, addrA, cut) {
		t.Fatal("b reaches a through a one-way drop of what b sends")
	}
	if err := a.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if f, err := a.Faults(ctx); err != nil || !f.IsZero() {
		t.Fatalf("faults after Heal: %+v, %v", f, err)
	}
	if !reach(t, b.Netns, addrA, ok) {
		t.Fatal("b does not reach a after Heal")
	}
	if err := a.Heal(ctx); err != nil {
		t.Fatalf("a second Heal: %v", err)
	}
}

// TestImpair: netem delay shows in the round trip of a connection; where
// the kernel has no netem the error says so (ErrNoNetem) and nothing is
// left half-applied.
func TestImpair(t *testing.T) {
	n := newNetwork(t, "a", "b")
	a, b := n.Hosts[0], n.Hosts[1]
	addrB := listen(t, b)
	ctx := context.Background()
	err := a.Impair(ctx, Impairment{Delay: 300 * time.Millisecond})
	if errors.Is(err, ErrNoNetem) {
		if f, ferr := a.Faults(ctx); ferr != nil || !f.IsZero() {
			t.Fatalf("faults after a failed Impair: %+v, %v", f, ferr)
		}
		t.Skipf("skipped: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := a.Faults(ctx); f.Netem == "" {
		t.Fatal("no netem qdisc listed after Impair")
	}
	// A handshake and the first byte cross the veth pair four times
	// (SYN, SYN-ACK, ACK with data...): at least two delayed packets.
	start := time.Now()
	if !reach(t, a.Netns, addrB, 30*time.Second) {
		t.Fatal("a does not reach b under delay")
	}
	if el := time.Since(start); el < 600*time.Millisecond {
		t.Fatalf("round trip %v under a 300 ms delay each way", el)
	}
	if err := a.Impair(ctx, Impairment{}); err != nil {
		t.Fatal(err)
	}
	if f, _ := a.Faults(ctx); !f.IsZero() {
		t.Fatalf("faults after removing the impairment: %+v", f)
	}
}

// TestSubnetOverlapRefused: a subnet that overlaps the host namespace's
// own addresses is refused before anything is made.
func TestSubnetOverlapRefused(t *testing.T) {
	if err := Available(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	_, err := Create(context.Background(), Config{Subnet: netip.MustParsePrefix("127.0.0.0/24"), Hosts: []string{"a"}})
	if !errors.Is(err, ErrNoSubnet) {
		t.Fatalf("Create on 127.0.0.0/24: %v, want %v", err, ErrNoSubnet)
	}
}
