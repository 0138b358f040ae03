package netfault

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	return lis.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, msg string, wait time.Duration) (string, bool) {
	t.Helper()
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(wait))
	line, err := r.ReadString('\n')
	if err != nil {
		return "", false
	}
	return line[:len(line)-1], true
}

func TestModes(t *testing.T) {
	l, err := Listen(echoServer(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, ok := roundTrip(t, c, r, "one", 2*time.Second); !ok || got != "one" {
		t.Fatalf("pass: %q %v", got, ok)
	}
	l.SetMode(Blackhole)
	if got, ok := roundTrip(t, c, r, "two", 300*time.Millisecond); ok {
		t.Fatalf("blackhole let %q through", got)
	}
	// While answers are cut, the request arrives (the echo server answers
	// it) but its answer is held.
	l.SetMode(DropBack)
	if got, ok := roundTrip(t, c, r, "three", 300*time.Millisecond); ok {
		t.Fatalf("drop-back let %q through", got)
	}
	// Healed: everything sent arrives, in order, as TCP would deliver it
	// once the route is back.
	l.SetMode(Pass)
	for _, want := range []string{"two", "three"} {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		line, err := r.ReadString('\n')
		if err != nil || line != want+"\n" {
			t.Fatalf("after heal: %q %v; want the held %q", line, err, want)
		}
	}
	if got, ok := roundTrip(t, c, r, "four", 2*time.Second); !ok || got != "four" {
		t.Fatalf("after heal: %q %v", got, ok)
	}
	l.SetMode(DropFwd)
	if _, ok := roundTrip(t, c, r, "five", 300*time.Millisecond); ok {
		t.Fatal("drop-forward delivered a request")
	}
	l.SetMode(Pass)
	if got, ok := roundTrip(t, c, r, "six", 2*time.Second); !ok || got != "five" {
		t.Fatalf("after heal: %q %v; want the held request's answer first", got, ok)
	}
}

func TestDelayAndClose(t *testing.T) {
	l, err := Listen(echoServer(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	l.SetDelay(100 * time.Millisecond)
	start := time.Now()
	if got, ok := roundTrip(t, c, r, "slow", 3*time.Second); !ok || got != "slow" {
		t.Fatalf("delayed: %q %v", got, ok)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("round trip took %v, want at least two delays of 100ms", d)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("connection survived Close")
	}
	if _, err := net.DialTimeout("tcp", l.Addr(), time.Second); err == nil {
		t.Fatal("closed link still accepts")
	}
}

func TestTargetDownRefuses(t *testing.T) {
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := lis.Addr().String()
	lis.Close()
	l, err := Listen(dead, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a link to a dead target kept the connection")
	}
}
