package translog

import (
	"bytes"
	"strings"
	"testing"
)

func TestCheckpointRoundTrip(t *testing.T) {
	t.Parallel()
	for _, c := range []Checkpoint{
		{Origin: testOrigin, Size: 0, Hash: emptyTreeHash()},
		{Origin: testOrigin, Size: 20852163, Hash: someHash},
		{Origin: "x", Size: 1<<63 - 1, Hash: someHash, Extensions: []string{"ext one", "é"}},
	} {
		text, err := c.Format()
		if err != nil {
			t.Fatalf("Format(%+v): %v", c, err)
		}
		got, err := ParseCheckpoint(text)
		if err != nil {
			t.Fatalf("ParseCheckpoint(%q): %v", text, err)
		}
		if got.Origin != c.Origin || got.Size != c.Size || got.Hash != c.Hash || strings.Join(got.Extensions, "|") != strings.Join(c.Extensions, "|") {
			t.Errorf("ParseCheckpoint(Format(%+v)) = %+v", c, got)
		}
	}
	spec := "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
	if _, err := ParseCheckpoint([]byte(spec)); err != nil {
		t.Errorf("spec example: %v", err)
	}
}

func TestParseCheckpointRefuses(t *testing.T) {
	t.Parallel()
	h := someHash.String()
	tests := []struct{ name, text string }{
		{"empty", ""},
		{"no-final-newline", testOrigin + "\n1\n" + h},
		{"two-lines", testOrigin + "\n1\n"},
		{"empty-origin", "\n1\n" + h + "\n"},
		{"space-in-origin", "a b\n1\n" + h + "\n"},
		{"leading-zero", testOrigin + "\n01\n" + h + "\n"},
		{"plus-sign", testOrigin + "\n+1\n" + h + "\n"},
		{"negative", testOrigin + "\n-1\n" + h + "\n"},
		{"overflow", testOrigin + "\n9223372036854775808\n" + h + "\n"},
		{"unpadded-hash", testOrigin + "\n1\n" + strings.TrimRight(h, "=") + "\n"},
		{"short-hash", testOrigin + "\n1\nAAAA\n"},
		{"noncanonical-hash", testOrigin + "\n1\n" + h[:42] + "9=\n"},
		{"empty-extension", testOrigin + "\n1\n" + h + "\n\n"},
		{"control-in-extension", testOrigin + "\n1\n" + h + "\nx\ty\n"},
		{"carriage-return", testOrigin + "\r\n1\n" + h + "\n"},
		{"oversize", testOrigin + "\n1\n" + h + "\n" + strings.Repeat("x", MaxNoteSize) + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseCheckpoint([]byte(tt.text))
			if err == nil {
				t.Fatalf("ParseCheckpoint(%q) = %+v, want an error", tt.text, c)
			}
			wantReason(t, "ParseCheckpoint", err, ReasonMalformed)
		})
	}
}

func TestCheckpointSign(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if _, err := (Checkpoint{Origin: "other.example", Size: 1, Hash: someHash}).Sign(f.logSigner); err == nil {
		t.Error("Sign with a log key of another name succeeded")
	}
	if _, err := (Checkpoint{Origin: testOrigin, Size: -1}).Sign(f.logSigner); err == nil {
		t.Error("Sign of a negative size succeeded")
	}
	if _, err := (Checkpoint{Origin: testOrigin, Size: 1, Extensions: []string{"a\nb"}}).Format(); err == nil {
		t.Error("Format of an extension with a newline succeeded")
	}
}

func FuzzParseCheckpoint(f *testing.F) {
	f.Add([]byte("example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"))
	f.Add([]byte("o\n0\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\next\n"))
	f.Fuzz(func(t *testing.T, text []byte) {
		c, err := ParseCheckpoint(text)
		if err != nil {
			return
		}
		out, err := c.Format()
		if err != nil {
			t.Fatalf("Format(ParseCheckpoint(%q)): %v", text, err)
		}
		if !bytes.Equal(out, text) {
			t.Fatalf("Format(ParseCheckpoint(%q)) = %q: two spellings of one checkpoint", text, out)
		}
	})
}
