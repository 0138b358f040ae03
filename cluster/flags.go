package main

import (
	"flag"
	"fmt"
	"strings"
)

// parseFlags parses args with fs, allowing flags before, between and after
// positional arguments (`topics create orders --partitions 3`), which the
// standard flag package alone does not. It returns the positional arguments.
// Everything after a bare "--" is positional.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if err == flag.ErrHelp {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if rest[0] == "--" {
			return append(positional, rest[1:]...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// multiFlag collects a repeatable flag such as --config k=v.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
