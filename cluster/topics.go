package main

import (
	"context"
	"fmt"
	"io"
	"os"
)

// topicsCommand is `cluster topics ACTION`: create, list, describe and
// delete topics, in the manner of kafka-topics.
type topicsCommand struct {
	stdout, stderr io.Writer
}

func init() {
	register("topics", "create, list, describe and delete topics; delete records; reassign partitions", (&topicsCommand{stdout: os.Stdout, stderr: os.Stderr}).Run)
}

// topicsActions maps each action to its run function.
var topicsActions = map[string]func(c *topicsCommand, ctx context.Context, args []string) error{
	"create":         (*topicsCommand).create,
	"list":           (*topicsCommand).list,
	"describe":       (*topicsCommand).describe,
	"delete":         (*topicsCommand).delete,
	"delete-records": (*topicsCommand).deleteRecords,
	"reassign":       (*topicsCommand).reassign,
}

const topicsUsage = `Usage:
  cluster topics create NAME --partitions N --replication-factor R [--config KEY=VALUE ...]
  cluster topics list
  cluster topics describe [NAME ...]
  cluster topics delete NAME [NAME ...]
  cluster topics delete-records NAME --partition P --offset O
  cluster topics reassign NAME --partition P --replicas ID,ID,... [--no-wait]

Every action takes --dir DIR or --bootstrap-server HOST:PORT[,HOST:PORT]
(and --timeout); run ` + "`cluster topics ACTION --help`" + ` for its flags.
`

// Run dispatches to the action named by args[0].
func (c *topicsCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, topicsUsage)
		return fmt.Errorf("%w: missing action (create, list, describe, delete, delete-records or reassign)", errUsage)
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(c.stderr, topicsUsage)
		return nil
	}
	action, ok := topicsActions[args[0]]
	if !ok {
		fmt.Fprint(c.stderr, topicsUsage)
		return fmt.Errorf("%w: unknown action %q (want create, list, describe, delete, delete-records or reassign)", errUsage, args[0])
	}
	return action(c, ctx, args[1:])
}
