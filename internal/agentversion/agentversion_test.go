package agentversion

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// build compiles a tiny main with a version variable, as the agent has,
// with extra go build flags.
func build(t *testing.T, goarch string, flags ...string) string {
	t.Helper()
	dir := t.TempDir()
	src := "package main\n\nimport \"fmt\"\n\nvar version = \"dev\"\n\nfunc main() { fmt.Println(version) }\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module stamp\n\ngo 1.26\n"), 0o644)
	out := filepath.Join(dir, "agent")
	cmd := exec.CommandContext(t.Context(), "go", append(append([]string{"build", "-trimpath", "-o", out}, flags...), ".")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

func TestRead(t *testing.T) {
	t.Parallel()
	for _, arch := range []string{"amd64", "arm64", "386"} {
		t.Run(arch, func(t *testing.T) {
			t.Parallel()
			bin := build(t, arch, "-ldflags", "-X main.version=202604.01.1")
			if v, err := Read(bin); err != nil || v != "202604.01.1" {
				t.Errorf("Read = %q, %v; want 202604.01.1", v, err)
			}
		})
	}
	t.Run("unstamped", func(t *testing.T) {
		t.Parallel()
		if v, err := Read(build(t, "amd64")); err != nil || v != "dev" {
			t.Errorf("Read = %q, %v; want the default dev", v, err)
		}
	})
	t.Run("stripped", func(t *testing.T) {
		t.Parallel()
		if _, err := Read(build(t, "amd64", "-ldflags", "-s -w -X main.version=202604.01.1")); !errors.Is(err, ErrNotStamped) {
			t.Errorf("Read of a stripped binary = %v, want ErrNotStamped", err)
		}
	})
	t.Run("not-elf", func(t *testing.T) {
		t.Parallel()
		p := filepath.Join(t.TempDir(), "script")
		os.WriteFile(p, []byte("#!/bin/sh\necho 202604.01.1\n"), 0o755)
		if _, err := Read(p); err == nil {
			t.Error("Read of a script = nil, want an error")
		}
	})
}

// FuzzRead: a damaged binary is an error, never a panic or a hang.
func FuzzRead(f *testing.F) {
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "bin")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		Read(p)
	})
}
