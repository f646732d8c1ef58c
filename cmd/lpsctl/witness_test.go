package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"nodehotfix/internal/translog"
)

func TestWitnessKeygen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, kind := range []string{"log", "witness"} {
		priv, pub := filepath.Join(dir, kind+".key"), filepath.Join(dir, kind+".vkey")
		out := mustRun(t, "witness", "keygen", "--kind", kind, "--name", kind+".example/x", "--out-private", priv, "--out-public", pub, "--json")
		var got struct{ Kind, VKey string }
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("keygen --json: %v\n%s", err, out)
		}
		vkey, err := os.ReadFile(pub)
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(string(vkey)) != got.VKey {
			t.Errorf("public key file %q, printed %q", vkey, got.VKey)
		}
		if fi, err := os.Stat(priv); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("private key file: %v, %v; want mode 0600", fi, err)
		}
		skey, _ := os.ReadFile(priv)
		switch kind {
		case "log":
			if _, err := translog.ParseLogKey(got.VKey); err != nil {
				t.Errorf("log vkey: %v", err)
			}
			if _, err := translog.NewLogSigner(string(skey)); err != nil {
				t.Errorf("log skey: %v", err)
			}
		case "witness":
			if _, err := translog.ParseWitnessKey(got.VKey); err != nil {
				t.Errorf("witness vkey: %v", err)
			}
			if _, err := translog.NewCosigner(string(skey), nil); err != nil {
				t.Errorf("witness skey: %v", err)
			}
		}
		if _, errOut, code := lpsctl(t, "witness", "keygen", "--kind", kind, "--name", "n", "--out-private", priv, "--out-public", filepath.Join(dir, "new")); code != exitError || !strings.Contains(errOut, "refusing to overwrite") {
			t.Errorf("keygen over an existing key: exit %d, %s", code, errOut)
		}
	}
	for _, args := range [][]string{
		{"--kind", "release", "--name", "n"},
		{"--kind", "log", "--name", "has space"},
		{"--kind", "log"},
	} {
		args = append([]string{"witness", "keygen", "--out-private", filepath.Join(dir, "a"), "--out-public", filepath.Join(dir, "b")}, args...)
		if _, errOut, code := lpsctl(t, args...); code != exitUsage {
			t.Errorf("lpsctl %v: exit %d, want %d; %s", args, code, exitUsage, errOut)
		}
	}
}

// lineWriter is a goroutine-safe writer that signals each complete write.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{}
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case w.wrote <- struct{}{}:
	default:
	}
	return w.buf.Write(p)
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func TestWitnessServe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	logKey, logVKey := filepath.Join(dir, "log.key"), filepath.Join(dir, "log.vkey")
	witKey, witVKey := filepath.Join(dir, "w.key"), filepath.Join(dir, "w.vkey")
	mustRun(t, "witness", "keygen", "--kind", "log", "--name", "nodehotfix.example/log", "--out-private", logKey, "--out-public", logVKey)
	mustRun(t, "witness", "keygen", "--kind", "witness", "--name", "w.example", "--out-private", witKey, "--out-public", witVKey)
	read := func(p string) string { b, _ := os.ReadFile(p); return strings.TrimSpace(string(b)) }
	state := filepath.Join(dir, "state.json")

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := &lineWriter{wrote: make(chan struct{}, 1)}
	errOut := &lineWriter{wrote: make(chan struct{}, 1)}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"witness", "serve", "--key", witKey, "--log-key", read(logVKey), "--state", state, "--listen", "127.0.0.1:0"}, out, errOut)
	}()
	addr := regexp.MustCompile(`listening on (\S+)`)
	var m []string
	for m == nil {
		select {
		case <-out.wrote:
			m = addr.FindStringSubmatch(out.String())
		case code := <-done:
			t.Fatalf("witness serve exited %d: %s", code, errOut.String())
		case <-time.After(10 * time.Second):
			t.Fatal("witness serve printed no address")
		}
	}

	signer, err := translog.NewLogSigner(read(logKey))
	if err != nil {
		t.Fatal(err)
	}
	root := tlog.RecordHash([]byte("one record"))
	signed, err := translog.Checkpoint{Origin: "nodehotfix.example/log", Size: 1, Hash: root}.Sign(signer)
	if err != nil {
		t.Fatal(err)
	}
	wv, err := translog.ParseWitnessKey(read(witVKey))
	if err != nil {
		t.Fatal(err)
	}
	line, err := translog.AddCheckpoint(ctx, nil, "http://"+m[1], wv, 0, nil, signed)
	if err != nil {
		t.Fatalf("AddCheckpoint: %v", err)
	}
	p, err := translog.NewPolicy(read(logVKey), []string{read(witVKey)}, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := translog.Open(append(signed, line...), p, time.Now()); err != nil {
		t.Errorf("Open(cosigned by the served witness): %v", err)
	}
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Errorf("witness serve after cancel: exit %d: %s", code, errOut.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("witness serve did not stop")
	}
	if _, err := os.Stat(state); err != nil {
		t.Errorf("state file: %v", err)
	}
	// A corrupt state file stops the witness before it listens.
	if err := os.WriteFile(state, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errText, code := lpsctl(t, "witness", "serve", "--key", witKey, "--log-key", read(logVKey), "--state", state, "--listen", "127.0.0.1:0")
	if code != exitError || !strings.Contains(errText, "corrupt") {
		t.Errorf("serve with a corrupt state: exit %d, %s", code, errText)
	}
}
