package launch

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// FindBinary returns the path of the program name: the file of that name in
// the directory of the running executable if there is one (so that binaries
// built together find each other), else the one $PATH names. The error, which
// wraps ErrBinaryNotFound, names both places it looked.
func FindBinary(name string) (string, error) {
	beside := "(unknown: " + name + " cannot locate its own executable)"
	if exe, err := os.Executable(); err == nil {
		beside = filepath.Join(filepath.Dir(exe), name)
		if isExecutableFile(beside) {
			return beside, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		return p, nil
	}
	return "", fmt.Errorf("%w: %s is neither beside this program (looked for %s) nor on $PATH; build it, e.g. `go build -o %s ./%s`",
		ErrBinaryNotFound, name, beside, filepath.Dir(beside)+string(filepath.Separator), name)
}

// isExecutableFile reports whether path is a regular file someone may execute.
func isExecutableFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
