#!/usr/bin/env bats
# Each @test runs in its own subshell, so per-test exports are meant to be local:
# shellcheck disable=SC2030,SC2031
# Tests for deploy/node/aks-node-controller-launcher.sh, the shim in front of
# `aks-node-controller launch`: its environment overrides, its exit code and its two fallbacks to
# `<baked> provision` (launch missing, launch ending before it provisions). What launch
# itself does is tested in Go (internal/node/launch, test/e2e with the real binaries).

bats_require_minimum_version 1.5.0

LAUNCHER="${BATS_TEST_DIRNAME}/../../deploy/node/aks-node-controller-launcher.sh"
FAKE_AGENT="${BATS_TEST_DIRNAME}/fake-agent.sh"

setup_file() {
    # A real Go agent whose launch panics: the failure a bug in launch would cause.
    export PANIC_AGENT="$BATS_FILE_TMPDIR/panicagent"
    (cd "${BATS_TEST_DIRNAME}/panicagent" && CGO_ENABLED=0 go build -o "$PANIC_AGENT" .)
}

setup() {
    T="$BATS_TEST_TMPDIR"
    export FAKE_CALLS="$T/calls"
    : >"$FAKE_CALLS"
    unset BIN_PATH HOTFIX_JSON CONFIG_PATH NBC_CMD_PATH FEATURES_PATH IMDS_URL LPS_ADDR HOSTNAME_WAIT_SECONDS
    unset FAKE_LAUNCH FAKE_EXIT_LAUNCH FAKE_EXIT_PROVISION AKS_NODE_CONTROLLER_LAUNCH_ID
    export NODE_ROOT="$T/root"
    DIR="$NODE_ROOT/opt/azure/containers"
    mkdir -p "$DIR"
    install_agent "$FAKE_AGENT"
    echo 'echo bootstrap' >"$DIR/aks-node-controller-nbc-cmd.sh"
    echo '{}' >"$DIR/aks-node-controller-config.json"
}

install_agent() {
    cp "$1" "$DIR/aks-node-controller"
    chmod 0755 "$DIR/aks-node-controller"
}

# calls prints the recorded argv lines.
calls() {
    cat "$FAKE_CALLS"
}

fail() {
    echo "$*" >&2
    return 1
}

@test "runs launch with only --root under NODE_ROOT, and exits 0 when it does" {
    run bash "$LAUNCHER"
    [ "$status" -eq 0 ] || fail "status $status: $output"
    [ "$(calls)" = "launch --root $NODE_ROOT " ] || fail "calls: $(calls)"
}

@test "production argv: without NODE_ROOT, launch gets no flags" {
    unset NODE_ROOT
    export BIN_PATH="$DIR/aks-node-controller"
    run bash "$LAUNCHER"
    [ "$status" -eq 0 ] || fail "status $status: $output"
    [ "$(calls)" = "launch --bin-path=$DIR/aks-node-controller " ] || fail "calls: $(calls)"
}

@test "every environment override becomes launch's flag" {
    export BIN_PATH="$DIR/aks-node-controller" HOTFIX_JSON=/h.json CONFIG_PATH=/c.json NBC_CMD_PATH=/n.sh
    export FEATURES_PATH=/f.sh IMDS_URL=http://127.0.0.1:9 LPS_ADDR=127.0.0.1:8443 HOSTNAME_WAIT_SECONDS=5
    run bash "$LAUNCHER"
    [ "$status" -eq 0 ] || fail "status $status: $output"
    want="launch --root $NODE_ROOT --bin-path=$DIR/aks-node-controller --hotfix-json=/h.json --provision-config=/c.json --nbc-cmd=/n.sh --features=/f.sh --imds-url=http://127.0.0.1:9 --lps-addr=127.0.0.1:8443 --hostname-wait=5s "
    [ "$(calls)" = "$want" ] || fail "calls: $(calls)"
}

@test "a malformed HOSTNAME_WAIT_SECONDS is dropped, not passed on" {
    export HOSTNAME_WAIT_SECONDS='5; rm -rf /'
    run bash "$LAUNCHER"
    [ "$status" -eq 0 ] || fail "status $status: $output"
    [ "$(calls)" = "launch --root $NODE_ROOT " ] || fail "calls: $(calls)"
}

@test "launch gets a launch ID in its environment" {
    export FAKE_LAUNCH=env FAKE_ENV_DUMP="$T/env"
    run bash "$LAUNCHER"
    [ "$status" -eq 0 ] || fail "status $status: $output"
    [[ "$(cat "$T/env")" =~ ^[0-9]+-[0-9]+$ ]] || fail "launch ID: $(cat "$T/env")"
}

@test "after launch's handover a failed provisioning keeps its exit code, with no second provision" {
    export FAKE_LAUNCH=started FAKE_EXIT_LAUNCH=9
    run bash "$LAUNCHER"
    [ "$status" -eq 9 ] || fail "status $status: $output"
    [ "$(calls)" = "launch --root $NODE_ROOT " ] || fail "calls: $(calls)"
}

@test "an older agent without launch: the baked agent provisions, with the reference's argv" {
    export FAKE_LAUNCH=unknown FAKE_EXIT_PROVISION=0
    run bash "$LAUNCHER"
    [ "$status" -eq 0 ] || fail "status $status: $output"
    want="launch --root $NODE_ROOT 
provision --provision-config=$DIR/aks-node-controller-config.json --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh --root $NODE_ROOT "
    [ "$(calls)" = "$want" ] || fail "calls: $(calls)"
    [[ "$output" == *"Using VHD-baked binary: $DIR/aks-node-controller"* ]] || fail "$output"
}

@test "the fallback provision's exit code is the launcher's" {
    export FAKE_LAUNCH=unknown FAKE_EXIT_PROVISION=7
    run bash "$LAUNCHER"
    [ "$status" -eq 7 ] || fail "status $status: $output"
}

@test "a launch killed by a signal before the bootstrap: the baked agent provisions" {
    export FAKE_LAUNCH=killed
    run bash "$LAUNCHER"
    [ "$status" -eq 0 ] || fail "status $status: $output"
    [[ "$(calls)" == *"provision --provision-config="* ]] || fail "calls: $(calls)"
}

@test "a handover recorded by another launch does not count: the baked agent provisions" {
    export FAKE_LAUNCH=stale FAKE_EXIT_LAUNCH=3
    run bash "$LAUNCHER"
    [ "$status" -eq 0 ] || fail "status $status: $output"
    [[ "$(calls)" == *"provision --provision-config="* ]] || fail "calls: $(calls)"
}

@test "a FIFO at the handover record's path cannot hang the fallback" {
    export FAKE_LAUNCH=unknown
    mkdir -p "$NODE_ROOT/var/log/azure/aks"
    mkfifo "$NODE_ROOT/var/log/azure/aks/launch.json"
    run timeout 10 bash "$LAUNCHER"
    [ "$status" -eq 0 ] || fail "status $status: $output"
    [[ "$(calls)" == *"provision --provision-config="* ]] || fail "calls: $(calls)"
}

@test "the fallback passes only the files that exist, like the reference" {
    export FAKE_LAUNCH=unknown
    rm "$DIR/aks-node-controller-config.json"
    run bash "$LAUNCHER"
    [ "$status" -eq 0 ] || fail "status $status: $output"
    [[ "$(calls)" == *"provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh --root $NODE_ROOT "* ]] || fail "calls: $(calls)"
}

@test "the fallback honours the config gate: neither file, no provision" {
    export FAKE_LAUNCH=unknown
    rm "$DIR/aks-node-controller-config.json" "$DIR/aks-node-controller-nbc-cmd.sh"
    run bash "$LAUNCHER"
    [ "$status" -eq 0 ] || fail "status $status: $output"
    [ "$(calls)" = "launch --root $NODE_ROOT " ] || fail "calls: $(calls)"
    [[ "$output" == *"Gracefully exit aks-node-controller without provision config or nbc cmd"* ]] || fail "$output"
}

@test "a Go agent whose launch panics: the baked agent's provision runs anyway" {
    install_agent "$PANIC_AGENT"
    export FAKE_EXIT_PROVISION=0
    run bash "$LAUNCHER"
    [ "$status" -eq 0 ] || fail "status $status: $output"
    [[ "$output" == *"panic: injected: launch failed before provision"* ]] || fail "no panic seen: $output"
    [ "$(calls)" = "panicagent provision --provision-config=$DIR/aks-node-controller-config.json --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh --root $NODE_ROOT" ] || fail "calls: $(calls)"
}

@test "a missing baked agent: the launcher fails with the shell's not-found code" {
    rm "$DIR/aks-node-controller"
    run -127 bash "$LAUNCHER"
    [ "$status" -eq 127 ] || fail "status $status: $output"
}

@test "a relative NODE_ROOT is refused" {
    export NODE_ROOT=relative/root
    run bash "$LAUNCHER"
    [ "$status" -eq 2 ] || fail "status $status: $output"
    [ ! -s "$FAKE_CALLS" ] || fail "calls: $(calls)"
}

@test "the shim stays a shim: under 50 lines, no parsing of flags or versions" {
    [ "$(wc -l <"$LAUNCHER")" -le 50 ] || fail "$(wc -l <"$LAUNCHER") lines"
    ! grep -q 'enabled_features\|ENABLE_PROVISIONING_HOTFIX\|version' "$LAUNCHER" || fail "the shim inspects flags or versions"
}
