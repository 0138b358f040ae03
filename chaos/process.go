package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

// processCommand is one of the process faults: kill, pause, resume,
// restart, stop.
type processCommand struct {
	verb, summary, about string
	stdout, stderr       io.Writer
}

func init() {
	for _, c := range []processCommand{
		{verb: "kill", summary: "SIGKILL a process (a crash): chaos kill broker-2",
			about: "Sends SIGKILL to the named process (broker-N, producer-N, consumer-N) and waits until it has exited. Nothing is flushed, nothing is said goodbye."},
		{verb: "pause", summary: "SIGSTOP a process, optionally for a while: chaos pause broker-1 --for 10s",
			about: "Sends SIGSTOP: the process keeps its sockets and memory but runs no instruction, as a stalled host (a long GC, a VM migration) would. With --for, the launcher sends SIGCONT after that long."},
		{verb: "resume", summary: "SIGCONT a paused process",
			about: "Sends SIGCONT to a paused process."},
		{verb: "restart", summary: "restart a process on its data dir and address",
			about: "Stops the process if it runs (SIGTERM, then SIGKILL after the stop timeout) and starts it again with the same data directory and address."},
		{verb: "stop", summary: "stop a process gracefully (SIGTERM)",
			about: "Sends SIGTERM and waits for the process to exit (SIGKILL after the stop timeout)."},
	} {
		c.stdout, c.stderr = os.Stdout, os.Stderr
		register(c.verb, c.summary, c.Run)
	}
}

func (c processCommand) Run(ctx context.Context, args []string) error {
	fs, dir := newFlags(c.verb+" NAME [--dir DIR]", c.about, c.stderr)
	var pauseFor time.Duration
	if c.verb == "pause" {
		fs.DurationVar(&pauseFor, "for", 0, "resume the process after this long (0: stays paused until `chaos resume`)")
	}
	rest, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return fmt.Errorf("%w: want exactly one process name (e.g. broker-1), got %d arguments", errUsage, len(rest))
	}
	if pauseFor < 0 {
		return fmt.Errorf("%w: --for %v: cannot be negative", errUsage, pauseFor)
	}
	name := rest[0]
	cc, closeConn, err := dialControl(ctx, *dir)
	if err != nil {
		return err
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st, err := status(ctx, cc)
	if err != nil {
		return err
	}
	if _, err := findProcess(st, name); err != nil {
		return err
	}
	var p *tapesv1.ProcessInfo
	switch c.verb {
	case "kill":
		var r *tapesv1.KillProcessResponse
		if r, err = cc.KillProcess(ctx, &tapesv1.KillProcessRequest{Name: name}); err == nil {
			p = r.Process
		}
	case "pause":
		var r *tapesv1.PauseProcessResponse
		if r, err = cc.PauseProcess(ctx, &tapesv1.PauseProcessRequest{Name: name, ForMs: pauseFor.Milliseconds()}); err == nil {
			p = r.Process
		}
	case "resume":
		var r *tapesv1.ResumeProcessResponse
		if r, err = cc.ResumeProcess(ctx, &tapesv1.ResumeProcessRequest{Name: name}); err == nil {
			p = r.Process
		}
	case "restart":
		var r *tapesv1.RestartProcessResponse
		if r, err = cc.RestartProcess(ctx, &tapesv1.RestartProcessRequest{Name: name}); err == nil {
			p = r.Process
		}
	case "stop":
		var r *tapesv1.StopProcessResponse
		if r, err = cc.StopProcess(ctx, &tapesv1.StopProcessRequest{Name: name}); err == nil {
			p = r.Process
		}
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", c.verb, name, err)
	}
	line := fmt.Sprintf("%s: %s", p.Name, p.State)
	if p.Pid != 0 {
		line += fmt.Sprintf(" (pid %d)", p.Pid)
	}
	if p.LastExit != "" && p.State != "running" {
		line += ": " + p.LastExit
	}
	if pauseFor > 0 {
		line += fmt.Sprintf("; resumes in %v", pauseFor)
	}
	fmt.Fprintln(c.stdout, line)
	return nil
}
