package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/tapes-dev/tapes/internal/client"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// groupsCommand is `cluster groups ACTION`: list and describe consumer
// groups and reset their committed offsets, in the manner of
// kafka-consumer-groups.
type groupsCommand struct {
	stdout, stderr io.Writer
}

func init() {
	register("groups", "list and describe consumer groups, reset their offsets", (&groupsCommand{stdout: os.Stdout, stderr: os.Stderr}).Run)
}

// groupsActions maps each action to its run function.
var groupsActions = map[string]func(c *groupsCommand, ctx context.Context, args []string) error{
	"list":          (*groupsCommand).list,
	"describe":      (*groupsCommand).describe,
	"reset-offsets": (*groupsCommand).resetOffsets,
}

const groupsUsage = `Usage:
  cluster groups list
  cluster groups describe GROUP [--members | --state]
  cluster groups reset-offsets GROUP --topic TOPIC[:P,P...]
      (--to-earliest | --to-latest | --to-offset N | --shift-by N | --to-datetime TS) [--execute]

Every action takes --dir DIR or --bootstrap-server HOST:PORT[,HOST:PORT]
(and --timeout); run ` + "`cluster groups ACTION --help`" + ` for its flags.
`

// Run dispatches to the action named by args[0].
func (c *groupsCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, groupsUsage)
		return fmt.Errorf("%w: missing action (list, describe or reset-offsets)", errUsage)
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(c.stderr, groupsUsage)
		return nil
	}
	action, ok := groupsActions[args[0]]
	if !ok {
		fmt.Fprint(c.stderr, groupsUsage)
		return fmt.Errorf("%w: unknown action %q (want list, describe or reset-offsets)", errUsage, args[0])
	}
	return action(c, ctx, args[1:])
}

// Group states as the coordinator reports them.
const (
	groupEmpty = "Empty"
	groupDead  = "Dead"
)

// describeExistingGroup describes group, or fails with GROUP_ID_NOT_FOUND when
// the coordinator does not know it (state Dead).
func describeExistingGroup(ctx context.Context, cl *client.Client, group string) (*tapesv1.GroupDescription, error) {
	d, err := cl.DescribeGroup(ctx, group)
	if err != nil {
		return nil, err
	}
	if d.GetState() == groupDead {
		return nil, kerr.New(kerr.GroupIDNotFound, "group %s does not exist", group)
	}
	return d, nil
}

// newGroupsTable returns a tabwriter for aligned columns separated by two spaces;
// cells are written separated by tabs, and the caller flushes.
func newGroupsTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// groupsRow writes one line of cells to a table.
func groupsRow(w io.Writer, cells ...string) {
	fmt.Fprintln(w, strings.Join(cells, "\t"))
}

// groupsCell prints s, or "-" when it is empty.
func groupsCell(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// groupsOffsetCell prints an offset, or "-" when it is unknown (negative).
func groupsOffsetCell(off int64) string {
	if off < 0 {
		return "-"
	}
	return strconv.FormatInt(off, 10)
}

// formatGroupAssignment prints partitions as kafka-consumer-groups does:
// "orders(0,1),payments(2)", topics and partitions sorted; "-" for none.
func formatGroupAssignment(tps []*tapesv1.TopicPartitions) string {
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

// countGroupPartitions counts the partitions in tps.
func countGroupPartitions(tps []*tapesv1.TopicPartitions) int {
	n := 0
	for _, tp := range tps {
		n += len(tp.GetPartitions())
	}
	return n
}

// groupMembersSummary describes a group's members for refusals: "2 active
// members (state Stable)".
func groupMembersSummary(d *tapesv1.GroupDescription) string {
	s := "s"
	if len(d.GetMembers()) == 1 {
		s = ""
	}
	return fmt.Sprintf("%d active member%s (state %s)", len(d.GetMembers()), s, d.GetState())
}
