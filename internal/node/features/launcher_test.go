package features

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// launcherPath is the on-node launcher, the production reader of the file.
const launcherPath = "../../../deploy/node/aks-node-controller-launcher.sh"

// launcherHarness sources the launcher (sourcing runs nothing), silences
// its logging, and applies its file checks and parser to $1. It prints, NUL
// separated: "void", or "ok" and each accepted key and value; then "reserved"
// and those of the remaining arguments the launcher refuses as reserved.
const launcherHarness = `
source "$LAUNCHER" || exit 9
log() { :; }
f="$1"
shift
if ! _read_features "$f"; then
	printf 'void\0'
else
	printf 'ok\0'
	for i in "${!_FEATURE_KEYS[@]}"; do
		printf '%s\0%s\0' "${_FEATURE_KEYS[$i]}" "${_FEATURE_VALUES[$i]}"
	done
fi
printf 'reserved\0'
for k in "$@"; do
	if _reserved_key_reason "$k"; then printf '%s\0' "$k"; fi
done
`

// launcherRead runs the launcher's reader on data under locale and returns
// the pairs it would export (nil when it voids the file) and which of
// candidates it reserves.
func launcherRead(t testing.TB, data []byte, locale string, candidates []string) (map[string]string, map[string]bool) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "enabled_features.sh")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", append([]string{"-c", launcherHarness, "harness", path}, candidates...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LAUNCHER=" + launcherPath, "LC_ALL=" + locale}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("launcher harness: %v\n%s", err, stderr.String())
	}
	fields := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	var pairs map[string]string
	i := 1
	if fields[0] == "ok" {
		pairs = map[string]string{}
		for ; fields[i] != "reserved"; i += 2 {
			pairs[fields[i]] = fields[i+1]
		}
	}
	reserved := map[string]bool{}
	for _, k := range fields[i+1:] {
		reserved[k] = true
	}
	return pairs, reserved
}

// checkAgreement asserts that the launcher voids data exactly when Parse
// does and otherwise exports exactly Parse's pairs, less the keys the
// launcher reserves.
func checkAgreement(t testing.TB, data []byte) {
	t.Helper()
	goPairs, err := Parse(data)
	var keys []string
	for k := range goPairs {
		keys = append(keys, k)
	}
	for _, locale := range []string{"C", "C.UTF-8"} {
		shPairs, reserved := launcherRead(t, data, locale, keys)
		if err != nil {
			if shPairs != nil {
				t.Fatalf("LC_ALL=%s: Parse(%q) voids the file (%v), the launcher exports %q", locale, data, err, shPairs)
			}
			continue
		}
		if shPairs == nil {
			t.Fatalf("LC_ALL=%s: the launcher voids %q, Parse accepts %q", locale, data, goPairs)
		}
		want := map[string]string{}
		for k, v := range goPairs {
			if !reserved[k] {
				want[k] = v
			}
		}
		if diff := cmp.Diff(want, shPairs); diff != "" {
			t.Fatalf("LC_ALL=%s: launcher and Parse disagree on %q (-Parse +launcher):\n%s", locale, data, diff)
		}
	}
}

// agreementSeeds are the feature-flag rows of security.md §5 (1–4) in the
// flag's real spelling, plus grammar corners.
var agreementSeeds = []string{
	"",
	"ENABLE_PROVISIONING_HOTFIX=true\n",
	"ENABLE_PROVISIONING_HOTFIX=false\n",
	"ENABLE_PROVISIONING_HOTFIX=0\n",
	"ENABLE_PROVISIONING_HOTFIX=true\r\n",
	"A=1\nENABLE_PROVISIONING_HOTFIX=true\r\n",
	"ENABLE_PROVISIONING_HOTFIX=$(curl x|sh)\n",
	"ENABLE_PROVISIONING_HOTFIX=`reboot`\n",
	"ENABLE_PROVISIONING_HOTFIX=true;reboot\n",
	"ENABLE_PROVISIONING_HOTFIX=true\nENABLE_PROVISIONING_HOTFIX=false\n",
	"export ENABLE_PROVISIONING_HOTFIX=true\n",
	" ENABLE_PROVISIONING_HOTFIX = true\n",
	"ENABLE_PROVISIONING_HOTFIX = true\n",
	"enable_provisioning_hotfix=true\n",
	"ENABLE_PROVISIONING_HOTFIX=\"true\"\n",
	"ENABLE_PROVISIONING_HOTFIX='true'\n",
	"\ufeffENABLE_PROVISIONING_HOTFIX=true\n",
	"ENABLE_PROVISIONING_HOTFIX=true\x00\n",
	"ENABLE_PROVISIONING_HOTFIX=true # on\n",
	"# ENABLE_PROVISIONING_HOTFIX=true\n",
	"ENABLE_PROVISIONING_HOTFIX\n",
	"=true\n",
	"1X=y\nX1=y\n_=y\n",
	"PATH=/x\nLD_PRELOAD=/x\nHOTFIX_BIN=/x\n_SELECTED_BIN=/x\nOK=1\n",
	"PATH=/x\nPATH=/y\n",
	"A=\xff\xfe\nB\xc3\xa9=1\nC=\xc3\xa9\n",
	// An invalid UTF-8 lead byte before LF: bash's read in a UTF-8 locale
	// used to swallow the LF, merge the lines and so hide this duplicate.
	"ENABLE_PROVISIONING_HOTFIX=true\nX=\xc3\nENABLE_PROVISIONING_HOTFIX=false\n",
	"X=\xe2\x82\nENABLE_PROVISIONING_HOTFIX=true\n",
	"A=a=b=\nB= x \nC=\n",
	"A=\\\nB=\\n\n",
	"A=1\n\n\n",
	"A=1",
	strings.Repeat("#\n", MaxLines),
	strings.Repeat("#\n", MaxLines) + "\n",
	strings.Repeat("#\n", MaxLines+1),
	"ENABLE_PROVISIONING_HOTFIX=true\nPAD=" + strings.Repeat("x", 70<<10) + "\n",
	"PAD=" + strings.Repeat("x", MaxSize-5),
	"PAD=" + strings.Repeat("x", MaxSize-4),
}

// FuzzLauncherAgreesWithParse checks that the launcher, which decides what a
// node runs, reads every file exactly as Parse does, in the C and UTF-8
// locales: the two readers of a data-only format must never diverge, so
// "only exactly true turns the path on" (TestHotfixEnabled) holds on the
// node too. The seeds run in every go test.
func FuzzLauncherAgreesWithParse(f *testing.F) {
	if _, err := exec.LookPath("bash"); err != nil {
		f.Skip("bash not found")
	}
	for _, s := range agreementSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAgreement(t, data)
	})
}
