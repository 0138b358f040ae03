// Command chaos is tapes' fault controller and experiment runner. Each
// subcommand lives in its own file and registers itself with register;
// `chaos help` lists them. Exit status: 0 on success, 1 on failure (for
// check: the expectation does not hold, or the check could not run), 2 on
// a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand: run gets the arguments after its name and the
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
		panic("chaos: duplicate subcommand " + name)
	}
	commands[name] = command{name: name, summary: summary, run: run}
}

// Errors of the chaos commands themselves.
var (
	// errUsage marks an error in the command line (exit status 2).
	errUsage = errors.New("usage")
	// errNoControl is matched (errors.Is) by dialControl's error when the
	// launcher of the cluster directory is gone or its control endpoint
	// does not answer: the command says so at once instead of waiting
	// for its RPC deadline.
	errNoControl = errors.New("no control endpoint")
)

// exitCode is the exit status for a subcommand's error.
func exitCode(err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	return 1
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "chaos: fault injection, experiments and their checker for tapes\n\nUsage:\n  chaos COMMAND [FLAGS]\n\nCommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(w, "\nRun `chaos COMMAND --help` for a command's flags.\n")
}

func main() {
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	name := os.Args[1]
	if name == "help" || name == "-h" || name == "--help" {
		usage(os.Stdout)
		return
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "chaos: unknown command %q\n\n", name)
		usage(os.Stderr)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cmd.run(ctx, os.Args[2:])
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stderr, "chaos %s: %v\n", name, err)
	}
	os.Exit(exitCode(err))
}
