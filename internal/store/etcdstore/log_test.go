package etcdstore

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"

	"go.uber.org/zap"
)

// TestClientLogger: the etcd client's warnings and errors reach lpsd's log
// with their fields; its info and debug chatter does not.
func TestClientLogger(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	zl := clientLogger(slog.New(slog.NewJSONHandler(&buf, nil))).With(zap.String("target", "etcd-endpoints://0xc0"))
	zl.Info("subconn state changed")
	zl.Debug("resolver update")
	zl.Warn("retrying of unary invoker failed", zap.String("method", "/etcdserverpb.KV/Range"), zap.Int("attempt", 0))
	zl.Error("auth failed", zap.Error(errTest("authentication failed, invalid user ID or password")))
	var lines []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("not a JSON log line: %s", l)
		}
		lines = append(lines, m)
	}
	if len(lines) != 2 {
		t.Fatalf("%d lines logged, want the warning and the error:\n%s", len(lines), buf.String())
	}
	w, e := lines[0], lines[1]
	if w["level"] != "WARN" || w["msg"] != "retrying of unary invoker failed" || w["method"] != "/etcdserverpb.KV/Range" || w["component"] != "etcd-client" || w["target"] != "etcd-endpoints://0xc0" {
		t.Errorf("warning logged as %v", w)
	}
	if e["level"] != "ERROR" || e["error"] != "authentication failed, invalid user ID or password" {
		t.Errorf("error logged as %v", e)
	}
}

type errTest string

func (e errTest) Error() string { return string(e) }
