package attest

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/smallstep/pkcs7"

	"nodehotfix/internal/imds/imdssign"
)

func TestReplayDefaultAllowsRetries(t *testing.T) {
	t.Parallel()
	fx := mustFixture(t)
	v := mustNew(t, baseConfig(fx))
	tok := mustSign(t, content(t, nil), fx.ca.Leaf, fx.ca.LeafKey)
	for i := 1; i <= DefaultMaxUses; i++ {
		id, err := v.Verify(t.Context(), tok)
		if err != nil {
			t.Fatalf("Verify #%d: %v, want success (re-presenting a document is allowed up to MaxUses)", i, err)
		}
		if id.Uses != i {
			t.Errorf("Verify #%d: Uses = %d, want %d", i, id.Uses, i)
		}
	}
	_, err := v.Verify(t.Context(), tok)
	wantReason(t, err, ReasonReplay)

	other := mustSign(t, content(t, func(d *imdssign.Document) { d.Nonce = "fresh" }), fx.ca.Leaf, fx.ca.LeafKey)
	if _, err := v.Verify(t.Context(), other); err != nil {
		t.Errorf("Verify(new document for the same VM): %v, want success", err)
	}
}

func TestReplayStrict(t *testing.T) {
	t.Parallel()
	fx := mustFixture(t)
	cfg := baseConfig(fx)
	cfg.MaxUses = 1
	v := mustNew(t, cfg)
	data := content(t, nil)
	leaf, key := mintLeaf(t, &x509.Certificate{DNSNames: []string{"eastus.metadata.azure.com"}}, fx.ca.Intermediate, fx.ca.IntermediateKey)
	first := mustSign(t, data, leaf, key)
	if _, err := v.Verify(t.Context(), first); err != nil {
		t.Fatal(err)
	}

	// The same signed content in different wrappers is the same document.
	resigned := mustSign(t, data, leaf, key) // a new ECDSA signature
	extraCert := func() string {
		sd, err := pkcs7.NewSignedData(data)
		if err != nil {
			t.Fatal(err)
		}
		sd.SetDigestAlgorithm(pkcs7.OIDDigestAlgorithmSHA256)
		if err := sd.SignWithoutAttr(leaf, key, pkcs7.SignerInfoConfig{}); err != nil {
			t.Fatal(err)
		}
		sd.AddCertificate(fx.ca.Intermediate)
		der, err := sd.Finish()
		if err != nil {
			t.Fatal(err)
		}
		return base64.StdEncoding.EncodeToString(der)
	}()
	for name, tok := range map[string]string{"same-token": first, "re-signed": resigned, "extra-bag-cert": extraCert} {
		_, err := v.Verify(t.Context(), tok)
		if err == nil {
			t.Errorf("%s: Verify succeeded, want replay rejection", name)
			continue
		}
		wantReason(t, err, ReasonReplay)
	}

	fresh := mustSign(t, content(t, func(d *imdssign.Document) { d.Nonce = "fresh" }), leaf, key)
	if _, err := v.Verify(t.Context(), fresh); err != nil {
		t.Errorf("Verify(fresh document): %v, want success", err)
	}
}

func TestReplayRejectedDocumentsNotCounted(t *testing.T) {
	t.Parallel()
	fx := mustFixture(t)
	cfg := baseConfig(fx)
	cfg.MaxUses = 1
	cfg.AllowedSubscriptions = []string{anotherSub}
	v := mustNew(t, cfg)
	tok := mustSign(t, content(t, nil), fx.ca.Leaf, fx.ca.LeafKey)
	for range 3 {
		_, err := v.Verify(t.Context(), tok)
		wantReason(t, err, ReasonSubscription)
	}
	if n := v.replay.len(); n != 0 {
		t.Errorf("replay cache holds %d entries after rejections, want 0", n)
	}
}

func TestReplayCacheEviction(t *testing.T) {
	t.Parallel()
	key := func(b byte) [32]byte { return [32]byte{b} }
	t0 := testNow

	t.Run("expired-first", func(t *testing.T) {
		t.Parallel()
		c := newReplayCache(2)
		c.use(key(1), t0.Add(time.Minute), t0)
		c.use(key(2), t0.Add(time.Hour), t0)
		now := t0.Add(2 * time.Minute) // key 1 has expired
		c.use(key(3), t0.Add(time.Hour), now)
		if got := c.use(key(2), t0.Add(time.Hour), now); got != 2 {
			t.Errorf("live entry was evicted: uses = %d, want 2", got)
		}
		if c.len() != 2 {
			t.Errorf("len = %d, want 2", c.len())
		}
	})

	t.Run("full-of-live-evicts-soonest-expiry", func(t *testing.T) {
		t.Parallel()
		c := newReplayCache(3)
		c.use(key(1), t0.Add(3*time.Hour), t0)
		c.use(key(2), t0.Add(1*time.Hour), t0) // closest to expiry
		c.use(key(3), t0.Add(2*time.Hour), t0)
		c.use(key(4), t0.Add(4*time.Hour), t0)
		if c.len() != 3 {
			t.Fatalf("len = %d, want 3", c.len())
		}
		if got := c.use(key(2), t0.Add(time.Hour), t0); got != 1 {
			t.Errorf("key 2 uses = %d, want 1 (evicted, so its count restarted)", got)
		}
		if got := c.use(key(4), t0.Add(4*time.Hour), t0); got != 2 {
			t.Errorf("key 4 uses = %d, want 2", got)
		}
	})

	t.Run("equal-expiry-evicts-oldest", func(t *testing.T) {
		t.Parallel()
		c := newReplayCache(2)
		exp := t0.Add(time.Hour)
		c.use(key(1), exp, t0)
		c.use(key(2), exp, t0)
		c.use(key(3), exp, t0)
		if got := c.use(key(2), exp, t0); got != 2 {
			t.Errorf("key 2 uses = %d, want 2 (key 1, the oldest, should have gone)", got)
		}
	})

	t.Run("entry-gone-at-expiry", func(t *testing.T) {
		t.Parallel()
		c := newReplayCache(8)
		exp := t0.Add(time.Hour)
		c.use(key(1), exp, t0)
		if got := c.use(key(1), exp, exp); got != 1 {
			t.Errorf("uses at expiry = %d, want 1 (a fresh entry)", got)
		}
	})
}

func TestReplayCacheConcurrent(t *testing.T) {
	t.Parallel()
	c := newReplayCache(16)
	const goroutines, each = 8, 200
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				c.use([32]byte{byte(i % 4)}, testNow.Add(time.Hour), testNow)
				c.use([32]byte{byte(100 + g)}, testNow.Add(time.Duration(i)*time.Second), testNow)
			}
		})
	}
	wg.Wait()
	if got, want := c.use([32]byte{0}, testNow.Add(time.Hour), testNow), goroutines*each/4+1; got != want {
		t.Errorf("uses = %d, want %d", got, want)
	}
	if c.len() > 16 {
		t.Errorf("len = %d, want at most 16", c.len())
	}
}

// BenchmarkReplayCacheChurn accepts b.N distinct documents into a cache of
// the default size, as a fleet's stream of new vmIds does, and reports the
// live heap afterwards. The heap does not grow with b.N: it steps once,
// between 400k and 800k documents, and is flat after (12.5 MiB at 400k,
// 18.6 MiB from 800k to 4M on amd64). By elimination the step is the map's
// tables growing under delete-and-insert churn at a constant size: the
// entries and the expiry heap hold exactly DefaultReplayCacheSize items.
//
//	go test -run '^$' -bench ReplayCacheChurn -benchtime 2000000x ./internal/imds/attest
func BenchmarkReplayCacheChurn(b *testing.B) {
	c := newReplayCache(DefaultReplayCacheSize)
	now := time.Now()
	var key [32]byte
	for i := range b.N {
		binary.LittleEndian.PutUint64(key[:], uint64(i))
		c.use(key, now.Add(time.Hour+time.Duration(i)*time.Millisecond), now)
	}
	b.StopTimer()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
	if c.len() != min(b.N, DefaultReplayCacheSize) {
		b.Fatalf("cache holds %d entries after %d documents, want %d", c.len(), b.N, min(b.N, DefaultReplayCacheSize))
	}
}
