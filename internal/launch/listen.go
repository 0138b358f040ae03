package launch

import (
	"fmt"
	"net"
	"strconv"
)

// bind listens on addr (HOST:PORT; port 0 lets the kernel choose) and returns
// the listener with the address clients dial: the bound address, with a
// wildcard host replaced by loopback.
func bind(addr string) (*net.TCPListener, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		ln.Close()
		return nil, "", fmt.Errorf("listen %s: not a TCP listener", addr)
	}
	return tl, dialAddr(tl.Addr().(*net.TCPAddr)), nil
}

func dialAddr(a *net.TCPAddr) string {
	ip := a.IP
	if ip.IsUnspecified() {
		if ip.To4() != nil {
			ip = net.IPv4(127, 0, 0, 1)
		} else {
			ip = net.IPv6loopback
		}
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(a.Port))
}

// listenAddr is where broker listens: the launcher's host with the port of
// its dial address (so a restart binds the same port again).
func listenAddr(host, dial string) (string, error) {
	_, port, err := net.SplitHostPort(dial)
	if err != nil {
		return "", fmt.Errorf("broker address %q: %w", dial, err)
	}
	return net.JoinHostPort(host, port), nil
}
