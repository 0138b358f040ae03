package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/clitext"
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

// describeExistingGroup describes group, or fails with GROUP_ID_NOT_FOUND when
// the coordinator does not know it (state Dead).
func describeExistingGroup(ctx context.Context, cl *client.Client, group string) (*tapesv1.GroupDescription, error) {
	d, err := cl.DescribeGroup(ctx, group)
	if err != nil {
		return nil, err
	}
	if d.GetState() == clitext.GroupDead {
		return nil, kerr.New(kerr.GroupIDNotFound, "group %s does not exist", group)
	}
	return d, nil
}
