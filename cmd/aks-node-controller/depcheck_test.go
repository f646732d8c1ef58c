package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAgentDependencies keeps the node agent small and its attack surface
// node-sized: it must not link the service, its stores, the attestation
// verifier or the metrics stack.
func TestAgentDependencies(t *testing.T) {
	t.Parallel()
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	forbidden := []string{
		"nodehotfix/internal/lps",
		"nodehotfix/internal/store",
		"nodehotfix/internal/rollout",
		"nodehotfix/internal/imds/attest",
		"nodehotfix/internal/imds/imdssign",
		"nodehotfix/test/",
		"go.etcd.io/",
		"github.com/prometheus/",
		"github.com/smallstep/pkcs7",
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			// A forbidden package forbids its subpackages, not its
			// namesakes (internal/lps, not internal/lpswire).
			if dep == f || strings.HasPrefix(dep, strings.TrimSuffix(f, "/")+"/") {
				t.Errorf("aks-node-controller depends on %s", dep)
			}
		}
	}
}
