package release

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var componentNow = time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)

func testComponent() ComponentConfig {
	return ComponentConfig{
		Component: "localDNS",
		Version:   3,
		Config:    `{"corefile":".:53 {\n    forward . 168.63.129.16\n}\n"}`,
		NotAfter:  componentNow.Add(30 * 24 * time.Hour),
	}
}

func TestComponentRoundTrip(t *testing.T) {
	pub, priv := testKey(1)
	ks, err := NewKeySet(pub)
	if err != nil {
		t.Fatal(err)
	}
	env, err := SignComponent(testComponent(), priv)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ks.VerifyComponent(env, componentNow)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(testComponent(), got); diff != "" {
		t.Errorf("VerifyComponent() mismatch (-want +got):\n%s", diff)
	}
	served, err := ServedComponent(env)
	if err != nil {
		t.Fatal(err)
	}
	// A reference reader sees the configuration's members.
	var ref struct {
		Corefile string `json:"corefile"`
	}
	if err := json.Unmarshal(served, &ref); err != nil || !strings.HasPrefix(ref.Corefile, ".:53 {") {
		t.Errorf("served %s: corefile %q, err %v", served, ref.Corefile, err)
	}
	back, ok, err := SplitServed(served)
	if err != nil || !ok {
		t.Fatalf("SplitServed() = %v, %v", ok, err)
	}
	if _, err := ks.VerifyComponent(back, componentNow); err != nil {
		t.Errorf("VerifyComponent(split envelope): %v", err)
	}
}

func TestServedComponentEmptyObject(t *testing.T) {
	_, priv := testKey(1)
	c := testComponent()
	c.Config = " { } "
	env, err := SignComponent(c, priv)
	if err != nil {
		t.Fatal(err)
	}
	served, err := ServedComponent(env)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := SplitServed(served); err != nil || !ok {
		t.Errorf("SplitServed(%s) = %v, %v", served, ok, err)
	}
}

func TestSplitServedUnsigned(t *testing.T) {
	if _, ok, err := SplitServed([]byte(`{"corefile":"x"}`)); ok || err != nil {
		t.Errorf("SplitServed(unsigned) = %v, %v; want false, nil", ok, err)
	}
	for _, bad := range []string{`[]`, `{"a":1,"a":2}`, `{"` + ComponentEnvelopeKey + `":"x"}`, "{" + strings.Repeat(" ", MaxComponentServedSize) + "}"} {
		if _, _, err := SplitServed([]byte(bad)); err == nil {
			t.Errorf("SplitServed(%.40q) = nil error", bad)
		}
	}
}

func TestVerifyComponentRefusals(t *testing.T) {
	pubA, privA := testKey(1)
	_, privB := testKey(2)
	ks, _ := NewKeySet(pubA)
	good, err := SignComponent(testComponent(), privA)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := SignComponent(testComponent(), privB)
	rel := mustSign(t, testRelease(), privA)
	tests := []struct {
		name string
		env  []byte
		now  time.Time
		want Reason
	}{
		{"untrusted", other, componentNow, ReasonUntrusted},
		{"release-envelope", rel, componentNow, ReasonWrongType},
		{"expired", good, testComponent().NotAfter, ReasonExpired},
		{"no-clock", good, time.Time{}, ReasonExpired},
		{"too-large", []byte("{" + strings.Repeat(" ", MaxComponentEnvelopeSize) + "}"), componentNow, ReasonMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ks.VerifyComponent(tc.env, tc.now)
			var ve *VerifyError
			if !errors.As(err, &ve) || ve.Reason != tc.want {
				t.Errorf("VerifyComponent() = %v, want reason %s", err, tc.want)
			}
		})
	}
	// A component envelope is never a release.
	if _, err := ks.Verify(good, componentNow); err == nil {
		t.Error("Verify(component envelope) = nil error")
	}
}

func TestSignComponentRefuses(t *testing.T) {
	_, priv := testKey(1)
	for name, edit := range map[string]func(*ComponentConfig){
		"bad-name":     func(c *ComponentConfig) { c.Component = "local-dns" },
		"zero-version": func(c *ComponentConfig) { c.Version = 0 },
		"not-object":   func(c *ComponentConfig) { c.Config = `["x"]` },
		"duplicate":    func(c *ComponentConfig) { c.Config = `{"a":1,"a":2}` },
		"reserved":     func(c *ComponentConfig) { c.Config = `{"` + ComponentEnvelopeKey + `":{}}` },
		"too-large":    func(c *ComponentConfig) { c.Config = `{"a":"` + strings.Repeat("x", MaxComponentConfigSize) + `"}` },
		"no-expiry":    func(c *ComponentConfig) { c.NotAfter = time.Time{} },
	} {
		c := testComponent()
		edit(&c)
		if _, err := SignComponent(c, priv); err == nil {
			t.Errorf("%s: SignComponent() = nil error", name)
		}
	}
}
