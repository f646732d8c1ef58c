package translog

import (
	"testing"
	"time"
)

func TestRevocationRecord(t *testing.T) {
	t.Parallel()
	r := RevocationRecord{Version: "202604.01.3<&>", Time: time.Date(2026, 4, 2, 3, 4, 5, 600, time.FixedZone("x", 3600))}
	data, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"nodehotfix-revocation","version":"202604.01.3<&>","time":"2026-04-02T02:04:05Z"}`
	if string(data) != want {
		t.Errorf("Marshal = %s, want %s", data, want)
	}
	got, err := ParseRevocationRecord(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != r.Version || !got.Time.Equal(r.Time.Truncate(time.Second)) {
		t.Errorf("ParseRevocationRecord = %+v, want %+v", got, r)
	}
	for _, bad := range []RevocationRecord{{Time: r.Time}, {Version: "v"}, {Version: "a\nb", Time: r.Time}} {
		if _, err := bad.Marshal(); err == nil {
			t.Errorf("Marshal(%+v) succeeded", bad)
		}
	}
}

func TestParseRevocationRecordRefuses(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		``,
		`null`,
		` {"type":"nodehotfix-revocation","version":"1","time":"2026-04-02T02:04:05Z"}`,
		`{"version":"1","type":"nodehotfix-revocation","time":"2026-04-02T02:04:05Z"}`,
		`{"type":"nodehotfix-revocation","version":"1","time":"2026-04-02T02:04:05Z","x":1}`,
		`{"type":"nodehotfix-revocation","version":"1","version":"2","time":"2026-04-02T02:04:05Z"}`,
		`{"type":"nodehotfix-release","version":"1","time":"2026-04-02T02:04:05Z"}`,
		`{"type":"nodehotfix-revocation","version":"1","time":"2026-04-02T02:04:05.5Z"}`,
		`{"type":"nodehotfix-revocation","version":"1","time":"2026-04-02T03:04:05+01:00"}`,
		`{"type":"nodehotfix-revocation","version":"\u0031","time":"2026-04-02T02:04:05Z"}`,
		`{"type":"nodehotfix-revocation","version":"","time":"2026-04-02T02:04:05Z"}`,
		`{"Type":"nodehotfix-revocation","version":"1","time":"2026-04-02T02:04:05Z"}`,
		`{"type":"nodehotfix-revocation","version":"1","time":"2026-04-02T02:04:05Z"}x`,
	} {
		if r, err := ParseRevocationRecord([]byte(s)); err == nil {
			t.Errorf("ParseRevocationRecord(%s) = %+v, want an error", s, r)
		} else {
			wantReason(t, s, err, ReasonMalformed)
		}
	}
}

func FuzzParseRevocationRecord(f *testing.F) {
	f.Add([]byte(`{"type":"nodehotfix-revocation","version":"1","time":"2026-04-02T02:04:05Z"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseRevocationRecord(data)
		if err != nil {
			return
		}
		out, err := r.Marshal()
		if err != nil || string(out) != string(data) {
			t.Fatalf("Marshal(ParseRevocationRecord(%s)) = %s, %v", data, out, err)
		}
	})
}
