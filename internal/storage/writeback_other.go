//go:build !linux

package storage

import "os"

// startWriteback does nothing where sync_file_range does not exist; the
// operating system's own writeback applies.
func startWriteback(*os.File, int64, int64) {}
