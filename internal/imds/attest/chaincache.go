package attest

import (
	"crypto/sha256"
	"crypto/x509"
	"sync"
	"time"
)

// maxCachedChains bounds the verified-chain cache. The cloud signs with a
// handful of leaves per region, so this is never reached in practice; when
// it is, the cache starts over rather than growing.
const maxCachedChains = 1024

// chainCache remembers signing certificates that chained to the roots, with
// the window in which that chain is valid, so the per-document cost is the
// content signature alone. A Verifier's roots never change and its
// intermediates only grow, so a chain that verified stays verifiable within
// the validity of every certificate on it; outside that window the full
// verification runs again. It is safe for concurrent use.
type chainCache struct {
	mu     sync.Mutex
	chains map[[sha256.Size]byte]window
}

type window struct{ from, until time.Time }

func newChainCache() *chainCache {
	return &chainCache{chains: make(map[[sha256.Size]byte]window)}
}

// verified reports whether leaf is known to chain to the roots at now.
func (c *chainCache) verified(leaf *x509.Certificate, now time.Time) bool {
	c.mu.Lock()
	w, ok := c.chains[sha256.Sum256(leaf.Raw)]
	c.mu.Unlock()
	return ok && !now.Before(w.from) && !now.After(w.until)
}

// add records that chain (leaf first) verified.
func (c *chainCache) add(chain []*x509.Certificate) {
	if len(chain) == 0 {
		return
	}
	w := window{from: chain[0].NotBefore, until: chain[0].NotAfter}
	for _, cert := range chain[1:] {
		if cert.NotBefore.After(w.from) {
			w.from = cert.NotBefore
		}
		if cert.NotAfter.Before(w.until) {
			w.until = cert.NotAfter
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.chains) >= maxCachedChains {
		clear(c.chains)
	}
	c.chains[sha256.Sum256(chain[0].Raw)] = w
}
