package checkhotfix

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"nodehotfix/internal/lpswire"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
	"google.golang.org/grpc/metadata"

	lpsv1 "nodehotfix/internal/gen/akslivepatching/v1"
	"nodehotfix/internal/node/lpsclient/lpstest"
	"nodehotfix/internal/node/trust"
	"nodehotfix/internal/release"
	"nodehotfix/internal/translog"
)

// TestRunDeclaresTrust is what check-hotfix declares to the service for
// each state of the node's key file and kept trust state.
func TestRunDeclaresTrust(t *testing.T) {
	t.Parallel()
	privs := make([]ed25519.PrivateKey, 2)
	for i := range privs {
		_, p, err := release.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		privs[i] = p
	}
	pub := func(i int) []ed25519.PublicKey { return []ed25519.PublicKey{privs[i].Public().(ed25519.PublicKey)} }
	keyFile := func(v int64) []byte {
		data, err := release.MarshalKeySetFile(release.KeySetDocument{Version: v, Threshold: 1, Keys: pub(0)})
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	link := func(v int64) json.RawMessage {
		env, err := release.SignKeySet(release.KeySetDocument{Version: v, Expires: time.Now().Add(time.Hour), Threshold: 1, Keys: pub(0)}, privs[0])
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	skey, _, err := translog.GenerateLogKey("nodehotfix.example/log")
	if err != nil {
		t.Fatal(err)
	}
	logSigner, err := translog.NewLogSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	text, err := translog.Checkpoint{Origin: logSigner.Name(), Size: 42, Hash: tlog.RecordHash([]byte("x"))}.Format()
	if err != nil {
		t.Fatal(err)
	}
	cp, err := note.Sign(&note.Note{Text: string(text)}, logSigner)
	if err != nil {
		t.Fatal(err)
	}
	state := func(s trust.State) []byte {
		data, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}

	tests := []struct {
		name          string
		keys, state   []byte // nil: no file
		override      []byte // a key file passed as Config.ReleaseKeys
		wantKeys, log string // "": not sent
	}{
		{name: "no-files"},
		{name: "no-keys-kept-state", state: state(trust.State{KeySets: []json.RawMessage{link(2)}, Checkpoint: string(cp)})},
		{name: "corrupt-keys", keys: []byte("not a key\n"), state: state(trust.State{Checkpoint: string(cp)})},
		{name: "keys", keys: keyFile(1), wantKeys: "1"},
		{name: "corrupt-state", keys: keyFile(1), state: []byte(`{"keysets":[1,`), wantKeys: "1"},
		{name: "kept-chain", keys: keyFile(1), state: state(trust.State{KeySets: []json.RawMessage{link(2), link(3)}}), wantKeys: "3"},
		{name: "kept-checkpoint", keys: keyFile(1), state: state(trust.State{Checkpoint: string(cp)}), wantKeys: "1", log: "42"},
		{name: "kept-both", keys: keyFile(1), state: state(trust.State{KeySets: []json.RawMessage{link(2)}, Checkpoint: string(cp)}), wantKeys: "2", log: "42"},
		{name: "release-keys-override", keys: keyFile(1), override: keyFile(4), wantKeys: "4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var got metadata.MD
			n := newNode(t, nodeOpts{handler: func(ctx context.Context, req *lpsv1.GetComponentConfigRequest) (*lpsv1.GetComponentConfigResponse, error) {
				md, _ := metadata.FromIncomingContext(ctx)
				mu.Lock()
				got = md
				mu.Unlock()
				return lpstest.Config(servedMatch)(ctx, req)
			}})
			for p, data := range map[string][]byte{n.root.ReleaseKeys(): tt.keys, n.root.TrustState(): tt.state} {
				if data != nil {
					if err := os.WriteFile(p, data, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			cfg := Config{Root: n.root, Version: bakedVer, IMDSURL: n.imdsURL, LPSAddr: n.lps.Addr}
			if tt.override != nil {
				cfg.ReleaseKeys = filepath.Join(t.TempDir(), "keys.pub")
				if err := os.WriteFile(cfg.ReleaseKeys, tt.override, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(t.Context(), DefaultBudget)
			defer cancel()
			if res := Run(ctx, cfg); res.Outcome != LPSRead {
				t.Fatalf("Run = %+v, want lpsRead", res)
			}
			mu.Lock()
			defer mu.Unlock()
			if v := strings.Join(got.Get(lpswire.KeySetMetadata), ","); v != tt.wantKeys {
				t.Errorf("declared key-set version %q, want %q", v, tt.wantKeys)
			}
			if v := strings.Join(got.Get(lpswire.LogSizeMetadata), ","); v != tt.log {
				t.Errorf("declared log size %q, want %q", v, tt.log)
			}
		})
	}
}
