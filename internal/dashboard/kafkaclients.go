package dashboard

import (
	"strings"

	"github.com/tapes-dev/tapes/internal/launch"
)

// KafkaClient is a Kafka client program the launcher supervises (`chaos
// start NAME -- CMD ARGS`): what the launcher knows of it. It speaks only
// Kafka's protocol, so unlike producerd and consumerd it has no control
// endpoint to ask; its groups show in Groups, by its client id, once the
// brokers serve Kafka's group APIs.
type KafkaClient struct {
	Name string `json:"name"`
	// State is "running", "paused", "crashed" (any failure, a kill) or
	// "stopped" (a clean exit, or never started).
	State    string `json:"state"`
	PID      int    `json:"pid"`
	LastExit string `json:"lastExit,omitempty"`
	// Command is the program and its arguments as the launcher runs
	// them, its bootstrap ({kafka-bootstrap}) replaced by its links.
	Command string `json:"command"`
	// Links are its links, one per broker it reaches (a broker named
	// later in a Metadata answer gets one then), sorted by broker.
	Links []KafkaClientLink `json:"links"`
}

// KafkaClientLink is one link of a Kafka client: to which broker, what a
// fault does to it, and what crossed it.
type KafkaClientLink struct {
	Broker string `json:"broker"`
	// Mode is "pass", "blackhole", "drop-back" or "drop-forward".
	Mode     string `json:"mode"`
	DelayMs  int64  `json:"delayMs"`
	JitterMs int64  `json:"jitterMs"`
	// Connections is how many connections are open through it now.
	Connections int64 `json:"connections"`
	// Requests and Responses count the Kafka frames delivered each way
	// (not those a cut holds).
	Requests  int64 `json:"requests"`
	Responses int64 `json:"responses"`
}

// kafkaClients lists the Kafka clients among procs (the launcher's order)
// with their links (links sorted as launch.Cluster.Links sorts them).
// Called by the collector's snapshot.
func kafkaClients(c *launch.Cluster, procs []procState, links []launch.LinkState) []KafkaClient {
	out := []KafkaClient{}
	for _, p := range procs {
		if p.Kind != launch.KafkaKind {
			continue
		}
		kc := KafkaClient{Name: p.Name, PID: p.PID, LastExit: p.LastExit, Links: []KafkaClientLink{}}
		switch p.State {
		case "running", "paused":
			kc.State = p.State
		case "exited":
			kc.State = exitState(p.LastExit)
		default:
			kc.State = "stopped"
		}
		if st, err := c.ProcessStatus(p.Name); err == nil {
			kc.Command = strings.Join(st.Command, " ")
		}
		for _, l := range links {
			if l.From == p.Name && l.Kafka {
				kc.Links = append(kc.Links, KafkaClientLink{Broker: l.To, Mode: l.Mode.String(),
					DelayMs: l.Delay.Milliseconds(), JitterMs: l.Jitter.Milliseconds(),
					Connections: l.Stats.Open, Requests: l.Stats.Requests, Responses: l.Stats.Responses})
			}
		}
		out = append(out, kc)
	}
	return out
}
