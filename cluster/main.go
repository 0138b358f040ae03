// Command cluster launches a local tapes cluster and operates any tapes
// cluster: topics, produce, consume (and, as the project grows, groups and
// faults). Each subcommand lives in its own file and registers itself with
// register; `cluster help` lists them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand: Run gets the arguments after its name and the
// context that Ctrl-C (SIGINT) or SIGTERM cancels.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string) error
}

var commands = map[string]command{}

// register adds a subcommand; called from init functions only.
func register(name, summary string, run func(ctx context.Context, args []string) error) {
	if _, dup := commands[name]; dup {
		panic("cluster: duplicate subcommand " + name)
	}
	commands[name] = command{name: name, summary: summary, run: run}
}

// errUsage marks an error in the command line (exit status 2).
var errUsage = errors.New("usage")

func usage() {
	fmt.Fprintf(os.Stderr, "cluster: launch and operate a tapes cluster\n\nUsage:\n  cluster COMMAND [ARGS] [FLAGS]\n\nCommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(os.Stderr, "\nRun `cluster COMMAND --help` for a command's flags.\n")
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	name := os.Args[1]
	if name == "help" || name == "-h" || name == "--help" {
		usage()
		return
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "cluster: unknown command %q\n\n", name)
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := cmd.run(ctx, os.Args[2:])
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		fmt.Fprintf(os.Stderr, "cluster %s: %v\n", name, err)
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "cluster %s: %v\n", name, err)
		os.Exit(1)
	}
}
