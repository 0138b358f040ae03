// Package clusterfile owns DIR/cluster.json, the file `cluster up` writes so
// that every other command and binary can find a running cluster with
// `--dir DIR` instead of `--bootstrap-server`. It also owns the rule that
// turns those two flags into a bootstrap list.
package clusterfile
