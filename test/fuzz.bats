#!/usr/bin/env bats
# Tests for test/fuzz.sh, make fuzz's runner: a found input fails the run, and the fuzzing
# engine's own -fuzztime deadline (golang/go#75804) passes only when the target's corpus
# replays clean. Each test runs the script in a throwaway module of its own; the deadline,
# which cannot be provoked on demand, comes from a go wrapper that answers -fuzz with the
# engine's exact failure and hands everything else to the real go.

bats_require_minimum_version 1.5.0

SCRIPT="${BATS_TEST_DIRNAME}/fuzz.sh"

setup() {
    M="$BATS_TEST_TMPDIR/mod"
    mkdir -p "$M/p"
    printf 'module example.com/fz\n\ngo 1.22\n' >"$M/go.mod"
    printf 'package p\n\n// Bad reports whether b starts with "!".\nfunc Bad(b []byte) bool { return len(b) > 0 && b[0] == 0x21 }\n' >"$M/p/p.go"
    REAL_GO=$(command -v go)
    export REAL_GO
}

target() { # writes p's fuzz target; $1 is the seed it adds
    cat >"$M/p/p_test.go" <<EOF
package p

import "testing"

func FuzzBad(f *testing.F) {
	f.Add([]byte("$1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if Bad(b) {
			t.Fatalf("bad input %q", b)
		}
	})
}
EOF
}

deadline_go() { # puts a go first on PATH whose -fuzz runs fail as the engine's race does
    mkdir -p "$BATS_TEST_TMPDIR/bin"
    cat >"$BATS_TEST_TMPDIR/bin/go" <<'EOF'
#!/usr/bin/env bash
for a; do
	case $a in -fuzz=*)
		printf -- '--- FAIL: FuzzBad (10.08s)\n    context deadline exceeded\nFAIL\n'
		exit 1
		;;
	esac
done
exec "$REAL_GO" "$@"
EOF
    chmod +x "$BATS_TEST_TMPDIR/bin/go"
    PATH="$BATS_TEST_TMPDIR/bin:$PATH"
}

@test "a target the fuzzer finds nothing in passes" {
    target "ok"
    sed -i 's/return len(b) > 0 \&\& b\[0\] == 0x21/return false/' "$M/p/p.go"
    cd "$M"
    run -0 env FUZZTIME=50x "$SCRIPT"
    [[ "$output" == *"fuzz example.com/fz/p FuzzBad"* ]]
}

@test "an input the fuzzer finds fails the run and is kept" {
    target "ok"
    cd "$M"
    run -1 env FUZZTIME=30s "$SCRIPT"
    [[ "$output" == *"Failing input written to testdata/fuzz/FuzzBad"* ]]
    compgen -G "$M/p/testdata/fuzz/FuzzBad/*" >/dev/null
}

@test "the engine's own deadline passes when the corpus replays clean" {
    target "ok"
    deadline_go
    cd "$M"
    run -0 "$SCRIPT"
    [[ "$output" == *"the fuzzing engine's own deadline (golang/go#75804)"* ]]
    [[ "$output" == *"ok"*"example.com/fz/p"* ]]
}

@test "the engine's own deadline fails when the corpus does not replay" {
    target "!seed"
    deadline_go
    cd "$M"
    run -1 "$SCRIPT"
    [[ "$output" == *"bad input"* ]]
}

@test "a deadline with an input written is a finding, not the engine" {
    target "ok"
    deadline_go
    mkdir -p "$M/p/testdata/fuzz/FuzzBad"
    # the wrapper writes an input on its -fuzz run, as the fuzzer does on a find
    # shellcheck disable=SC2016 # $PWD is the wrapper's, expanded when it runs
    sed -i 's|exit 1$|echo x >"$PWD/p/testdata/fuzz/FuzzBad/found"; exit 1|' "$BATS_TEST_TMPDIR/bin/go"
    cd "$M"
    run -1 "$SCRIPT"
    [[ "$output" == *"context deadline exceeded"* ]]
    [[ "$output" != *"engine's own deadline"* ]]
}
