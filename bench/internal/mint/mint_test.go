package mint

import (
	"testing"
	"time"

	"nodehotfix/internal/imds/attest"
)

// TestTokensVerify checks that both leaves produce documents the service's
// verifier accepts, for the vmId they were minted for.
func TestTokensVerify(t *testing.T) {
	t.Parallel()
	for _, leaf := range []Leaf{RSA, ECDSA} {
		m, err := New(leaf, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		roots, err := attest.RootsFromPEM(m.RootPEM())
		if err != nil {
			t.Fatal(err)
		}
		v, err := attest.New(attest.Config{Roots: roots, DisableAIA: true})
		if err != nil {
			t.Fatal(err)
		}
		ids := VMIDs("test", 3)
		toks, err := m.Tokens(ids)
		if err != nil {
			t.Fatal(err)
		}
		for i, tok := range toks {
			id, err := v.Verify(t.Context(), tok)
			if err != nil {
				t.Fatalf("%s: Verify(token %d): %v", leaf, i, err)
			}
			if id.VMID != ids[i] {
				t.Errorf("%s: token %d attests %s, want %s", leaf, i, id.VMID, ids[i])
			}
		}
	}
}

func TestVMIDDeterministic(t *testing.T) {
	t.Parallel()
	if a, b := VMID("s", 1), VMID("s", 1); a != b {
		t.Errorf("VMID(s, 1) = %s then %s", a, b)
	}
	if a, b := VMID("s", 1), VMID("s", 2); a == b {
		t.Errorf("VMID(s, 1) == VMID(s, 2) == %s", a)
	}
}

func BenchmarkToken(b *testing.B) {
	for _, leaf := range []Leaf{RSA, ECDSA} {
		b.Run(string(leaf), func(b *testing.B) {
			m, err := New(leaf, time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; b.Loop(); i++ {
				if _, err := m.Token(VMID("bench", i)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkVerify is the service's per-request attestation cost: distinct
// documents, so every one is a new replay-cache entry.
func BenchmarkVerify(b *testing.B) {
	for _, leaf := range []Leaf{RSA, ECDSA} {
		b.Run(string(leaf), func(b *testing.B) {
			m, err := New(leaf, time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			roots, err := attest.RootsFromPEM(m.RootPEM())
			if err != nil {
				b.Fatal(err)
			}
			v, err := attest.New(attest.Config{Roots: roots, DisableAIA: true})
			if err != nil {
				b.Fatal(err)
			}
			toks, err := m.Tokens(VMIDs("bench", 2000))
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; b.Loop(); i++ {
				if _, err := v.Verify(b.Context(), toks[i%len(toks)]); err != nil && i < len(toks) {
					b.Fatal(err)
				}
			}
		})
	}
}
