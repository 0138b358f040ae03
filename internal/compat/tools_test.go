//go:build compat

package compat

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const installHint = "run .ci/compat-deps"

// need skips t, or fails it under CI=true, when check finds the tool
// missing.
func need(t *testing.T, what string, check func() error) {
	t.Helper()
	err := check()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("%s missing: %v (%s)", what, err, installHint)
	if os.Getenv("CI") == "true" {
		failf(t, "%s", msg)
	}
	skipf(t, "%s", msg)
}

func haveFile(path string) func() error {
	return func() error {
		_, err := os.Stat(path)
		return err
	}
}

func haveCommand(name string, args ...string) func() error {
	return func() error {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, tail(out))
		}
		return nil
	}
}

// needJava: java, javac and Kafka's jars.
func needJava(t *testing.T) {
	t.Helper()
	need(t, "java", haveCommand("java", "-version"))
	need(t, "Kafka's jars", haveFile(filepath.Join(LibDir(), kafkaToolsJar)))
}

var (
	javaOnce    sync.Once
	javaClasses string
	javaErr     error
)

// javaPrograms compiles testdata/java/*.java once per run and returns the
// directory of the classes.
func javaPrograms(t *testing.T) string {
	t.Helper()
	javaOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tapes-compat-java-")
		if err != nil {
			javaErr = err
			return
		}
		srcs, _ := filepath.Glob(filepath.Join("testdata", "java", "*.java"))
		out, err := exec.Command("javac", append([]string{"-cp", filepath.Join(LibDir(), "*"), "-d", dir}, srcs...)...).CombinedOutput()
		if err != nil {
			javaErr = fmt.Errorf("javac: %v: %s", err, tail(out))
		}
		javaClasses = dir
	})
	if javaErr != nil {
		failf(t, "%v", javaErr)
	}
	return javaClasses
}

// Kafka's tools' main classes, as bin/kafka-*.sh run them in 4.x.
const (
	topicCommand    = "org.apache.kafka.tools.TopicCommand"
	consumerGroups  = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
	consoleProducer = "org.apache.kafka.tools.ConsoleProducer"
	consoleConsumer = "org.apache.kafka.tools.consumer.ConsoleConsumer"
)

func venvPython() string { return filepath.Join(Home(), "venv", "bin", "python") }

// debianPython is the system Python whose confluent_kafka is Debian's
// python3-confluent-kafka (librdkafka 2.0.2).
const debianPython = "/usr/bin/python3"

func nodePath() string { return filepath.Join(Home(), "js", "node_modules") }

// run runs name args with stdin to completion within d and returns its
// stdout; a non-zero exit fails t with the tail of stderr.
func run(t *testing.T, d time.Duration, stdin string, env []string, name string, args ...string) []byte {
	t.Helper()
	out, errb, err := runErr(t, d, stdin, env, name, args...)
	if err != nil {
		// Kafka's tools print their error on stdout.
		failf(t, "%s: %v: %s", short(name, args), err, tail(append(append(errb, '\n'), out...)))
	}
	return out
}

// runErr is run that returns the error and stderr instead of failing.
func runErr(t *testing.T, d time.Duration, stdin string, env []string, name string, args ...string) (stdout, stderr []byte, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 5 * time.Second
	t.Logf("run: %s", short(name, args))
	start := time.Now()
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("no exit within %v", d)
	}
	t.Logf("%s: %v in %v", filepath.Base(name), errOrOK(err), time.Since(start).Round(time.Millisecond))
	if os.Getenv("COMPAT_LOG") != "" {
		t.Logf("stderr of %s:\n%s", filepath.Base(name), errb.Bytes())
	}
	return out.Bytes(), errb.Bytes(), err
}

func errOrOK(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

// short is a command line for messages, without the classpath.
func short(name string, args []string) string {
	var s []string
	skip := false
	for _, a := range args {
		if skip {
			skip = false
			continue
		}
		if a == "-cp" {
			skip = true
			continue
		}
		if strings.HasPrefix(a, "-Xmx") || strings.HasPrefix(a, "-XX:") || strings.HasPrefix(a, "-Dorg.slf4j") {
			continue
		}
		s = append(s, a)
	}
	return filepath.Base(name) + " " + strings.Join(s, " ")
}

// tail is the last lines of b, for a one-line reason, without slf4j's
// notes about itself.
func tail(b []byte) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "SLF4J:") {
			lines = append(lines, l)
		}
	}
	if len(lines) > 4 {
		lines = lines[len(lines)-4:]
	}
	s := strings.Join(lines, " | ")
	if len(s) > 600 {
		s = s[len(s)-600:]
	}
	return s
}

// why is the reason a client program's stderr gives: its first ERR line
// (the programs of testdata/ print one per failed record), which the
// client library's later warnings would push out of tail; else tail.
func why(stderr []byte) string {
	for _, l := range strings.Split(string(stderr), "\n") {
		if strings.HasPrefix(l, "ERR ") {
			return l
		}
	}
	return tail(stderr)
}

// proc is a client program running in the background, its stdout
// collected line by line.
type proc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	errb  bytes.Buffer

	mu    sync.Mutex
	out   bytes.Buffer   // guarded by mu
	count map[string]int // lines seen per first word, guarded by mu
	done  chan struct{}  // closed when the process has exited and its output is read
	err   error          // set before done is closed
}

// startProc starts name args; the test's cleanup kills it (by its PID)
// if it is still running.
func startProc(t *testing.T, env []string, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: short(name, args), count: map[string]int{}, done: make(chan struct{})}
	p.cmd = exec.Command(name, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = &p.errb
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.stdin = stdin
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("start: %s", p.name)
	if err := p.cmd.Start(); err != nil {
		failf(t, "start %s: %v", p.name, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.out.Write(sc.Bytes())
			p.out.WriteByte('\n')
			if f := strings.Fields(sc.Text()); len(f) > 0 {
				p.count[f[0]]++
			}
			p.mu.Unlock()
		}
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// lines returns how many lines starting with word p has printed.
func (p *proc) lines(word string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count[word]
}

func (p *proc) output() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Clone(p.out.Bytes())
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

var errTimeout = errors.New("timed out")

// wait waits up to d for the process to exit and returns its exit error.
func (p *proc) wait(d time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		return fmt.Errorf("%s: %w after %v", p.name, errTimeout, d)
	}
}
