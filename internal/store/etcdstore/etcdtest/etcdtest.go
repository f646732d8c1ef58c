// Package etcdtest runs embedded etcd servers on loopback for tests.
package etcdtest

import (
	"testing"

	"nodehotfix/internal/store/etcdstore/etcdembed"
)

// Start starts a single-member etcd on loopback ports with its data in a
// t.TempDir, waits until it serves, and returns its client endpoints. It is
// stopped when the test ends.
func Start(t testing.TB) []string {
	t.Helper()
	return StartCluster(t, 1).Endpoints()
}

// StartCluster starts an n-member etcd cluster on loopback ports, waits
// until it has a leader and every member serves, and stops it when the
// test ends (members keep their data until then). Data is not fsynced:
// tests only.
func StartCluster(t testing.TB, n int) *etcdembed.Cluster {
	t.Helper()
	c, err := etcdembed.Start(t.TempDir(), n, etcdembed.Options{NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}
