#!/usr/bin/env bash
# Runs every fuzz target of the module for FUZZTIME each (make fuzz).
#
# A target fails the run when the fuzzer finds an input that fails it (it
# writes that input under the package's testdata/fuzz/<target>/) or when the
# run fails for any other reason, except one: Go's fuzzing coordinator can
# report its own -fuzztime deadline as a failure ("context deadline
# exceeded", golang/go#75804, fixed in Go 1.27). That failure writes no input,
# so it is told apart by exactly that: a bare deadline with no new input is
# followed by a replay of the target's corpus, and passes only if the replay
# does.
set -euo pipefail

fuzztime=${FUZZTIME:-10s}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

inputs() { # the failing inputs stored for target $2 of package dir $1
	if [ -d "$1/testdata/fuzz/$2" ]; then find "$1/testdata/fuzz/$2" -type f | sort; fi
}

go list -f '{{.ImportPath}} {{.Dir}}' ./... | while read -r pkg dir; do
	mapfile -t targets < <(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //')
	for f in "${targets[@]}"; do
		echo "fuzz $pkg $f"
		before=$(inputs "$dir" "$f")
		if go test -run='^$' -fuzz="^$f\$" -fuzztime="$fuzztime" -fuzzminimizetime=1s "$pkg" >"$out" 2>&1; then
			continue
		fi
		if [ "$(inputs "$dir" "$f")" = "$before" ] && grep -qx '[[:space:]]*context deadline exceeded' "$out" &&
			! grep -q 'Failing input written' "$out"; then
			echo "  $f: the fuzzing engine's own deadline (golang/go#75804), no failing input; replaying its corpus"
			go test -count=1 -run="^$f\$" "$pkg"
			continue
		fi
		cat "$out"
		exit 1
	done
done
