#!/usr/bin/env bats
# Each @test runs in its own subshell, so per-test exports are meant to be local:
# shellcheck disable=SC2030,SC2031
# Tests for deploy/node/aks-node-controller-hotfix.sh, the hotfix flow helper that later
# reference launchers source: its interface (anc_hotfix_log, anc_hotfix_read_feature_flags,
# anc_run_hotfix_flow, ANC_HOTFIX_SELECTED_BIN, the selected binary printed when run as a
# script), fail-open in every branch, and the reconstructed later launchers
# (reference/launcher.sh) provisioning through it, with the helper present and absent.
# The real agent is built once; the flow it runs is tested in Go (internal/node/launch, and
# test/e2e TestIntegrationLaterReferenceLaunchers against a real lpsd).

bats_require_minimum_version 1.5.0

HELPER="${BATS_TEST_DIRNAME}/../../deploy/node/aks-node-controller-hotfix.sh"
LATER="${BATS_TEST_DIRNAME}/reference/launcher.sh"
REPO="${BATS_TEST_DIRNAME}/../.."

setup_file() {
    export REAL_AGENT="$BATS_FILE_TMPDIR/aks-node-controller"
    (cd "$REPO" && CGO_ENABLED=0 go build -trimpath -tags grpcnotrace -ldflags "-X main.version=202604.01.0" -o "$REAL_AGENT" ./cmd/aks-node-controller)
}

setup() {
    T="$BATS_TEST_TMPDIR"
    unset BIN_PATH HOTFIX_BIN HOTFIX_JSON CONFIG_PATH NBC_CMD_PATH FEATURES_PATH IMDS_URL LPS_ADDR
    unset HOTFIX_FLOW_SCRIPT REFERENCE_GENERATION ANC_HOTFIX_SELECTED_BIN MY_FLAG
    export NODE_ROOT="$T/root" HOSTNAME_WAIT_SECONDS=1
    DIR="$NODE_ROOT/opt/azure/containers"
    BIN="$DIR/aks-node-controller"
    mkdir -p "$DIR" "$NODE_ROOT/etc" "$NODE_ROOT/proc/sys/kernel"
    echo node >"$NODE_ROOT/etc/hostname"
    echo node >"$NODE_ROOT/proc/sys/kernel/hostname"
    cp "$REAL_AGENT" "$BIN"
    cp "$HELPER" "$DIR/aks-node-controller-hotfix.sh"
    printf '#!/bin/sh\necho "bootstrap ran"\n' >"$DIR/aks-node-controller-nbc-cmd.sh"
    chmod 0600 "$DIR/aks-node-controller-nbc-cmd.sh"
}

fail() {
    echo "$*" >&2
    return 1
}

features() {
    printf '%b' "$1" >"$DIR/enabled_features.sh"
    chmod 0600 "$DIR/enabled_features.sh"
}

# flow sources the helper under the strictest shell options a launcher could use, runs
# anc_run_hotfix_flow as the later launchers do and prints what it exported.
flow() {
    bash -c 'set -euo pipefail
        source "$1"
        anc_run_hotfix_flow "$2" "$2-hotfix" "$3/aks-node-controller-hotfix.json" "$3/enabled_features.sh"
        printf "SELECTED=%s\n" "$ANC_HOTFIX_SELECTED_BIN"
        printf "MY_FLAG=%s\n" "${MY_FLAG-unset}"
        printf "LD_PRELOAD=%s\n" "${LD_PRELOAD-unset}"' _ "$HELPER" "$BIN" "$DIR"
}

# fake_baked replaces the baked agent with a script whose `launch` runs $1 (shell code).
fake_baked() {
    # shellcheck disable=SC2016 # $1 and $* are the fake's own
    printf '#!/usr/bin/env bash\ncase "$1" in\nlaunch) %s ;;\nprovision) echo "baked provision $*" ;;\nesac\n' "$1" >"$BIN"
    chmod 0755 "$BIN"
}

@test "run as a script: the flow's lines, then the selected binary as the last line" {
    run bash "$HELPER"
    [ "$status" -eq 0 ] || fail "status $status: $output"
    [ "${lines[-1]}" = "$BIN" ] || fail "last line: ${lines[-1]}"
    [[ "$output" == *"Using VHD-baked binary: $BIN"* ]] || fail "$output"
}

@test "sourced under set -euo pipefail: exports the selection and the accepted flags, never a reserved one" {
    features 'MY_FLAG=a=b\nLD_PRELOAD=/tmp/evil.so\n# comment\n\nENABLE_PROVISIONING_HOTFIX=false\n'
    run flow
    [ "$status" -eq 0 ] || fail "status $status: $output"
    [[ "$output" == *"SELECTED=$BIN"* ]] || fail "$output"
    [[ "$output" == *"MY_FLAG=a=b"* ]] || fail "a value holding = is kept whole: $output"
    [[ "$output" == *"LD_PRELOAD=unset"* ]] || fail "a reserved key was exported: $output"
    [[ "$output" == *"reserved key LD_PRELOAD"* ]] || fail "the refusal is not said: $output"
    [[ "$output" != *"running check-hotfix"* ]] || fail "check-hotfix ran with the flag false: $output"
}

@test "an executable hotfix binary is not chosen because it is executable: Select decides" {
    printf '#!/bin/sh\necho 202604.01.9\n' >"$BIN-hotfix"
    chmod 0755 "$BIN-hotfix"
    run flow
    [ "$status" -eq 0 ] || fail "status $status: $output"
    [[ "$output" == *"SELECTED=$BIN"* ]] || fail "$output"
    [[ "$output" != *"apply-embedded-hotfix"* ]] || fail "apply-embedded ran for an agent not chosen: $output"
}

@test "the flag exactly true runs check-hotfix, which fails open, then the pointer's download-hotfix" {
    features 'ENABLE_PROVISIONING_HOTFIX=true\n'
    export IMDS_URL=http://127.0.0.1:9 LPS_ADDR=127.0.0.1:9
    printf '{"hotfixes":{"202604.01":"202604.01.1"}}' >"$DIR/aks-node-controller-hotfix.json"
    run flow
    [ "$status" -eq 0 ] || fail "status $status: $output"
    for want in "ENABLE_PROVISIONING_HOTFIX=true; running check-hotfix to refresh hotfix pointer" \
        "Found ANC hotfix config at $DIR/aks-node-controller-hotfix.json; running download-hotfix" \
        "ANC download-hotfix" "Using VHD-baked binary: $BIN" "SELECTED=$BIN"; do
        [[ "$output" == *"$want"* ]] || fail "lacks \"$want\": $output"
    done
    [[ "$output" == *"ANC check-hotfix completed"* || "$output" == *"ANC check-hotfix failed; continuing (fail-open)"* ]] || fail "$output"
}

@test "fail-open: a missing baked agent leaves the baked path selected" {
    rm "$BIN"
    run flow
    [ "$status" -eq 0 ] || fail "status $status: $output"
    [[ "$output" == *"SELECTED=$BIN"* ]] || fail "$output"
    [[ "$output" == *"exited with code 127; continuing (fail-open)"* ]] || fail "$output"
}

@test "fail-open: an agent without launch, or one that dies, leaves the baked agent selected" {
    for body in 'echo "unknown command: launch" >&2; exit 2' 'kill -9 $$' 'echo "selected /evil" >&3; exit 1'; do
        fake_baked "$body"
        run flow
        [ "$status" -eq 0 ] || fail "$body: status $status: $output"
        [[ "$output" == *"SELECTED=$BIN"* ]] || fail "$body: $output"
        [[ "$output" == *"Using VHD-baked binary: $BIN"* ]] || fail "$body: $output"
    done
}

@test "records: the last selected one wins, malformed flag keys are never exported" {
    fake_baked "printf '%s\\n' 'flag 1BAD=x' 'flag MY_FLAG=ok' garbage 'selected /x' 'selected $BIN-hotfix' >&3"
    run flow
    [ "$status" -eq 0 ] || fail "status $status: $output"
    [[ "$output" == *"MY_FLAG=ok"* ]] || fail "$output"
    [[ "$output" == *"SELECTED=$BIN-hotfix"* ]] || fail "$output"
}

@test "the strict later launcher with the helper: provisions with the selected agent" {
    fake_baked "echo 'selected $BIN-hotfix' >&3"
    printf '#!/usr/bin/env bash\necho "hotfix provision $*"\n' >"$BIN-hotfix"
    chmod 0755 "$BIN-hotfix"
    run bash "$LATER"
    [ "$status" -eq 0 ] || fail "status $status: $output"
    [[ "$output" == *"hotfix provision provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh --root $NODE_ROOT"* ]] || fail "$output"
    [[ "$output" == *"aks-node-controller completed successfully"* ]] || fail "$output"
}

@test "the strict later launcher with the helper and the real agent: the baked agent provisions" {
    run bash "$LATER"
    [ "$status" -eq 0 ] || fail "status $status: $output"
    [[ "$output" == *"Using VHD-baked binary: $BIN"* ]] || fail "$output"
    [[ "$output" == *"bootstrap ran"* ]] || fail "$output"
    [[ "$output" == *"aks-node-controller completed successfully"* ]] || fail "$output"
}

@test "without the helper: the strict launcher exits 1, the skipping one provisions with the baked agent" {
    rm "$DIR/aks-node-controller-hotfix.sh"
    run bash "$LATER"
    [ "$status" -eq 1 ] || fail "status $status: $output"
    [[ "$output" == *"Missing ANC hotfix flow script: $DIR/aks-node-controller-hotfix.sh"* ]] || fail "$output"
    [[ "$output" != *"bootstrap ran"* ]] || fail "$output"
    export REFERENCE_GENERATION=skipping
    run bash "$LATER"
    [ "$status" -eq 0 ] || fail "status $status: $output"
    [[ "$output" == *"bootstrap ran"* ]] || fail "$output"
}

@test "HOTFIX_FLOW_SCRIPT points the launcher at the helper elsewhere" {
    mv "$DIR/aks-node-controller-hotfix.sh" "$T/elsewhere.sh"
    export HOTFIX_FLOW_SCRIPT="$T/elsewhere.sh"
    run bash "$LATER"
    [ "$status" -eq 0 ] || fail "status $status: $output"
    [[ "$output" == *"Using VHD-baked binary: $BIN"* ]] || fail "$output"
}

@test "anc_hotfix_read_feature_flags exports what the agent accepts; a missing file exports nothing" {
    features 'MY_FLAG=on\nBASH_ENV=/tmp/x\n'
    run bash -c 'set -euo pipefail; export BIN_PATH="$2"; source "$1"; anc_hotfix_read_feature_flags "$3"; echo "MY_FLAG=${MY_FLAG-unset} BASH_ENV=${BASH_ENV-unset}"; anc_hotfix_read_feature_flags /nonexistent; anc_hotfix_log done' \
        _ "$HELPER" "$BIN" "$DIR/enabled_features.sh"
    [ "$status" -eq 0 ] || fail "status $status: $output"
    [[ "$output" == *"MY_FLAG=on BASH_ENV=unset"* ]] || fail "$output"
    [ "${lines[-1]}" = "done" ] || fail "$output"
}

@test "packaging installs the helper beside the launcher" {
    mkdir -p "$T/bin"
    cp "$REAL_AGENT" "$T/bin/aks-node-controller"
    run make -s -C "$REPO" install-node BIN="$T/bin" DESTDIR="$T/image"
    [ "$status" -eq 0 ] || fail "status $status: $output"
    for f in aks-node-controller aks-node-controller-launcher.sh aks-node-controller-hotfix.sh; do
        [ -x "$T/image/opt/azure/containers/$f" ] || fail "$f not installed: $(ls -R "$T/image")"
    done
    for u in aks-node-controller.service aks-node-controller-report-resend.service aks-node-controller-report-resend.timer; do
        [ -f "$T/image/etc/systemd/system/$u" ] || fail "$u not installed"
    done
}

@test "the helper stays a shim: no parsing of versions, pointers or the flag's value" {
    [ "$(grep -cv '^\s*#' "$HELPER")" -le 80 ] || fail "$(wc -l <"$HELPER") lines"
    ! grep -q 'version\|hotfixes\|= *"\?true' "$HELPER" || fail "the helper decides something Go should"
}

@test "a program the agent runs never holds the result pipe: no wait for it, no records of its own" {
    # No release keys: download-hotfix takes the repository route (refused at once here), then
    # the package manager, whose first program is this fake `env`. It tries to forge records
    # on fd 3 and to keep fd 3 open from a detached grandchild.
    mkdir -p "$NODE_ROOT/etc/apt/sources.list.d" "$T/fakebin"
    printf 'ID=ubuntu\nVERSION_ID="24.04"\n' >"$NODE_ROOT/etc/os-release"
    echo 'deb https://127.0.0.1:9/ubuntu/24.04/prod noble main' >"$NODE_ROOT/etc/apt/sources.list.d/microsoft-prod.list"
    printf '{"hotfixes":{"202604.01":"202604.01.1"}}' >"$DIR/aks-node-controller-hotfix.json"
    cat >"$T/fakebin/env" <<EOS
#!/usr/bin/env bash
if { printf 'flag MY_FLAG=forged\nselected $BIN-hotfix\n' >&3; } 2>/dev/null; then
    echo open >>"$T/fd3"
    setsid bash -c 'exec sleep 600' </dev/null >/dev/null 2>&1 &
    echo \$! >"$T/holder"
else
    echo closed >>"$T/fd3"
fi
exit 1
EOS
    chmod 0755 "$T/fakebin/env"
    PATH="$T/fakebin:$PATH" run flow
    [[ -f "$T/holder" ]] && kill "$(cat "$T/holder")" 2>/dev/null
    [ "$status" -eq 0 ] || fail "status $status: $output"
    [ -f "$T/fd3" ] || fail "the package manager route did not run: $output"
    ! grep -q open "$T/fd3" || fail "a child of the agent had the result fd open"
    [[ "$output" == *"SELECTED=$BIN"$'\n'* ]] || fail "$output"
    [[ "$output" == *"MY_FLAG=unset"* ]] || fail "$output"
}

@test "a selected record naming neither binary is not taken; the selection cannot come from a flag" {
    fake_baked "printf '%s\\n' 'flag ANC_HOTFIX_SELECTED_BIN=/evil' 'selected /tmp/evil' >&3"
    run flow
    [ "$status" -eq 0 ] || fail "status $status: $output"
    [[ "$output" == *"SELECTED=$BIN"$'\n'* ]] || fail "$output"
    [[ "$output" == *"named no binary it may choose (/tmp/evil)"* ]] || fail "$output"
}

@test "a flag naming a launcher's array, integer, nameref or read-only variable is skipped" {
    fake_baked "printf '%s\\n' 'flag arr=x' 'flag num=oops' 'flag ref=x' 'flag ro=x' 'flag plain=ok' >&3"
    run bash -c 'set -euo pipefail
        arr=(a b); declare -i num=1; target=keep; declare -n ref=target; declare -r ro=1; plain=
        source "$1"
        anc_run_hotfix_flow "$2" "$2-hotfix" /nonexistent /nonexistent
        echo "arr=${arr[*]} num=$num target=$target ro=$ro plain=$plain"' _ "$HELPER" "$BIN"
    [ "$status" -eq 0 ] || fail "status $status: $output"
    [[ "$output" == *"arr=a b num=1 target=keep ro=1 plain=ok"* ]] || fail "$output"
}

@test "a closed stdout cannot abort a set -e launcher through the helper's log" {
    rm "$BIN"
    run bash -c 'set -euo pipefail; source "$1"; anc_run_hotfix_flow "$2" "$2-hotfix" /x /y >&-; echo "rc=0 $ANC_HOTFIX_SELECTED_BIN" >&2' _ "$HELPER" "$BIN"
    [ "$status" -eq 0 ] || fail "status $status: $output"
    [[ "$output" == *"rc=0 $BIN"* ]] || fail "$output"
}
