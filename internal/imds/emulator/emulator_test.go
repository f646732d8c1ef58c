package emulator

import (
	"context"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"nodehotfix/internal/imds"
	"nodehotfix/internal/imds/attest"
	"nodehotfix/internal/imds/imdssign"
)

// TestAttestedDocumentVerifies runs the node's own IMDS client against the
// emulator and the service's verifier against what it got.
func TestAttestedDocumentVerifies(t *testing.T) {
	t.Parallel()
	for _, withIntermediate := range []bool{false, true} {
		ca, err := imdssign.NewCA(imdssign.CAConfig{Intermediate: withIntermediate})
		if err != nil {
			t.Fatal(err)
		}
		vm := VM{VMID: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", SubscriptionID: "11111111-2222-3333-4444-555555555555", SKU: "22_04-lts", Location: "eastus"}
		srv := httptest.NewServer(Handler(Config{VM: vm, CA: ca}))
		t.Cleanup(srv.Close)

		token, err := imds.NewClient(srv.URL).AttestedSignature(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AddCert(ca.Root)
		cfg := attest.Config{Roots: roots}
		if withIntermediate {
			cfg.Intermediates = []*x509.Certificate{ca.Intermediate}
		}
		v, err := attest.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		id, err := v.Verify(context.Background(), token)
		if err != nil {
			t.Fatalf("intermediate=%v: Verify: %v", withIntermediate, err)
		}
		if id.VMID != vm.VMID || id.SubscriptionID != vm.SubscriptionID {
			t.Errorf("identity = %+v, want %+v", id, vm)
		}
		if withIntermediate {
			resp, err := http.Get(srv.URL + AIAPath)
			if err != nil || resp.StatusCode != 200 {
				t.Errorf("AIA endpoint: %v %v", resp, err)
			}
		}
	}
}

func TestRequestRules(t *testing.T) {
	t.Parallel()
	ca, err := imdssign.NewCA(imdssign.CAConfig{})
	if err != nil {
		t.Fatal(err)
	}
	fixed := time.Date(2026, 11, 30, 1, 2, 3, 0, time.UTC)
	srv := httptest.NewServer(Handler(Config{VM: VM{VMID: "v"}, CA: ca, Now: func() time.Time { return fixed }}))
	t.Cleanup(srv.Close)
	tests := []struct {
		name   string
		path   string
		header map[string]string
		want   int
	}{
		{"no metadata header", "/metadata/attested/document?api-version=2025-04-07", nil, 400},
		{"forwarded", "/metadata/attested/document?api-version=2025-04-07", map[string]string{"Metadata": "true", "X-Forwarded-For": "1.2.3.4"}, 400},
		{"no api-version", "/metadata/attested/document", map[string]string{"Metadata": "true"}, 400},
		{"ok", "/metadata/attested/document?api-version=2025-04-07&nonce=abc", map[string]string{"Metadata": "true"}, 200},
		{"instance", "/metadata/instance?api-version=2021-02-01", map[string]string{"Metadata": "true"}, 200},
		{"unknown", "/metadata/other?api-version=1", map[string]string{"Metadata": "true"}, 404},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest("GET", srv.URL+tt.path, nil)
		for k, v := range tt.header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s: status %d, want %d", tt.name, resp.StatusCode, tt.want)
		}
	}
}

// TestFleetPaths: under /vm/<vmId>/ the emulator attests that VM, so one
// emulator serves many nodes; a path that is not a VM ID is refused.
func TestFleetPaths(t *testing.T) {
	t.Parallel()
	ca, err := imdssign.NewCA(imdssign.CAConfig{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Handler(Config{VM: VM{VMID: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", SubscriptionID: "11111111-2222-3333-4444-555555555555"}, CA: ca}))
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Root)
	v, err := attest.New(attest.Config{Roots: roots})
	if err != nil {
		t.Fatal(err)
	}
	const other = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
	token, err := imds.NewClient(srv.URL + "/vm/" + other).AttestedSignature(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	id, err := v.Verify(t.Context(), token)
	if err != nil || id.VMID != other {
		t.Fatalf("Verify = %+v, %v; want vmId %s", id, err, other)
	}
	if _, err := imds.NewClient(srv.URL + "/vm/not-a-vm").AttestedSignature(t.Context()); err == nil {
		t.Error("a non-UUID VM path was attested")
	}
}
