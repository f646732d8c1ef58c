package attest

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"nodehotfix/internal/imds/imdssign"
)

// TestChainCacheNeverExtendsValidity verifies a document, then one signed by
// the same (now expired) leaf: the cached chain must not let it through.
func TestChainCacheNeverExtendsValidity(t *testing.T) {
	t.Parallel()
	start := time.Now().Add(-time.Hour).Truncate(time.Second)
	ca, err := imdssign.NewCA(imdssign.CAConfig{NotBefore: start, NotAfter: start.Add(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	clock := start.Add(30 * time.Minute)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Root)
	v, err := New(Config{Roots: roots, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	sign := func(at time.Time, vm string) string {
		doc, _ := json.Marshal(imdssign.Document{
			VMID: vm, SubscriptionID: "11111111-2222-3333-4444-555555555555",
			TimeStamp: imdssign.TimeStamp{CreatedOn: at, ExpiresOn: at.Add(time.Hour)},
		})
		tok, err := ca.Sign(doc)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	if _, err := v.Verify(context.Background(), sign(clock, "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")); err != nil {
		t.Fatalf("first document: %v", err)
	}
	if !v.chains.verified(ca.Leaf, clock) {
		t.Fatal("a verified chain was not cached")
	}
	clock = start.Add(3 * time.Hour) // past every certificate's NotAfter
	_, err = v.Verify(context.Background(), sign(clock, "1f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"))
	var ae *Error
	if !errors.As(err, &ae) || ae.Reason != ReasonChain {
		t.Fatalf("document from an expired leaf after caching: %v, want a chain rejection", err)
	}
}

func TestChainCacheIsBounded(t *testing.T) {
	t.Parallel()
	c := newChainCache()
	ca, err := imdssign.NewCA(imdssign.CAConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < maxCachedChains+10; i++ {
		leaf := *ca.Leaf
		leaf.Raw = append([]byte{byte(i), byte(i >> 8)}, ca.Leaf.Raw...)
		c.add([]*x509.Certificate{&leaf, ca.Root})
	}
	if n := len(c.chains); n > maxCachedChains {
		t.Errorf("cache holds %d chains, bound is %d", n, maxCachedChains)
	}
}
