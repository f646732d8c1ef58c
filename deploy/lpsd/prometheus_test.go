package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

const alertsFile = "prometheus/lpsd-alerts.yaml"

// TestAlertRules checks the shipped alerting rules with promtool (Debian
// package prometheus; .ci/run installs it): they parse, and each alert
// fires on what it is for and not on its look-alikes
// (prometheus/lpsd-alerts.test.yaml).
func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv(allowNoToolsEnv) == "1" {
			t.Skipf("promtool not found and %s=1", allowNoToolsEnv)
		}
		t.Fatalf("promtool not found (Debian package prometheus; .ci/run installs it); set %s=1 to skip", allowNoToolsEnv)
	}
	for _, args := range [][]string{
		{"check", "rules", filepath.Base(alertsFile)},
		{"test", "rules", "lpsd-alerts.test.yaml"},
	} {
		cmd := exec.CommandContext(t.Context(), promtool, args...)
		cmd.Dir = filepath.Dir(alertsFile)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

// TestAlertRulesNameExportedMetrics: every lpsd_ metric the rules read is
// one lpsd's code declares, so a renamed metric cannot leave an alert
// that silently never fires.
func TestAlertRulesNameExportedMetrics(t *testing.T) {
	rules, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	quoted := regexp.MustCompile(`"(lpsd_[a-z_]+)"`)
	for _, dir := range []string{"../../internal/lps", "../../internal/lpsd"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range quoted.FindAllSubmatch(src, -1) {
				declared[string(m[1])] = true
			}
		}
	}
	var used []string
	for _, m := range regexp.MustCompile(`\b(lpsd_[a-z_]+)\b`).FindAllSubmatch(rules, -1) {
		if n := string(m[1]); !slices.Contains(used, n) {
			used = append(used, n)
		}
	}
	if len(used) < 10 {
		t.Fatalf("the rules read %d lpsd metrics (%v), want the dozen they alert on", len(used), used)
	}
	for _, n := range used {
		if !declared[n] {
			t.Errorf("%s reads %s, which no lpsd code declares", alertsFile, n)
		}
	}
}
