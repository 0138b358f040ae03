// Package netfault owns links: loopback TCP proxies that carry one ordered
// pair's traffic (a client to a broker, a broker to a peer) and can drop it,
// one way or both, without the processes at either end knowing. Dropped
// bytes are read and discarded, so connections stay open and hang until the
// peers' own timeouts fire, as on a real network that lost the route. The
// chaos tooling and the tests use them; nothing needs root.
package netfault
