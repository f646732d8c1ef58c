package attest

import (
	"strings"
	"testing"
)

func TestErrorMessageHasNoToken(t *testing.T) {
	t.Parallel()
	fx := mustFixture(t)
	tok := mustSign(t, content(t, nil), fx.other.Leaf, fx.other.LeafKey)
	_, err := mustNew(t, baseConfig(fx)).Verify(t.Context(), tok)
	if err == nil {
		t.Fatal("Verify succeeded, want rejection")
	}
	for _, secret := range []string{tok[:40], testVMID, testSub} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error %q contains %q", err, secret)
		}
	}
}

func TestReasonsComplete(t *testing.T) {
	t.Parallel()
	seen := map[Reason]bool{}
	for _, r := range Reasons() {
		if seen[r] {
			t.Errorf("Reasons() lists %q twice", r)
		}
		seen[r] = true
	}
	if len(seen) != 13 {
		t.Errorf("Reasons() has %d entries, want 13", len(seen))
	}
}
