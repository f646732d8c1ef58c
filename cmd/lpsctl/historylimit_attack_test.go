package main

import (
	"strings"
	"testing"
)

// TestAttackHistoryLimitBounds: --limit outside 1..10000, or not a whole
// number, is a usage error naming the flag, before any connection.
func TestAttackHistoryLimitBounds(t *testing.T) {
	t.Parallel()
	for _, l := range []string{"0", "-1", "10001", "4294967297", "1e3", "x"} {
		_, errOut, code := lpsctl(t, "history", "202604.01.3", "--limit", l)
		if code != exitUsage || !strings.Contains(errOut, "--limit") {
			t.Errorf("--limit %s: exit %d (%s), want a usage error about --limit", l, code, errOut)
		}
	}
}
