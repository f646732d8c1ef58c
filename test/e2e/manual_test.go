package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nodehotfix/test/harness"
)

// TestIntegrationManualExamples runs every lpsctl example of the manual
// (the "Examples" section of cmd/lpsctl/doc.go) and of the README's "How a
// hotfix ships", in order, as an operator would paste them: the real
// lpsctl binary against a real lpsd, in a fresh directory holding the
// agent binary the examples sign. An example that does not work when
// copied fails here.
func TestIntegrationManualExamples(t *testing.T) {
	integration(t)
	for _, src := range []struct{ file, start, end string }{
		{"../../cmd/lpsctl/doc.go", "\n# Examples\n", "\n# "},
		{"../../README.md", "\n## How a hotfix ships\n\n```sh\n", "\n```"},
	} {
		t.Run(filepath.Base(src.file), func(t *testing.T) {
			doc, err := os.ReadFile(src.file)
			if err != nil {
				t.Fatal(err)
			}
			examples, err := extractExamples(string(doc), src.start, src.end)
			if err != nil {
				t.Fatal(err)
			}
			if len(examples) < 10 {
				t.Fatalf("%s: found %d examples, want the whole flow", src.file, len(examples))
			}
			s := newStack(t, stackOpts{})
			dir := t.TempDir()
			for _, ex := range examples {
				// release sign runs the agent it signs with `version`: the
				// agent in dir is one built as the example's --version.
				if v := signedVersion(ex.args); v != "" {
					if err := harness.BuildAgent(t.Context(), filepath.Join(dir, "aks-node-controller"), v); err != nil {
						t.Fatal(err)
					}
				}
				cmd := exec.CommandContext(t.Context(), env.bins.LPSCtl, ex.args[1:]...)
				cmd.Dir = dir
				cmd.Env = append(os.Environ(),
					"LPSCTL_SERVER="+s.lpsd.AdminAddr,
					"LPSCTL_TOKEN_FILE="+s.lpsd.TokenFile,
					"LPSCTL_CA="+s.lpsd.TLS.CAFile,
				)
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				if err := cmd.Run(); err != nil {
					t.Fatalf("%s line %d: %s\n%v\n%s", src.file, ex.line, ex.text, err, out.String())
				}
				t.Logf("$ %s\n%s", ex.text, out.String())
				if strings.HasPrefix(ex.text, "lpsctl rollout") || strings.HasPrefix(ex.text, "lpsctl release publish") {
					// Later examples (explain) read the serving snapshot.
					s.waitSynced(s.lpsd)
				}
			}
		})
	}
}

// signedVersion returns the --version of an lpsctl release sign command
// line, or "".
func signedVersion(args []string) string {
	if len(args) < 3 || args[1] != "release" || args[2] != "sign" {
		return ""
	}
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--version="); ok {
			return v
		}
		if a == "--version" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

type example struct {
	text string
	line int
	args []string
}

// extractExamples returns the lpsctl command lines of doc between start and
// the next end, joining lines continued with a backslash and dropping
// comments.
func extractExamples(doc, start, end string) ([]example, error) {
	i := strings.Index(doc, start)
	if i < 0 {
		return nil, errors.New("no section " + strings.TrimSpace(start))
	}
	firstLine := strings.Count(doc[:i+len(start)], "\n") + 1
	section := doc[i+len(start):]
	if j := strings.Index(section, end); j >= 0 {
		section = section[:j]
	}
	var out []example
	lines := strings.Split(section, "\n")
	for n := 0; n < len(lines); n++ {
		line := strings.TrimSpace(lines[n])
		at := firstLine + n
		for strings.HasSuffix(line, `\`) && n+1 < len(lines) {
			n++
			line = strings.TrimSuffix(line, `\`) + " " + strings.TrimSpace(lines[n])
		}
		if !strings.HasPrefix(line, "lpsctl ") {
			continue
		}
		args, err := splitWords(line)
		if err != nil {
			return nil, errors.New("line " + line + ": " + err.Error())
		}
		out = append(out, example{text: strings.Join(strings.Fields(line), " "), line: at, args: args})
	}
	return out, nil
}

// splitWords splits a command line as a POSIX shell would for the
// examples' needs: single and double quotes, backslash escapes, and a #
// comment at the start of a word. Anything else a shell would do to the
// line (variables, pipes, redirections) is refused, so an example cannot
// depend on it.
func splitWords(line string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '#' && !inWord:
			return words, nil
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("unterminated '")
			}
			cur.WriteString(line[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			j := strings.IndexByte(line[i+1:], '"')
			if j < 0 {
				return nil, errors.New(`unterminated "`)
			}
			s := line[i+1 : i+1+j]
			if strings.ContainsAny(s, "$`\\") {
				return nil, errors.New("expansion inside double quotes")
			}
			cur.WriteString(s)
			i += j + 1
			inWord = true
		case c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
			inWord = true
		case strings.IndexByte("$`|&;<>()*?[]{}~", c) >= 0:
			return nil, errors.New("shell syntax " + string(c) + " in an example")
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

func TestSplitWords(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][]string{
		`lpsctl rollout set 1 --subscriptions ''`:          {"lpsctl", "rollout", "set", "1", "--subscriptions", ""},
		`lpsctl rollout set 1 --subscriptions ""  # all`:   {"lpsctl", "rollout", "set", "1", "--subscriptions", ""},
		`lpsctl x --reason "ICM 1234: bad kubelet flag"`:   {"lpsctl", "x", "--reason", "ICM 1234: bad kubelet flag"},
		`lpsctl x --comment 'it'\''s'`:                     {"lpsctl", "x", "--comment", "it's"},
		`lpsctl x a#b`:                                     {"lpsctl", "x", "a#b"},
		"lpsctl status\t# per release":                     {"lpsctl", "status"},
		`lpsctl release sign --artifact linux/amd64=./a,b`: {"lpsctl", "release", "sign", "--artifact", "linux/amd64=./a,b"},
	} {
		got, err := splitWords(in)
		if err != nil || strings.Join(got, "\x00") != strings.Join(want, "\x00") || len(got) != len(want) {
			t.Errorf("splitWords(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{`lpsctl status | jq`, `lpsctl x "$HOME"`, `lpsctl x 'open`, `lpsctl x > f`, `lpsctl x <vmId>`} {
		if got, err := splitWords(bad); err == nil {
			t.Errorf("splitWords(%q) = %q, want an error", bad, got)
		}
	}
}

// TestIntegrationDashboardOnAdminListener: the lpsd that ships serves the
// dashboard beside the gRPC admin API, on the admin listener's TLS, and a
// token signs in.
func TestIntegrationDashboardOnAdminListener(t *testing.T) {
	integration(t)
	s := newStack(t, stackOpts{})
	s.publishDraft(hotfix1, "")
	pem, err := os.ReadFile(s.lpsd.TLS.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	base := "https://" + s.lpsd.AdminAddr
	tok, err := os.ReadFile(s.lpsd.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	_, token, _ := strings.Cut(strings.TrimSpace(string(tok)), ":")
	resp, err := c.PostForm(base+"/login", url.Values{"token": {token}, "next": {"/"}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// The sign-in redirects to the releases page, which lists the draft
	// once the dashboard's first refresh is in.
	deadline := time.Now().Add(10 * time.Second)
	for resp.StatusCode == http.StatusOK && !strings.Contains(string(body), hotfix1) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if resp, err = c.Get(base + "/"); err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), hotfix1) || !strings.Contains(string(body), "token:harness (operator)") {
		t.Fatalf("dashboard after sign-in: %d\n%.600s", resp.StatusCode, body)
	}
	// And lpsctl, on the same listener, still works.
	if out := s.ctl("status"); !strings.Contains(out, hotfix1) {
		t.Errorf("lpsctl status beside the dashboard:\n%s", out)
	}
}
