// Package netfault owns links: loopback TCP proxies that carry one ordered
// pair's traffic (a client to a broker, a broker to a peer) and can drop it,
// one way or both, or delay it, without the processes at either end knowing.
// A cut direction delivers nothing: the link holds what it read and stops
// reading, so connections stay open and hang until the peers' own timeouts
// fire, as TCP does over a route that loses every packet; after the heal,
// what was sent arrives in order (a connection that a peer gave up on in the
// meantime is closed by that peer, as on a real network). A Kafka link
// (ListenKafka) also rewrites the brokers' addresses in Metadata and
// FindCoordinator answers to the client's own links, so that a Kafka
// client, which dials what Metadata names, stays behind them. The chaos
// tooling and the tests use them; nothing needs root.
package netfault
