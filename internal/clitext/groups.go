package clitext

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tapes-dev/tapes/internal/consumerproto"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

// Group states as the coordinator reports them.
const (
	GroupEmpty = "Empty"
	GroupDead  = "Dead"
)

// NewTable returns a tabwriter for aligned columns separated by two spaces;
// cells are written separated by tabs (Row), and the caller flushes.
func NewTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// Row writes one line of cells to a table.
func Row(w io.Writer, cells ...string) {
	fmt.Fprintln(w, strings.Join(cells, "\t"))
}

// Cell prints s, or "-" when it is empty.
func Cell(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// OffsetCell prints an offset, or "-" when it is unknown (negative).
func OffsetCell(off int64) string {
	if off < 0 {
		return "-"
	}
	return strconv.FormatInt(off, 10)
}

// Assignment prints partitions as kafka-consumer-groups does:
// "orders(0,1),payments(2)", topics and partitions sorted; "-" for none.
func Assignment(tps []*tapesv1.TopicPartitions) string {
	byTopic := map[string][]int32{}
	for _, tp := range tps {
		byTopic[tp.GetTopic()] = append(byTopic[tp.GetTopic()], tp.GetPartitions()...)
	}
	topics := make([]string, 0, len(byTopic))
	for t, ps := range byTopic {
		if len(ps) > 0 {
			topics = append(topics, t)
		}
	}
	if len(topics) == 0 {
		return "-"
	}
	sort.Strings(topics)
	parts := make([]string, len(topics))
	for i, t := range topics {
		ps := byTopic[t]
		sort.Slice(ps, func(a, b int) bool { return ps[a] < ps[b] })
		s := make([]string, len(ps))
		for j, p := range ps {
			s[j] = strconv.Itoa(int(p))
		}
		parts[i] = t + "(" + strings.Join(s, ",") + ")"
	}
	return strings.Join(parts, ",")
}

// CountPartitions counts the partitions in tps.
func CountPartitions(tps []*tapesv1.TopicPartitions) int {
	n := 0
	for _, tp := range tps {
		n += len(tp.GetPartitions())
	}
	return n
}

// ErrOpaqueAssignment: a member's assignment is not in Kafka's consumer
// protocol (its group's protocol type is not "consumer"), so it cannot be
// shown as partitions. Returned by MemberPartitions.
var ErrOpaqueAssignment = errors.New("assignment of a protocol type other than consumer")

// MemberPartitions decodes m's assignment (as its group's leader encoded
// it; the coordinator keeps it as bytes) for display: under protocol type
// "consumer", Kafka's ConsumerProtocolAssignment of any version, whichever
// client led the group. ErrOpaqueAssignment for another protocol type; an
// empty assignment is no partitions.
func MemberPartitions(d *tapesv1.GroupDescription, m *tapesv1.GroupMember) ([]*tapesv1.TopicPartitions, error) {
	if len(m.GetAssignment()) == 0 {
		return nil, nil
	}
	if d.GetProtocolType() != consumerproto.ProtocolType {
		return nil, fmt.Errorf("%w: %q", ErrOpaqueAssignment, d.GetProtocolType())
	}
	a, err := consumerproto.DecodeAssignment(m.GetAssignment())
	if err != nil {
		return nil, fmt.Errorf("member %s: %w", m.GetMemberId(), err)
	}
	var out []*tapesv1.TopicPartitions
	for _, tp := range a.Partitions {
		if len(out) == 0 || out[len(out)-1].Topic != tp.Topic {
			out = append(out, &tapesv1.TopicPartitions{Topic: tp.Topic})
		}
		last := out[len(out)-1]
		last.Partitions = append(last.Partitions, tp.Partition)
	}
	return out, nil
}

// AssignmentCell prints m's assignment for the ASSIGNMENT column: as
// Assignment does when it decodes; "(N bytes, protocol type T)" for a
// group that is not a consumer group; "(N undecodable bytes)" otherwise.
func AssignmentCell(d *tapesv1.GroupDescription, m *tapesv1.GroupMember) string {
	tps, err := MemberPartitions(d, m)
	switch {
	case err == nil:
		return Assignment(tps)
	case errors.Is(err, ErrOpaqueAssignment):
		return fmt.Sprintf("(%d bytes, protocol type %s)", len(m.GetAssignment()), Cell(d.GetProtocolType()))
	}
	return fmt.Sprintf("(%d undecodable bytes)", len(m.GetAssignment()))
}

// PartitionCountCell prints the #PARTITIONS cell of m: the count, "-" when
// the assignment is not a consumer group's, "?" when it does not decode.
func PartitionCountCell(d *tapesv1.GroupDescription, m *tapesv1.GroupMember) string {
	tps, err := MemberPartitions(d, m)
	switch {
	case err == nil:
		return strconv.Itoa(CountPartitions(tps))
	case errors.Is(err, ErrOpaqueAssignment):
		return "-"
	}
	return "?"
}

// MembersSummary describes a group's members for refusals: "2 active
// members (state Stable)".
func MembersSummary(d *tapesv1.GroupDescription) string {
	s := "s"
	if len(d.GetMembers()) == 1 {
		s = ""
	}
	return fmt.Sprintf("%d active member%s (state %s)", len(d.GetMembers()), s, d.GetState())
}

// LagTime prints an age: milliseconds under a second, tenths of a second
// under a minute, whole seconds above ("350ms", "12.3s", "1h2m5s"); a
// negative age (clock skew) is "0s".
func LagTime(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// WriteGroupState prints the table of `groups describe --state`;
// coordinator is its COORDINATOR (ID) cell, e.g. "127.0.0.1:9092 (1)".
func WriteGroupState(w io.Writer, d *tapesv1.GroupDescription, coordinator string) error {
	tw := NewTable(w)
	Row(tw, "GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "GENERATION", "#MEMBERS")
	Row(tw, d.GetGroupId(), coordinator, Cell(d.GetProtocol()), d.GetState(),
		strconv.Itoa(int(d.GetGenerationId())), strconv.Itoa(len(d.GetMembers())))
	return tw.Flush()
}

// WriteGroupMembers prints the table of `groups describe --members`, one
// line per member sorted by member id.
func WriteGroupMembers(w io.Writer, d *tapesv1.GroupDescription) error {
	ms := append([]*tapesv1.GroupMember(nil), d.GetMembers()...)
	sort.Slice(ms, func(i, j int) bool { return ms[i].GetMemberId() < ms[j].GetMemberId() })
	tw := NewTable(w)
	Row(tw, "GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT")
	for _, m := range ms {
		Row(tw, d.GetGroupId(), m.GetMemberId(), Cell(m.GetHost()), Cell(m.GetClientId()),
			PartitionCountCell(d, m), AssignmentCell(d, m))
	}
	return tw.Flush()
}

// NoMembersNote is the line the CLI prints on stderr for a group without
// members.
func NoMembersNote(group string) string {
	return fmt.Sprintf("Consumer group '%s' has no active members.\n", group)
}

// GroupOffsetsNote is the line the CLI prints on stderr after the offsets
// table: the group has no members, or is rebalancing; "" otherwise.
func GroupOffsetsNote(d *tapesv1.GroupDescription) string {
	switch d.GetState() {
	case GroupEmpty:
		return NoMembersNote(d.GetGroupId())
	case "PreparingRebalance", "CompletingRebalance":
		return fmt.Sprintf("Warning: consumer group '%s' is rebalancing (%s).\n", d.GetGroupId(), d.GetState())
	}
	return ""
}

// TP names one partition.
type TP struct {
	Topic     string
	Partition int32
}

func (tp TP) String() string { return fmt.Sprintf("%s-%d", tp.Topic, tp.Partition) }

// GroupOffsetRow is one line of the default `groups describe` table.
type GroupOffsetRow struct {
	TP
	Current  int64 // -1: nothing committed
	LogEnd   int64 // -1: unknown
	LogStart int64 // -1: unknown
	Owner    *tapesv1.GroupMember
	// LagTime is the LAG-TIME cell, which the caller fills (it needs the
	// timestamp of the record at Current, see LagTime).
	LagTime string
}

// Lag is LogEnd - Current (never negative), -1 when either is unknown.
func (r *GroupOffsetRow) Lag() int64 {
	if r.Current < 0 || r.LogEnd < 0 {
		return -1
	}
	return max(0, r.LogEnd-r.Current)
}

// GroupOffsets builds the rows of the default `groups describe` table:
// one per partition the group committed or a member owns, and per
// partition of those partitions' topics.
type GroupOffsets struct {
	rows   map[TP]*GroupOffsetRow
	topics map[string]bool
}

// NewGroupOffsets starts the rows of group d from its committed offsets
// (OffsetFetch of every partition).
func NewGroupOffsets(d *tapesv1.GroupDescription, committed []*tapesv1.CommittedOffset) *GroupOffsets {
	g := &GroupOffsets{rows: map[TP]*GroupOffsetRow{}, topics: map[string]bool{}}
	for _, co := range committed {
		if co.GetOffset() < 0 {
			continue
		}
		g.get(TP{co.GetTopic(), co.GetPartition()}).Current = co.GetOffset()
		g.topics[co.GetTopic()] = true
	}
	for _, m := range d.GetMembers() {
		owned, _ := MemberPartitions(d, m) // an undecodable assignment owns no row (the --members table shows it)
		for _, tps := range owned {
			for _, p := range tps.GetPartitions() {
				g.get(TP{tps.GetTopic(), p}).Owner = m
				g.topics[tps.GetTopic()] = true
			}
		}
	}
	return g
}

func (g *GroupOffsets) get(tp TP) *GroupOffsetRow {
	r := g.rows[tp]
	if r == nil {
		r = &GroupOffsetRow{TP: tp, Current: -1, LogEnd: -1, LogStart: -1}
		g.rows[tp] = r
	}
	return r
}

// Topics returns the topics whose metadata (with offsets) the table
// needs, sorted; none when the group has neither offsets nor members.
func (g *GroupOffsets) Topics() []string {
	names := make([]string, 0, len(g.topics))
	for t := range g.topics {
		names = append(names, t)
	}
	sort.Strings(names)
	return names
}

// AddMetadata adds every partition of the topics Topics named, with its log
// end (high watermark) and log start. A deleted topic keeps only the rows
// of its committed or assigned partitions, with an unknown log end.
func (g *GroupOffsets) AddMetadata(topics []*tapesv1.TopicMetadata) {
	for _, tm := range topics {
		if !g.topics[tm.GetName()] {
			continue
		}
		for _, pm := range tm.GetPartitions() {
			r := g.get(TP{tm.GetName(), pm.GetPartition()})
			r.LogEnd, r.LogStart = pm.GetHighWatermark(), pm.GetLogStartOffset()
		}
	}
}

// Rows returns the rows sorted by topic and partition.
func (g *GroupOffsets) Rows() []*GroupOffsetRow {
	list := make([]*GroupOffsetRow, 0, len(g.rows))
	for _, r := range g.rows {
		list = append(list, r)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].Topic != list[j].Topic {
			return list[i].Topic < list[j].Topic
		}
		return list[i].Partition < list[j].Partition
	})
	return list
}

// WriteGroupOffsets prints the default `groups describe` table of group.
func WriteGroupOffsets(w io.Writer, group string, rows []*GroupOffsetRow) error {
	tw := NewTable(w)
	Row(tw, "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID", "LAG-TIME")
	for _, r := range rows {
		consumer, host, clientID := "-", "-", "-"
		if m := r.Owner; m != nil {
			consumer, host, clientID = Cell(m.GetMemberId()), Cell(m.GetHost()), Cell(m.GetClientId())
		}
		Row(tw, group, r.Topic, strconv.Itoa(int(r.Partition)), OffsetCell(r.Current),
			OffsetCell(r.LogEnd), OffsetCell(r.Lag()), consumer, host, clientID, r.LagTime)
	}
	return tw.Flush()
}

// LagTimeCell returns the LAG-TIME cell when it needs no record: "-"
// without a committed offset, "?" when the log end is unknown, "0s"
// without lag. Otherwise ok is false: the cell is the age of the oldest
// unconsumed record, the one at OldestUnconsumed.
func (r *GroupOffsetRow) LagTimeCell() (cell string, ok bool) {
	switch lag := r.Lag(); {
	case r.Current < 0:
		return "-", true
	case lag < 0:
		return "?", true // log end unknown
	case lag == 0:
		return "0s", true
	}
	return "", false
}

// OldestUnconsumed is the offset of the oldest record the group has not
// consumed: its committed offset, or the log start when retention deleted
// that record.
func (r *GroupOffsetRow) OldestUnconsumed() int64 { return max(r.Current, r.LogStart) }
