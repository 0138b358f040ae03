package compat

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestJavaMissingNamesWhatIsMissing(t *testing.T) {
	home := t.TempDir()
	t.Setenv("COMPAT_HOME", home)
	err := JavaMissing()
	if err == nil {
		t.Fatalf("JavaMissing with an empty COMPAT_HOME %s: nil, want the missing jars (or java) named", home)
	}
	want := "Kafka's jars missing"
	if _, lookErr := exec.LookPath("java"); lookErr != nil {
		want = "java missing"
	}
	if !strings.Contains(err.Error(), want) || (want != "java missing" && !strings.Contains(err.Error(), filepath.Join(home, "lib", kafkaToolsJar))) {
		t.Fatalf("JavaMissing: %q, want %q and the jar's path", err, want)
	}
}

func TestJavaCmdClasspath(t *testing.T) {
	t.Setenv("COMPAT_HOME", "/opt/c")
	name, args := JavaCmd("/tmp/classes", ProducerPerformance, "--topic", "t")
	i := slices.Index(args, "-cp")
	if name != "java" || i < 0 || args[i+1] != "/opt/c/lib/*:/tmp/classes" || args[i+2] != ProducerPerformance ||
		!slices.Equal(args[i+3:], []string{"--topic", "t"}) {
		t.Fatalf("JavaCmd: %s %q", name, args)
	}
	_, args = JavaCmd("", ProducerPerformance)
	if i := slices.Index(args, "-cp"); args[i+1] != "/opt/c/lib/*" {
		t.Fatalf("JavaCmd without classes: %q", args)
	}
}
