package deploy

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const dockerfile = "Dockerfile"

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, ...
	args string
}

// parseDockerfile reads instructions: comments and blank lines skipped,
// lines ending in a backslash continued. Parser directives and heredocs are
// not used by ours and not handled.
func parseDockerfile(text string) []instruction {
	var out []instruction
	var pending string
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if pending == "" && (trimmed == "" || trimmed[0] == '#') {
			continue
		}
		if strings.HasSuffix(trimmed, `\`) {
			pending += strings.TrimSuffix(trimmed, `\`) + " "
			continue
		}
		full := pending + trimmed
		pending = ""
		cmd, args, _ := strings.Cut(full, " ")
		out = append(out, instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)})
	}
	return out
}

// finalStage returns the instructions from the last FROM on.
func finalStage(ins []instruction) []instruction {
	for i := len(ins) - 1; i >= 0; i-- {
		if ins[i].cmd == "FROM" {
			return ins[i:]
		}
	}
	return nil
}

// TestDockerfile checks what can be checked without a container runtime or
// the base images (neither exists here): the build line is the Makefile's,
// the Go version is go.mod's toolchain, the final stage is a static base
// running the binary as a non-root numeric user, and EXPOSE covers lpsd's
// listeners.
func TestDockerfile(t *testing.T) {
	ins := parseDockerfile(mustRead(t, dockerfile))
	if _, err := os.Stat(filepath.Join(repoRoot, ".dockerignore")); err != nil {
		t.Errorf("the build context (the repository root) has no .dockerignore: %v", err)
	}

	var goVersion string
	for _, in := range ins {
		if in.cmd == "ARG" && strings.HasPrefix(in.args, "GO_VERSION=") {
			goVersion = strings.TrimPrefix(in.args, "GO_VERSION=")
		}
	}
	toolchain := goModToolchain(t)
	if "go"+goVersion != toolchain {
		t.Errorf("%s: ARG GO_VERSION=%s, want go.mod's toolchain %s", dockerfile, goVersion, toolchain)
	}

	mk := mustRead(t, filepath.Join(repoRoot, "Makefile"))
	wantEnv, wantArgs, err := makefileBuild(mk)
	if err != nil {
		t.Fatal(err)
	}
	var builds int
	var out string
	for _, in := range ins {
		if in.cmd != "RUN" || !strings.Contains(in.args, "go build") {
			continue
		}
		builds++
		cmdline := in.args
		for strings.HasPrefix(cmdline, "--") { // RUN --mount=... options
			_, cmdline, _ = strings.Cut(cmdline, " ")
			cmdline = strings.TrimSpace(cmdline)
		}
		env, args, err := goBuild(cmdline)
		if err != nil {
			t.Fatalf("%s: %v", dockerfile, err)
		}
		if diff := cmp.Diff(wantEnv, env); diff != "" {
			t.Errorf("%s: go build environment differs from the Makefile's (-Makefile +%s):\n%s", dockerfile, dockerfile, diff)
		}
		if diff := cmp.Diff(wantArgs, args); diff != "" {
			t.Errorf("%s: go build flags differ from the Makefile's (-Makefile +%s):\n%s", dockerfile, dockerfile, diff)
		}
		words, _ := shellWords(cmdline)
		if i := slices.Index(words, "-o"); i >= 0 && i+2 < len(words) {
			out = words[i+1]
			if pkg := words[i+2]; pkg != "./cmd/lpsd" {
				t.Errorf("%s: go build builds %s, want ./cmd/lpsd", dockerfile, pkg)
			}
		}
	}
	if builds != 1 || out == "" {
		t.Fatalf("%s: %d go build lines with -o OUT ./cmd/lpsd, want 1", dockerfile, builds)
	}
	if !slices.Contains(wantEnv, "CGO_ENABLED=0") {
		t.Errorf("Makefile: go build without CGO_ENABLED=0: the image's binary would not be static")
	}

	final := finalStage(ins)
	if len(final) == 0 {
		t.Fatalf("%s: no FROM", dockerfile)
	}
	base := final[0].args
	if base != "scratch" && !strings.HasPrefix(base, "gcr.io/distroless/static") {
		t.Errorf("%s: final stage FROM %s, want scratch or gcr.io/distroless/static*", dockerfile, base)
	}
	var user, entrypoint, copied string
	var exposed []string
	for _, in := range final[1:] {
		switch in.cmd {
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			entrypoint = in.args
		case "EXPOSE":
			exposed = append(exposed, strings.Fields(in.args)...)
		case "COPY":
			f := strings.Fields(in.args)
			if len(f) == 3 && f[0] == "--from=build" && f[1] == out {
				copied = f[2]
			}
		case "RUN", "ADD", "HEALTHCHECK":
			t.Errorf("%s: final stage has %s: it is a static base with no shell", dockerfile, in.cmd)
		}
	}
	// Kubernetes' runAsNonRoot can only check a numeric user.
	uid, _, _ := strings.Cut(user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("%s: USER %q, want a numeric non-root uid[:gid]", dockerfile, user)
	}
	if copied == "" {
		t.Errorf("%s: final stage does not COPY --from=build %s", dockerfile, out)
	}
	var ep []string
	if err := json.Unmarshal([]byte(entrypoint), &ep); err != nil || len(ep) == 0 || ep[0] != copied {
		t.Errorf("%s: ENTRYPOINT %s, want the exec form [%q]", dockerfile, entrypoint, copied)
	}

	if testing.Short() {
		return
	}
	l := builtLPSD(t)
	for _, f := range []string{"listen", "admin-listen", "http-listen"} {
		_, port, err := net.SplitHostPort(l.flags[f].def)
		if err != nil {
			t.Fatalf("lpsd --%s default %q: %v", f, l.flags[f].def, err)
		}
		if !slices.Contains(exposed, port) {
			t.Errorf("%s: EXPOSE %v lacks %s, the port of --%s (default %s)", dockerfile, exposed, port, f, l.flags[f].def)
		}
	}
}

func goModToolchain(t *testing.T) string {
	t.Helper()
	for _, line := range strings.Split(mustRead(t, filepath.Join(repoRoot, "go.mod")), "\n") {
		if v, ok := strings.CutPrefix(line, "toolchain "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("go.mod: no toolchain line")
	return ""
}

func TestParseDockerfile(t *testing.T) {
	got := parseDockerfile("# c\nARG A=1\n\nRUN --mount=x \\\n\tgo build \\\n\t-o /o .\nentrypoint [\"/o\"]\n")
	want := []instruction{{"ARG", "A=1"}, {"RUN", "--mount=x  go build  -o /o ."}, {"ENTRYPOINT", `["/o"]`}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(instruction{})); diff != "" {
		t.Errorf("parseDockerfile mismatch (-want +got):\n%s", diff)
	}
}
