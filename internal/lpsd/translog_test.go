package lpsd

import (
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"nodehotfix/internal/store/memstore"
	"nodehotfix/internal/translog"
)

// TestLogFlagsRefused: lpsd's log flags accept what cannot work.
func TestLogFlagsRefused(t *testing.T) {
	skey, _, _ := translog.GenerateLogKey("log.example/log")
	keyFile := filepath.Join(t.TempDir(), "log.key")
	if err := os.WriteFile(keyFile, []byte(skey), 0o600); err != nil {
		t.Fatal(err)
	}
	_, wv, _ := translog.GenerateWitnessKey("w.example/w1")
	for _, tc := range []struct {
		name string
		args []string
		ok   bool
	}{
		{"tab between URL and VKEY", []string{"--log-key", keyFile, "--witness", "https://w.example\t" + wv}, true},
		{"URL without scheme", []string{"--log-key", keyFile, "--witness", "w.example:8440 " + wv}, false},
		{"same witness twice makes a quorum of 2 from one key", []string{"--log-key", keyFile, "--witness", "https://w1.example " + wv, "--witness", "https://w2.example " + wv, "--witness-quorum", "2"}, false},
		{"refresh 0", []string{"--log-key", keyFile, "--log-refresh", "0"}, false},
		{"refresh past the default max age", []string{"--log-key", keyFile, "--log-refresh", "48h"}, false},
	} {
		var f logFlags
		fs := flag.NewFlagSet("lpsd", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f.register(fs)
		err := fs.Parse(tc.args)
		if err == nil {
			_, err = f.checkpointer(memstore.New(), slog.New(slog.DiscardHandler), nil)
		}
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want accepted %v", tc.name, err, tc.ok)
		}
	}
}
