package trust

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"slices"
	"testing"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/release"
)

// TestRevocationFloodOfInventedVersions: a served document listing 1024
// invented high versions of the node's base does not fill the kept list
// for good: a real revocation served after it is still kept, so a later
// document that omits it cannot serve the revoked release again.
func TestRevocationFloodOfInventedVersions(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	root, _ := release.NewKeySet(pub)
	baked, _ := hotfix.ParseVersion("202604.01.0")
	var flood []string
	for i := range maxKeptRevoked {
		flood = append(flood, fmt.Sprintf("202604.01.%d", 900000+i))
	}
	kept := State{}
	v := Evaluate(root, kept, hotfix.Pointer{Revoked: flood}, testNow)
	kept, _ = v.Next(kept, baked)
	v = Evaluate(root, kept, hotfix.Pointer{Revoked: []string{"202604.01.3"}}, testNow)
	kept, _ = v.Next(kept, baked)
	if !slices.Contains(kept.Revoked, "202604.01.3") {
		t.Errorf("after one flooding document (%d invented versions), the real revocation of 202604.01.3 is not kept (kept %d)", len(flood), len(kept.Revoked))
	}
}
