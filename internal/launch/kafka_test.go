package launch

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/eventually"
)

// TestKafkaClientGetsItsOwnLinks: a Kafka client started by StartProcess
// gets, in {kafka-bootstrap} and $KAFKA_BOOTSTRAP, one link per broker
// (in broker order) to that broker's Kafka listener; the links' resolver
// answers a broker of the cluster with the client's link to it, and a
// broker it has not seen with a new link of its own; what crosses a link
// is counted.
func TestKafkaClientGetsItsOwnLinks(t *testing.T) {
	dir := t.TempDir()
	o := fakeOptions(t, dir, 3)
	o.Links = true
	c := start(t, o)
	out := filepath.Join(dir, "kclient.out")
	err := c.StartProcess(ProcessSpec{Name: "kclient-1", Kind: KafkaKind, Path: "/bin/sh",
		Args: []string{"-c", `echo "$1 $KAFKA_BOOTSTRAP" > "$2"; exec sleep 600`, "sh", "--bootstrap={kafka-bootstrap}", out}})
	if err != nil {
		t.Fatal(err)
	}
	var line string
	eventually.Nil(t, 20*time.Second, "the client writes its bootstrap", func() error {
		b, err := os.ReadFile(out)
		if line = strings.TrimSpace(string(b)); err == nil && line == "" {
			return errors.New("empty")
		}
		return err
	})
	arg, env, _ := strings.Cut(line, " ")
	var want []string
	byBroker := map[string]LinkState{}
	for _, l := range c.Links() {
		if l.From == "kclient-1" {
			if !l.Kafka {
				t.Errorf("link %s->%s does not rewrite Kafka answers", l.From, l.To)
			}
			byBroker[l.To] = l
		}
	}
	for i, b := range c.KafkaBootstrap() {
		l := byBroker["broker-"+strconv.Itoa(i+1)]
		if l.Target != b {
			t.Errorf("link to broker-%d forwards to %s, want its Kafka listener %s", i+1, l.Target, b)
		}
		want = append(want, l.Addr)
	}
	if arg != "--bootstrap="+strings.Join(want, ",") || env != strings.Join(want, ",") {
		t.Fatalf("client got %q and $KAFKA_BOOTSTRAP %q; want its links %s", arg, env, strings.Join(want, ","))
	}
	st, err := c.ProcessStatus("kclient-1")
	if err != nil || st.Proc.Kind != KafkaKind || !slices.Contains(st.Command, "--bootstrap="+env) {
		t.Fatalf("status %+v, %v", st, err)
	}

	if got, err := c.kafkaResolve("kclient-1", 2, c.KafkaBootstrap()[1]); err != nil || got != byBroker["broker-2"].Addr {
		t.Errorf("resolve broker 2 (%s): %s, %v; want %s", c.KafkaBootstrap()[1], got, err, byBroker["broker-2"].Addr)
	}
	newcomer := "127.0.0.1:1"
	got, err := c.kafkaResolve("kclient-1", 7, newcomer)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := c.kafkaResolve("kclient-1", 7, newcomer)
	var seen *LinkState
	for _, l := range c.Links() {
		if l.From == "kclient-1" && l.To == "broker-7" {
			seen = &l
		}
	}
	if seen == nil || seen.Addr != got || again != got || seen.Target != newcomer || !seen.Kafka {
		t.Fatalf("a broker seen first in an answer: link %+v, resolved %s then %s", seen, got, again)
	}

	// What crosses a link is counted: a Metadata request reaches broker
	// 1's listener (the fake holds it open; the kernel accepts).
	conn, err := net.Dial("tcp", byBroker["broker-1"].Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(kmsg.NewRequestFormatter().AppendRequest(nil, kmsg.NewPtrMetadataRequest(), 1)); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 20*time.Second, "the request is counted", func() bool {
		for _, l := range c.Links() {
			if l.From == "kclient-1" && l.To == "broker-1" {
				return l.Stats.Requests == 1 && l.Stats.Open == 1 && l.Stats.Accepted == 1
			}
		}
		return false
	})
}
