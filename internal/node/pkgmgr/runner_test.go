package pkgmgr

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"nodehotfix/internal/node/proc"
)

func TestExecRunner(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		argv     []string
		wantErr  bool
		wantCode int
		// wantOut is the expected CmdError.Output, if wantErr: the last 4 KiB.
		wantOut string
	}{
		{name: "ok", argv: []string{"sh", "-c", "echo hi"}},
		{name: "exit-code", argv: []string{"sh", "-c", "echo out; echo err >&2; exit 100"}, wantErr: true, wantCode: 100, wantOut: "out\nerr\n"},
		{name: "signal", argv: []string{"sh", "-c", "kill -9 $$"}, wantErr: true, wantCode: -1},
		{name: "not-found", argv: []string{"/nonexistent/apt-get", "update"}, wantErr: true, wantCode: -1},
		{
			name:    "tail-capped",
			argv:    []string{"sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo 0123456789; i=$((i+1)); done; echo END; exit 1"},
			wantErr: true, wantCode: 1,
			wantOut: strings.Repeat("0123456789\n", 2000)[2000*11+4-(4<<10):] + "END\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := ExecRunner{}.Run(t.Context(), tt.argv[0], tt.argv[1:]...)
			if !tt.wantErr {
				if err != nil {
					t.Fatalf("Run(%q) = %v, want nil", tt.argv, err)
				}
				return
			}
			var ce *proc.CmdError
			if !errors.As(err, &ce) {
				t.Fatalf("Run(%q) = %v, want a *proc.CmdError", tt.argv, err)
			}
			if got := ce.ExitCode(); got != tt.wantCode {
				t.Errorf("Run(%q) exit code = %d, want %d", tt.argv, got, tt.wantCode)
			}
			if diff := cmp.Diff(tt.argv, ce.Args); diff != "" {
				t.Errorf("Run(%q) Args (-want +got):\n%s", tt.argv, diff)
			}
			if tt.wantOut != "" && string(ce.Output) != tt.wantOut {
				t.Errorf("Run(%q) Output = %d bytes %q…, want %d bytes", tt.argv, len(ce.Output), firstN(ce.Output, 40), len(tt.wantOut))
			}
		})
	}
}

func firstN(b []byte, n int) []byte { return b[:min(n, len(b))] }

func TestExecRunnerNotFoundIsErrNotFound(t *testing.T) {
	t.Parallel()
	err := ExecRunner{}.Run(t.Context(), "nodehotfix-no-such-command")
	if !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("Run = %v, want exec.ErrNotFound", err)
	}
}

func TestExecRunnerOutput(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := (ExecRunner{Output: &out}).Run(t.Context(), "sh", "-c", "echo a; echo b >&2"); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "a\nb\n" {
		t.Errorf("Output = %q, want %q", got, "a\nb\n")
	}
}
