package component

import (
	"crypto/ed25519"
	"errors"
	"testing"
	"time"

	"nodehotfix/internal/release"
)

func TestOpen(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	seed := make([]byte, ed25519.SeedSize)
	priv := ed25519.NewKeyFromSeed(seed)
	ks, err := release.NewKeySet(priv.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	env, err := release.SignComponent(release.ComponentConfig{Component: "localDNS", Version: 4, Config: `{"corefile":"signed"}`, NotAfter: now.Add(time.Hour)}, priv)
	if err != nil {
		t.Fatal(err)
	}
	served, err := release.ServedComponent(env)
	if err != nil {
		t.Fatal(err)
	}
	// Verified, only the signed configuration is used.
	got, err := Open(string(served), "localDNS", &ks, now, true)
	if err != nil || got.Config != `{"corefile":"signed"}` || !got.Verified || got.Version != 4 {
		t.Errorf("Open(signed) = %+v, %v", got, err)
	}
	if _, err := Open(string(served), "otherThing", &ks, now, true); err == nil {
		t.Error("Open(signed for another component) = nil error")
	}
	if _, err := Open(string(served), "localDNS", &ks, now.Add(2*time.Hour), true); err == nil {
		t.Error("Open(expired) = nil error")
	}
	if _, err := Open(`{"corefile":"x"}`, "localDNS", &ks, now, true); !errors.Is(err, ErrUnsigned) {
		t.Errorf("Open(unsigned, required) = %v, want ErrUnsigned", err)
	}
	if got, err := Open(`{"corefile":"x"}`, "localDNS", &ks, now, false); err != nil || got.Config != `{"corefile":"x"}` {
		t.Errorf("Open(unsigned, not required) = %+v, %v", got, err)
	}
	if got, err := Open("not json", "localDNS", nil, now, true); err != nil || got.Config != "not json" {
		t.Errorf("Open(text, no keys) = %+v, %v", got, err)
	}
	if got, err := Open(" ", "localDNS", &ks, now, true); err != nil || got.Config != "" {
		t.Errorf("Open(empty) = %+v, %v", got, err)
	}
}
