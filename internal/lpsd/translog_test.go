package lpsd

import (
	"crypto/ed25519"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nodehotfix/internal/release"
	"nodehotfix/internal/store/memstore"
	"nodehotfix/internal/translog"
)

// TestLogFlagsRefused: lpsd refuses log flags that cannot work, and takes
// a tab between a witness's URL and key.
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

// TestWarnLogPolicy: lpsd says at start when the key set it serves
// requires a log it does not sign, and says nothing when it does.
func TestWarnLogPolicy(t *testing.T) {
	pub, _, _ := release.GenerateKey(nil)
	_, vkey, _ := translog.GenerateLogKey("log.example/log")
	ks, err := release.KeySetDocument{Version: 1, Threshold: 1, Keys: []ed25519.PublicKey{pub},
		Log: release.LogPolicy{Key: vkey, Required: true, MaxCheckpointAge: 24 * time.Hour}}.KeySet()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		f    logFlags
		warn bool
	}{
		{"no --log-key", logFlags{refresh: time.Hour}, true},
		{"a log key", logFlags{key: "log.key", refresh: time.Hour}, false},
		{"refresh past the max age", logFlags{key: "log.key", refresh: 24 * time.Hour}, true},
	} {
		var buf strings.Builder
		tc.f.warnLogPolicy(t.Context(), &ks, memstore.New(), slog.New(slog.NewTextHandler(&buf, nil)))
		if got := buf.Len() > 0; got != tc.warn {
			t.Errorf("%s: logged %q, want a warning %v", tc.name, buf.String(), tc.warn)
		}
	}
}
