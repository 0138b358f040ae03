package broker

import (
	"testing"

	"github.com/hashicorp/raft"

	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/replication"
)

// TestNextQuorumChange: the controller quorum's leader adds a joined
// broker as a non-voter, one change per round, and promotes non-voters
// (live ones, lowest id first) only while fewer members vote than the
// largest odd number up to five; removed brokers (not registered) are
// never added back.
func TestNextQuorumChange(t *testing.T) {
	servers := func(voters []metadata.BrokerID, nonvoters ...metadata.BrokerID) []raft.Server {
		var out []raft.Server
		for _, id := range voters {
			out = append(out, raft.Server{Suffrage: raft.Voter, ID: replication.ServerID(id)})
		}
		for _, id := range nonvoters {
			out = append(out, raft.Server{Suffrage: raft.Nonvoter, ID: replication.ServerID(id)})
		}
		return out
	}
	ids := func(v ...metadata.BrokerID) []metadata.BrokerID { return v }
	all := func(metadata.BrokerID) bool { return true }
	for _, tc := range []struct {
		name       string
		servers    []raft.Server
		registered []metadata.BrokerID
		live       func(metadata.BrokerID) bool
		want       quorumChange
		ok         bool
	}{
		{"settled", servers(ids(1, 2, 3)), ids(1, 2, 3), all, quorumChange{}, false},
		{"a 4th joins as a non-voter", servers(ids(1, 2, 3)), ids(1, 2, 3, 4), all, quorumChange{"add-nonvoter", 4}, true},
		{"4 members: 3 vote", servers(ids(1, 2, 3), 4), ids(1, 2, 3, 4), all, quorumChange{}, false},
		{"a 5th joins", servers(ids(1, 2, 3), 4), ids(1, 2, 3, 4, 5), all, quorumChange{"add-nonvoter", 5}, true},
		{"5 members: promote the lowest", servers(ids(1, 2, 3), 5, 4), ids(1, 2, 3, 4, 5), all, quorumChange{"promote", 4}, true},
		{"promote only a live one", servers(ids(1, 2, 3, 4), 5), ids(1, 2, 3, 4, 5), func(id metadata.BrokerID) bool { return id != 5 }, quorumChange{}, false},
		{"7 members: 5 vote", servers(ids(1, 2, 3, 4, 5), 6, 7), ids(1, 2, 3, 4, 5, 6, 7), all, quorumChange{}, false},
		{"a voter removed: 2 of 3 vote", servers(ids(1, 2), 4), ids(1, 2, 4), all, quorumChange{"promote", 4}, true},
		{"an unregistered non-voter is not promoted", servers(ids(1, 2), 3), ids(1, 2), all, quorumChange{}, false},
		{"a removed broker is not added back", servers(ids(1, 2, 3)), ids(1, 2), all, quorumChange{}, false},
	} {
		got, ok := nextQuorumChange(tc.servers, tc.registered, tc.live)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: nextQuorumChange = %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	for n, want := range map[int]int{1: 1, 2: 1, 3: 3, 4: 3, 5: 5, 6: 5, 9: 5} {
		if got := wantVoters(n); got != want {
			t.Errorf("wantVoters(%d) = %d, want %d", n, got, want)
		}
	}
}
