#!/usr/bin/env bats
# Each @test runs in its own subshell, so per-test exports are meant to be local:
# shellcheck disable=SC2030,SC2031
# Tests for deploy/node/aks-node-controller-launcher.sh. The launcher runs as a real process
# against a temp directory, with a fake `logger` on PATH and fake-agent.sh as the agent binary
# (it records every call in $FAKE_CALLS). In hermetic mode the kernel hostname the launcher
# compares with etc/hostname is NODE_ROOT/proc/sys/kernel/hostname (set_kernel_hostname).

LAUNCHER="${BATS_TEST_DIRNAME}/../../deploy/node/aks-node-controller-launcher.sh"
FAKE_AGENT="${BATS_TEST_DIRNAME}/fake-agent.sh"

setup() {
    T="$BATS_TEST_TMPDIR"
    mkdir -p "$T/bin"
    export FAKE_CALLS="$T/calls"
    : >"$FAKE_CALLS"
    export LOGGER_LOG="$T/logger.log"

    cat >"$T/bin/logger" <<'EOF'
#!/usr/bin/env bash
# The launcher runs one logger and feeds it lines on stdin.
while IFS= read -r line; do printf '%s -- %s\n' "$*" "$line"; done >>"$LOGGER_LOG"
EOF
    chmod 0755 "$T/bin/logger"
    export PATH="$T/bin:$PATH"
    export BATS_TEST_TMPDIR

    unset NODE_ROOT IMDS_URL LPS_ADDR ENABLE_PROVISIONING_HOTFIX HOSTNAME_WAIT_SECONDS
    unset CHECK_HOTFIX_TIMEOUT_SECONDS DOWNLOAD_HOTFIX_TIMEOUT_SECONDS HOTFIX_VERSION_TIMEOUT_SECONDS
    unset FAKE_BAKED_VERSION FAKE_HOTFIX_VERSION
    unset FAKE_POINTER FAKE_STAGE_HOTFIX FAKE_ENV_DUMP FAKE_ENV_VARS
    use_explicit_paths
}

# use_explicit_paths sets every path through the reference's variables (production argv:
# NODE_ROOT unset, so no --root). The hostname check then reads this machine's /etc/hostname
# and kernel hostname, so it is not waited for.
use_explicit_paths() {
    export HOSTNAME_WAIT_SECONDS=0
    DIR="$T/containers"
    mkdir -p "$DIR"
    install_agent "$DIR/aks-node-controller"
    export BIN_PATH="$DIR/aks-node-controller"
    export CONFIG_PATH="$DIR/aks-node-controller-config.json"
    export NBC_CMD_PATH="$DIR/aks-node-controller-nbc-cmd.sh"
    export HOTFIX_JSON="$DIR/aks-node-controller-hotfix.json"
    export FEATURES_PATH="$DIR/enabled_features.sh"
    export EVENTS_DIR="$T/events"
}

# use_node_root switches to hermetic mode: only NODE_ROOT is set, the defaults resolve under it.
use_node_root() {
    unset BIN_PATH CONFIG_PATH NBC_CMD_PATH HOTFIX_JSON FEATURES_PATH EVENTS_DIR HOSTNAME_WAIT_SECONDS
    export NODE_ROOT="$T/root"
    DIR="$NODE_ROOT/opt/azure/containers"
    mkdir -p "$DIR" "$NODE_ROOT/etc" "$NODE_ROOT/proc/sys/kernel"
    echo node-1 >"$NODE_ROOT/etc/hostname"
    set_kernel_hostname node-1
    install_agent "$DIR/aks-node-controller"
}

# set_kernel_hostname NAME sets the hermetic node's kernel hostname (replaced atomically, as
# the kernel's changes).
set_kernel_hostname() {
    echo "$1" >"$NODE_ROOT/proc/sys/kernel/hostname.tmp"
    mv -f "$NODE_ROOT/proc/sys/kernel/hostname.tmp" "$NODE_ROOT/proc/sys/kernel/hostname"
}

# fail MESSAGE fails the current test with MESSAGE.
fail() {
    echo "$*" >&2
    return 1
}

install_agent() {
    cp "$FAKE_AGENT" "$1"
    chmod 0755 "$1"
}

stage_hotfix() {
    install_agent "$DIR/aks-node-controller-hotfix"
}

with_config() { echo '{}' >"$DIR/aks-node-controller-config.json"; }
with_nbc_cmd() { echo 'true' >"$DIR/aks-node-controller-nbc-cmd.sh"; }
with_pointer() { echo '{}' >"$DIR/aks-node-controller-hotfix.json"; }

# features writes its arguments verbatim (printf %b) to the features file, mode 0600.
features() {
    printf '%b' "$1" >"$DIR/enabled_features.sh"
    chmod 0600 "$DIR/enabled_features.sh"
}

run_launcher() {
    run timeout 60 bash "$LAUNCHER"
}

# calls prints the recorded agent calls except `version` probes.
calls() {
    grep -v -x -E '(baked|hotfix) version' "$FAKE_CALLS" || true
}

# expect_calls EXPECTED compares calls with EXPECTED (one call per line).
expect_calls() {
    local got
    got="$(calls)"
    if [[ "$got" != "$1" ]]; then
        printf 'calls:\n%s\nwant:\n%s\nlauncher output:\n%s\n' "$got" "$1" "$output" >&2
        return 1
    fi
}

expect_status() {
    if [[ "$status" -ne "$1" ]]; then
        printf 'status %s, want %s\noutput:\n%s\n' "$status" "$1" "$output" >&2
        return 1
    fi
}

expect_output() {
    if [[ "$output" != *"$1"* ]]; then
        printf 'output lacks %q\noutput:\n%s\n' "$1" "$output" >&2
        return 1
    fi
}

expect_no_output() {
    if [[ "$output" == *"$1"* ]]; then
        printf 'output unexpectedly has %q\noutput:\n%s\n' "$1" "$output" >&2
        return 1
    fi
}

# dump_env NAMES... makes provision record those variables into $T/env.
dump_env() {
    export FAKE_ENV_DUMP="$T/env" FAKE_ENV_VARS="$*"
}

expect_env() {
    if ! grep -q -x -F -- "$1" "$T/env"; then
        printf 'env dump lacks %s\n%s\n' "$1" "$(cat "$T/env")" >&2
        return 1
    fi
}

# ---------------------------------------------------------------------------------------------
# The reference launcher's 13 shellspec cases.

@test "exits successfully without invoking aks-node-controller when config and nbc cmd are absent" {
    export ENABLE_PROVISIONING_HOTFIX=true
    with_pointer
    run_launcher
    expect_status 0
    expect_output "Gracefully exit aks-node-controller without provision config or nbc cmd"
    [[ ! -s "$FAKE_CALLS" ]]
}

@test "passes both provision config and nbc cmd when both files are present" {
    with_config
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --provision-config=$DIR/aks-node-controller-config.json --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "Spawned aks-node-controller (pid "
    expect_output "Using VHD-baked binary: $DIR/aks-node-controller"
}

@test "passes only provision config when nbc cmd is absent" {
    with_config
    run_launcher
    expect_status 0
    expect_calls "baked provision --provision-config=$DIR/aks-node-controller-config.json"
}

@test "passes only nbc cmd when provision config is absent" {
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
}

@test "does not call check-hotfix when ENABLE_PROVISIONING_HOTFIX is unset" {
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
}

@test "treats a non-true ENABLE_PROVISIONING_HOTFIX value as disabled" {
    export ENABLE_PROVISIONING_HOTFIX=1
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "not exactly true; skipping check-hotfix"
}

@test "runs check-hotfix before download-hotfix when ENABLE_PROVISIONING_HOTFIX is true" {
    export ENABLE_PROVISIONING_HOTFIX=true
    with_nbc_cmd
    with_pointer
    run_launcher
    expect_status 0
    expect_calls "baked check-hotfix
baked download-hotfix
baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "ENABLE_PROVISIONING_HOTFIX=true; running check-hotfix to refresh hotfix pointer"
    expect_output "ANC check-hotfix completed; hotfix pointer refresh attempted"
    expect_output "ANC download-hotfix completed; binary selection follows"
}

@test "proceeds to provision when check-hotfix fails (fail-open)" {
    export ENABLE_PROVISIONING_HOTFIX=true FAKE_EXIT_CHECK_HOTFIX=1
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked check-hotfix
baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "ANC check-hotfix failed; continuing (fail-open)"
}

@test "parses enabled_features.sh and runs check-hotfix when the file sets the flag true" {
    features 'ENABLE_PROVISIONING_HOTFIX=true\n'
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked check-hotfix
baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "Reading feature flags from $DIR/enabled_features.sh"
}

@test "parses the final line of enabled_features.sh without a trailing newline" {
    features '# flags\nOTHER=x\nENABLE_PROVISIONING_HOTFIX=true'
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked check-hotfix
baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
}

@test "is a no-op when enabled_features.sh exists but is empty" {
    features ''
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
}

@test "does not run check-hotfix when enabled_features.sh omits the flag" {
    features 'SOME_OTHER_FEATURE=true\n'
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
}

@test "never executes enabled_features.sh contents (parses KEY=VALUE only)" {
    features "exit 7\ntouch $T/pwned\nENABLE_PROVISIONING_HOTFIX=true\nX=\$(touch $T/pwned2)\nY=\`touch $T/pwned3\`\n"
    with_nbc_cmd
    dump_env X Y
    run_launcher
    expect_status 0
    [[ ! -e "$T/pwned" && ! -e "$T/pwned2" && ! -e "$T/pwned3" ]]
    expect_calls "baked check-hotfix
baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_env "declare -x X=\"\\\$(touch $T/pwned2)\""
}

# ---------------------------------------------------------------------------------------------
# enabled_features.sh: the gaps the reference leaves open.

@test "features: a CRLF file is ignored as a whole, so the flag stays off" {
    features 'OTHER=x\r\nENABLE_PROVISIONING_HOTFIX=true\r\n'
    with_nbc_cmd
    dump_env OTHER ENABLE_PROVISIONING_HOTFIX
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "contains a carriage return"
    expect_env "unset OTHER"
    expect_env "unset ENABLE_PROVISIONING_HOTFIX"
}

@test "features: a single CR anywhere voids the file" {
    features 'ENABLE_PROVISIONING_HOTFIX=true\nOTHER=x\r\n'
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
}

@test "features: a NUL byte voids the file" {
    features 'ENABLE_PROVISIONING_HOTFIX=true\nOTHER=a\0b\n'
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "contains a NUL byte"
}

@test "features: lines with leading whitespace or an export prefix are skipped, others apply" {
    features ' LEADING=x\n\tTABBED=x\nexport EXPORTED=x\nENABLE_PROVISIONING_HOTFIX=true\n'
    with_nbc_cmd
    dump_env LEADING TABBED EXPORTED
    run_launcher
    expect_status 0
    expect_calls "baked check-hotfix
baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "Feature flags line 1: invalid key"
    expect_output "Feature flags line 3: invalid key"
    expect_env "unset LEADING"
    expect_env "unset TABBED"
    expect_env "unset EXPORTED"
}

@test "features: a leading-whitespace flag line does not enable the hotfix path" {
    features '  ENABLE_PROVISIONING_HOTFIX=true\n'
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
}

@test "features: a double-quoted value is kept literally, so \"true\" is not true" {
    features 'ENABLE_PROVISIONING_HOTFIX="true"\n'
    with_nbc_cmd
    dump_env ENABLE_PROVISIONING_HOTFIX
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_env 'declare -x ENABLE_PROVISIONING_HOTFIX="\"true\""'
    expect_output "not exactly true; skipping check-hotfix"
}

@test "features: a single-quoted value is kept literally" {
    features "ENABLE_PROVISIONING_HOTFIX='true'\n"
    with_nbc_cmd
    dump_env ENABLE_PROVISIONING_HOTFIX
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_env "declare -x ENABLE_PROVISIONING_HOTFIX=\"'true'\""
}

@test "features: values are verbatim (no comment stripping, trimming or splitting)" {
    features 'ENABLE_PROVISIONING_HOTFIX=true # on\nFOO=a=b=\nSPACEY= x \nEMPTY=\n'
    with_nbc_cmd
    dump_env ENABLE_PROVISIONING_HOTFIX FOO SPACEY EMPTY
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_env 'declare -x ENABLE_PROVISIONING_HOTFIX="true # on"'
    expect_env 'declare -x FOO="a=b="'
    expect_env 'declare -x SPACEY=" x "'
    expect_env 'declare -x EMPTY=""'
}

@test "features: a line without '=' is skipped, not exported empty" {
    features 'BAR\nENABLE_PROVISIONING_HOTFIX=true\n'
    with_nbc_cmd
    dump_env BAR
    run_launcher
    expect_status 0
    expect_calls "baked check-hotfix
baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_env "unset BAR"
    expect_output "Feature flags line 1: not KEY=VALUE; skipped"
}

@test "features: keys overriding launcher and process variables are refused" {
    features "HOTFIX_BIN=/bin/true\nBIN_PATH=/bin/true\nPATH=/nonexistent\nLD_PRELOAD=$T/evil.so\nIFS=x\nENABLE_PROVISIONING_HOTFIX=true\n"
    with_nbc_cmd
    dump_env PATH LD_PRELOAD IFS HOTFIX_BIN
    run_launcher
    expect_status 0
    # Still the real baked binary (recorded calls), with the real PATH.
    expect_calls "baked check-hotfix
baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "Using VHD-baked binary: $DIR/aks-node-controller"
    expect_output "refusing reserved key HOTFIX_BIN (launcher variable)"
    expect_output "refusing reserved key BIN_PATH (launcher variable)"
    expect_output "refusing reserved key PATH (shell or locale variable)"
    expect_output "refusing reserved key LD_PRELOAD (dynamic loader or libc variable)"
    expect_output "refusing reserved key IFS (shell or locale variable)"
    expect_env "declare -x PATH=\"$PATH\""
    expect_env "unset LD_PRELOAD"
    expect_env "unset HOTFIX_BIN"
}

@test "features: hermetic-mode variables and internals cannot be set from the file" {
    use_node_root
    unset SSL_CERT_FILE
    features "NODE_ROOT=/\nIMDS_URL=http://evil\nLPS_ADDR=evil:443\n_SELECTED_BIN=/bin/true\nHTTPS_PROXY=http://evil\nSSL_CERT_FILE=/tmp/ca\nGODEBUG=x509sha1=1\nBASH_ENV=/tmp/x\nENABLE_PROVISIONING_HOTFIX=true\n"
    with_nbc_cmd
    dump_env HTTPS_PROXY SSL_CERT_FILE GODEBUG BASH_ENV
    run_launcher
    expect_status 0
    expect_calls "baked check-hotfix --root $NODE_ROOT
baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh --root $NODE_ROOT"
    expect_output "refusing reserved key _SELECTED_BIN (launcher-internal name)"
    expect_env "unset HTTPS_PROXY"
    expect_env "unset SSL_CERT_FILE"
    expect_env "unset GODEBUG"
    expect_env "unset BASH_ENV"
}

@test "features: reserved-key policy table" {
    run bash -c '
        source "$1"
        for k in BIN_PATH HOTFIX_BIN HOTFIX_JSON CONFIG_PATH NBC_CMD_PATH FEATURES_PATH NODE_ROOT \
            IMDS_URL LPS_ADDR HOSTNAME_WAIT_SECONDS _x _ PATH LD_PRELOAD LD_LIBRARY_PATH IFS ENV \
            BASH_ENV BASHOPTS SHELLOPTS SHELL HOME PS4 CDPATH GLOBIGNORE PROMPT_COMMAND TMPDIR \
            HOSTNAME LANG LC_ALL GCONV_PATH GLIBC_TUNABLES MALLOC_CHECK_ GODEBUG SSL_CERT_DIR \
            http_proxy HTTPS_PROXY GRPC_GO_LOG_SEVERITY_LEVEL PYTHONPATH PERL5OPT NODE_OPTIONS \
            SYSTEMD_LOG_LEVEL APT_CONFIG DOWNLOAD_HOTFIX_TIMEOUT_SECONDS HOTFIX_VERSION_TIMEOUT_SECONDS \
            CHECK_HOTFIX_TIMEOUT_SECONDS REPLY FUNCNAME MAILPATH histchars LANGUAGE TZDIR GORACE \
            GOFIPS140 ftp_proxy NODE_OPTIONS RUBYLIB "${_LAUNCHER_VARS[@]}" "${_SHELL_VARS[@]}" \
            "${_PROCESS_VARS[@]}"; do
            _reserved_key_reason "$k" || echo "allowed: $k"
        done
        for k in ENABLE_PROVISIONING_HOTFIX FOO enable_x PATHS HOME_DIR LDX; do
            _reserved_key_reason "$k" && echo "refused: $k ($_WHY)"
        done
        true
    ' _ "$LAUNCHER"
    expect_status 0
    [[ -z "$output" ]] || { echo "$output" >&2; false; }
}

@test "features: a duplicated key voids the file" {
    features 'ENABLE_PROVISIONING_HOTFIX=false\nENABLE_PROVISIONING_HOTFIX=true\n'
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "key ENABLE_PROVISIONING_HOTFIX set twice (lines 1 and 2)"
}

@test "features: more than 256 lines voids the file" {
    local body="ENABLE_PROVISIONING_HOTFIX=true\n" i
    for ((i = 0; i < 256; i++)); do body+="# filler\n"; done
    features "$body"
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "more than 256 lines"
}

@test "features: a file over 64 KiB is ignored" {
    features "ENABLE_PROVISIONING_HOTFIX=true\nPAD=$(head -c 70000 /dev/zero | tr '\0' x)\n"
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "larger than 65536 bytes"
}

@test "features: a FIFO at the path does not hang the launcher" {
    mkfifo "$DIR/enabled_features.sh"
    with_nbc_cmd
    # A hang would end in run_launcher's timeout (status 124), not 0.
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "not a regular file"
}

@test "features: a symlink is ignored even if its target is valid" {
    printf 'ENABLE_PROVISIONING_HOTFIX=true\n' >"$T/real_features"
    chmod 0600 "$T/real_features"
    ln -s "$T/real_features" "$DIR/enabled_features.sh"
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "it is a symlink"
}

@test "features: a directory at the path is ignored" {
    mkdir "$DIR/enabled_features.sh"
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "not a regular file"
}

@test "features: a group- or world-writable file is ignored" {
    features 'ENABLE_PROVISIONING_HOTFIX=true\n'
    chmod 0666 "$DIR/enabled_features.sh"
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "writable by group or others (mode 666)"
}

@test "features: a file in a group- or world-writable directory is ignored" {
    features 'ENABLE_PROVISIONING_HOTFIX=true\n'
    chmod 0777 "$DIR"
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "Ignoring feature flags file $DIR/enabled_features.sh: its directory $DIR is writable by group or others (mode 777); all features stay off"
}

@test "features: a file that ends without LF, or with blank lines, is read whole" {
    features '\n\n# c\nA=1\n\nENABLE_PROVISIONING_HOTFIX=true'
    with_config
    with_nbc_cmd
    dump_env A
    run_launcher
    expect_status 0
    expect_env "declare -x A=\"1\""
    expect_output "Exported 2 feature flag(s)"
    expect_output "running check-hotfix"
}

@test "features: an invalid UTF-8 byte cannot merge lines and hide a duplicate key" {
    # In a UTF-8 locale bash's read would take the LF after \xc3 as part of a character.
    export LC_ALL=C.UTF-8
    features 'ENABLE_PROVISIONING_HOTFIX=true\nX=\xc3\nENABLE_PROVISIONING_HOTFIX=false\n'
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "key ENABLE_PROVISIONING_HOTFIX set twice (lines 1 and 3)"
}

@test "features: a byte-order mark before the flag leaves it off" {
    features '\xef\xbb\xbfENABLE_PROVISIONING_HOTFIX=true\n'
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "Feature flags line 1: invalid key"
}

@test "features: a symlink to /dev/zero is ignored without being read" {
    ln -s /dev/zero "$DIR/enabled_features.sh"
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "it is a symlink"
}

@test "features: a file owned by another user is ignored" {
    if [[ "$EUID" -ne 0 ]]; then
        skip "needs root to give the file to uid 1000"
    fi
    features 'ENABLE_PROVISIONING_HOTFIX=true\n'
    chown 1000 "$DIR/enabled_features.sh"
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "owned by uid 1000, not 0"
}

@test "features: accepted flags are exported to provision (the reference contract)" {
    features 'FEATURE_A=on\nlower_case_ok=1\n'
    with_nbc_cmd
    dump_env FEATURE_A lower_case_ok
    run_launcher
    expect_status 0
    expect_env 'declare -x FEATURE_A="on"'
    expect_env 'declare -x lower_case_ok="1"'
    expect_output "Exported 2 feature flag(s)"
}

# ---------------------------------------------------------------------------------------------
# check-hotfix and download-hotfix.

@test "download-hotfix failure is tolerated" {
    export FAKE_EXIT_DOWNLOAD_HOTFIX=1
    with_nbc_cmd
    with_pointer
    run_launcher
    expect_status 0
    expect_calls "baked download-hotfix
baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "ANC download-hotfix exited with code 1"
    expect_output "ANC download-hotfix failed; binary selection follows"
}

@test "download-hotfix runs whenever the pointer exists, even with the flag off" {
    with_nbc_cmd
    with_pointer
    run_launcher
    expect_status 0
    expect_calls "baked download-hotfix
baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "Found ANC hotfix config at $DIR/aks-node-controller-hotfix.json; running download-hotfix"
}

@test "a pointer written by check-hotfix triggers download-hotfix" {
    export ENABLE_PROVISIONING_HOTFIX=true FAKE_POINTER="$DIR/aks-node-controller-hotfix.json"
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked check-hotfix
baked download-hotfix
baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
}

@test "a hanging check-hotfix is killed at its bound and provisioning continues" {
    export ENABLE_PROVISIONING_HOTFIX=true CHECK_HOTFIX_TIMEOUT_SECONDS=1 FAKE_SLEEP_CHECK_HOTFIX=30
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_output "ANC check-hotfix timed out after 1s"
    expect_output "ANC check-hotfix failed; continuing (fail-open)"
    expect_calls "baked check-hotfix
baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
}

# ---------------------------------------------------------------------------------------------
# Binary selection.

@test "selection: a newer hotfix for the same base is used" {
    export FAKE_BAKED_VERSION=202604.01.0 FAKE_HOTFIX_VERSION=202604.01.3
    stage_hotfix
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "hotfix provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "Hotfix binary accepted: hotfix 202604.01.3 is newer than baked 202604.01.0"
    expect_output "Using hotfix binary: $DIR/aks-node-controller-hotfix"
}

@test "telemetry: the binary choice is one Launcher event in the agent's format" {
    export FAKE_BAKED_VERSION=202604.01.0 FAKE_HOTFIX_VERSION=202604.01.3
    stage_hotfix
    with_nbc_cmd
    run_launcher
    expect_status 0
    local files
    files=("$EVENTS_DIR"/*.json)
    [[ ${#files[@]} -eq 1 ]] || fail "want one event file, got: ${files[*]}"
    grep -q '"TaskName":"AKS.AKSNodeController.Launcher"' "${files[0]}" || fail "no Launcher task: $(cat "${files[0]}")"
    grep -q '"Message":"launcher choice=hotfix reason=hotfix 202604.01.3 is newer than baked 202604.01.0"' "${files[0]}" ||
        fail "unexpected message: $(cat "${files[0]}")"
    [[ -z "$(find "$EVENTS_DIR" -name '.launcher-event.*')" ]] || fail "temp event file left behind"
}

@test "telemetry: the baked choice says why, and the event lands under NODE_ROOT" {
    use_node_root
    export FAKE_BAKED_VERSION=202604.01.5 FAKE_HOTFIX_VERSION=202604.01.4
    stage_hotfix
    with_nbc_cmd
    run_launcher
    expect_status 0
    grep -q '"Message":"launcher choice=baked reason=not newer (hotfix 202604.01.4, baked 202604.01.5)"' \
        "$NODE_ROOT"/var/log/azure/Microsoft.Azure.Extensions.CustomScript/events/*.json || fail "no baked-choice event"
}

@test "selection: patch numbers compare as integers (10 > 9)" {
    export FAKE_BAKED_VERSION=202604.01.9 FAKE_HOTFIX_VERSION=202604.01.10
    stage_hotfix
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "hotfix provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
}

@test "selection: a hotfix staged by download-hotfix is used by provision" {
    export ENABLE_PROVISIONING_HOTFIX=true FAKE_STAGE_HOTFIX=1 FAKE_HOTFIX_VERSION=202604.01.2
    with_nbc_cmd
    with_pointer
    run_launcher
    expect_status 0
    expect_calls "baked check-hotfix
baked download-hotfix
hotfix provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
}

@test "selection: a hotfix with the same version is not newer" {
    export FAKE_BAKED_VERSION=202604.01.2 FAKE_HOTFIX_VERSION=202604.01.2
    stage_hotfix
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "not newer (hotfix 202604.01.2, baked 202604.01.2)"
    expect_output "Using VHD-baked binary: $DIR/aks-node-controller"
}

@test "selection: an older hotfix is not used" {
    export FAKE_BAKED_VERSION=202604.01.5 FAKE_HOTFIX_VERSION=202604.01.4
    stage_hotfix
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "not newer"
}

@test "selection: a hotfix for a different base is not used" {
    export FAKE_BAKED_VERSION=202604.01.0 FAKE_HOTFIX_VERSION=202605.01.7
    stage_hotfix
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "different base (hotfix 202605.01.7, baked 202604.01.0)"
}

@test "selection: a hotfix reporting a malformed version is not used" {
    export FAKE_HOTFIX_VERSION=dev
    stage_hotfix
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "hotfix reports malformed version dev"
}

@test "selection: an over-long version output is capped and rejected" {
    FAKE_HOTFIX_VERSION="202604.01.3$(head -c 5000 /dev/zero | tr '\0' 9)"
    export FAKE_HOTFIX_VERSION
    stage_hotfix
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "Not using hotfix binary"
}

@test "selection: a baked binary with a malformed version keeps the baked binary" {
    export FAKE_BAKED_VERSION=dev FAKE_HOTFIX_VERSION=202604.01.3
    stage_hotfix
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "baked binary reports malformed version dev"
}

@test "selection: a hotfix whose version command fails is not used" {
    export FAKE_EXIT_VERSION=1
    stage_hotfix
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "hotfix \`version\` exited with code 1"
}

@test "selection: a hotfix whose version command hangs is not used, within the bound" {
    export FAKE_SLEEP_VERSION=30 HOTFIX_VERSION_TIMEOUT_SECONDS=1
    stage_hotfix
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "hotfix \`version\` timed out after 1s"
}

@test "selection: a non-executable hotfix is not used" {
    stage_hotfix
    chmod 0644 "$DIR/aks-node-controller-hotfix"
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "Not using hotfix binary $DIR/aks-node-controller-hotfix: not executable"
}

@test "selection: a symlinked or group-writable hotfix is not used" {
    install_agent "$T/elsewhere-hotfix"
    ln -s "$T/elsewhere-hotfix" "$DIR/aks-node-controller-hotfix"
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "it is a symlink"

    rm "$DIR/aks-node-controller-hotfix"
    stage_hotfix
    chmod 0775 "$DIR/aks-node-controller-hotfix"
    : >"$FAKE_CALLS"
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "writable by group or others (mode 775)"

    chmod 0755 "$DIR/aks-node-controller-hotfix"
    chmod 0770 "$DIR"
    : >"$FAKE_CALLS"
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
    expect_output "its directory $DIR is writable by group or others (mode 770)"
}

@test "selection: version parsing table (same rules as internal/hotfix.ParseVersion)" {
    run bash -c '
        source "$1"
        ok() { _parse_version v "$1" || echo "rejected valid: $1"; }
        bad() { ! _parse_version v "$1" || echo "accepted invalid: [$1]"; }
        ok 202604.01.0; ok 202604.01.1; ok 202612.31.2147483647; ok 200001.01.10
        _parse_version v 202604.01.42 && [[ "$v" == "202604.01 42" ]] || echo "bad split"
        bad ""; bad dev; bad 202604.01; bad 202604.1.2; bad 20264.01.2; bad 202604.01.01
        bad 202604.01.2.5; bad 202604.01.1-1; bad "202604.01.2 "; bad " 202604.01.2"
        bad 202613.01.1; bad 202600.01.1; bad 202604.00.1; bad 202604.32.1
        bad 202604.01.2147483648; bad 202604.01.99999999999; bad 202604.01.+1; bad 202604.01.
        bad "202604.01.2$(printf "\r")"; bad ２０２６０４.01.1; bad 202604.01.1x
        bad "202604.01.1$(printf "\nx")"; bad "$(printf "\n202604.01.1")"
        true
    ' _ "$LAUNCHER"
    expect_status 0
    [[ -z "$output" ]] || { echo "$output" >&2; false; }
}

# ---------------------------------------------------------------------------------------------
# Exit code, hermetic mode, hostname wait, logging.

@test "provision's exit code is the launcher's exit code" {
    export FAKE_EXIT_PROVISION=3
    with_nbc_cmd
    run_launcher
    expect_status 3
    expect_output "aks-node-controller exited with code 3"
}

@test "hermetic: NODE_ROOT adds --root to every subcommand, network overrides only to hotfix steps" {
    use_node_root
    export ENABLE_PROVISIONING_HOTFIX=true IMDS_URL=http://127.0.0.1:8080 LPS_ADDR=127.0.0.1:8443
    export FAKE_STAGE_HOTFIX=1
    with_config
    with_nbc_cmd
    with_pointer
    run_launcher
    expect_status 0
    expect_calls "baked check-hotfix --root $NODE_ROOT --imds-url http://127.0.0.1:8080 --lps-addr 127.0.0.1:8443
baked download-hotfix --root $NODE_ROOT --imds-url http://127.0.0.1:8080 --lps-addr 127.0.0.1:8443
hotfix provision --provision-config=$DIR/aks-node-controller-config.json --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh --root $NODE_ROOT"
}

@test "hermetic: a trailing slash on NODE_ROOT is normalised" {
    use_node_root
    export NODE_ROOT="$NODE_ROOT//"
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh --root $T/root"
}

@test "production: argv carries no --root, --imds-url or --lps-addr" {
    export ENABLE_PROVISIONING_HOTFIX=true NODE_ROOT=/
    with_config
    with_nbc_cmd
    with_pointer
    run_launcher
    expect_status 0
    expect_calls "baked check-hotfix
baked download-hotfix
baked provision --provision-config=$DIR/aks-node-controller-config.json --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
}

@test "hermetic: a relative NODE_ROOT is refused before anything runs" {
    export NODE_ROOT=relative/root
    with_nbc_cmd
    run_launcher
    expect_status 2
    expect_output "NODE_ROOT must be an absolute path"
    [[ ! -s "$FAKE_CALLS" ]]
}

@test "hostname: the wait is bounded and provisioning continues" {
    use_node_root
    set_kernel_hostname never-matches
    export HOSTNAME_WAIT_SECONDS=2
    with_nbc_cmd
    # Unbounded, it would end in run_launcher's timeout (status 124).
    local start=$SECONDS
    run_launcher
    expect_status 0
    ((SECONDS - start >= 2))
    expect_output "Waiting up to 2s for hostname to match $NODE_ROOT/etc/hostname"
    expect_output "Hostname never-matches still differs from $NODE_ROOT/etc/hostname node-1 after 2s; continuing"
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh --root $NODE_ROOT"
}

@test "hostname: the launcher waits until the hostname converges" {
    use_node_root
    set_kernel_hostname localhost
    export HOSTNAME_WAIT_SECONDS=30
    with_nbc_cmd
    # The hostname converges once the launcher has seen it differ (it polls once a second).
    (
        until grep -q "Waiting up to" "$LOGGER_LOG" 2>/dev/null; do sleep 0.1; done
        set_kernel_hostname node-1
    ) 3>&- &
    local start=$SECONDS
    run_launcher
    wait
    expect_status 0
    expect_output "Waiting up to 30s"
    expect_no_output "still differs"
    ((SECONDS - start >= 1))
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh --root $NODE_ROOT"
}

@test "hostname: the wait runs before the config gate" {
    use_node_root
    set_kernel_hostname localhost
    export HOSTNAME_WAIT_SECONDS=1
    run_launcher
    expect_status 0
    [[ "${lines[0]}" == "Waiting up to 1s for hostname to match $NODE_ROOT/etc/hostname" ]]
    expect_output "Gracefully exit aks-node-controller without provision config or nbc cmd"
}

@test "hostname: only the first line of etc/hostname counts, and an unreadable kernel hostname is not waited for" {
    use_node_root
    printf 'node-1\n# written by cloud-init\n' >"$NODE_ROOT/etc/hostname"
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_no_output "Waiting"
    rm "$NODE_ROOT/proc/sys/kernel/hostname"
    run_launcher
    expect_status 0
    expect_output "Cannot read the kernel hostname from $NODE_ROOT/proc/sys/kernel/hostname; not waiting for the hostname"
    expect_no_output "Waiting"
}

# record_spawns puts a recording shim in front of each common external command, so a test
# can assert which ones the launcher itself starts (in order, into $T/spawned; commands started
# by bats or by the agent are not the launcher's). A fork and exec costs about a millisecond on
# the node's critical path; these tests keep such costs from creeping back.
record_spawns() {
    local cmd real grep
    : >"$T/spawned"
    grep="$(command -v grep)"
    for cmd in basename cat chmod cp date dirname env head hostname id ln ls mkdir mktemp mv \
        readlink rm sed sleep stat tail tee timeout touch tr wc; do
        # Shims stay for the whole test; a second call only empties the record.
        [[ ! -e "$T/bin/$cmd" ]] || continue
        real="$(command -v "$cmd")" || continue
        # The shim expands $PPID and "$@" itself, when it runs.
        # shellcheck disable=SC2016
        printf '#!/bin/sh\nif %s -qa aks-node-controller-launcher.sh "/proc/$PPID/cmdline"; then echo %s >>"%s"; fi\nexec %s "$@"\n' \
            "$grep" "$cmd" "$T/spawned" "$real" >"$T/bin/$cmd"
        chmod 0755 "$T/bin/$cmd"
    done
}

expect_spawned() {
    local got
    got="$(cat "$T/spawned")"
    if [[ "$got" != "$1" ]]; then
        printf 'spawned:\n%s\nwant:\n%s\n' "$got" "$1" >&2
        return 1
    fi
}

@test "cost: with the flag absent, the launcher starts no command but mv (the event) and the agent" {
    use_node_root
    mkdir -p "$NODE_ROOT/var/log/azure/Microsoft.Azure.Extensions.CustomScript/events"
    with_config
    with_nbc_cmd
    record_spawns
    run_launcher
    expect_status 0
    expect_spawned "mv"
    expect_calls "baked provision --provision-config=$DIR/aks-node-controller-config.json --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh --root $NODE_ROOT"
}

@test "cost: a features file adds one stat; the flag on adds timeout around check-hotfix" {
    use_node_root
    mkdir -p "$NODE_ROOT/var/log/azure/Microsoft.Azure.Extensions.CustomScript/events"
    with_nbc_cmd
    features 'ENABLE_PROVISIONING_HOTFIX=false\nA=1\nB=2\nPATH=/x\n'
    record_spawns
    run_launcher
    expect_status 0
    expect_spawned "stat
mv"

    features 'ENABLE_PROVISIONING_HOTFIX=true\nA=1\n'
    record_spawns
    run_launcher
    expect_status 0
    expect_spawned "stat
timeout
mv"
}

@test "logging: every line also goes to logger with the launcher tag" {
    with_nbc_cmd
    run_launcher
    expect_status 0
    grep -q -x -F -- "-t aks-node-controller-launcher -- Using VHD-baked binary: $DIR/aks-node-controller" "$LOGGER_LOG"
    [[ "$(wc -l <"$LOGGER_LOG")" -eq "${#lines[@]}" ]]
}

@test "logging: a logger that exits at once does not stop the launcher (no SIGPIPE)" {
    printf '#!/usr/bin/env bash\nexit 0\n' >"$T/bin/logger"
    with_nbc_cmd
    features 'A=1\nB=2\n'
    run_launcher
    expect_status 0
    expect_output "aks-node-controller completed successfully"
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
}

@test "logging: a logger stuck on syslog delays the exit by at most 2 s" {
    # Never reads its input, never exits on its own.
    printf '#!/usr/bin/env bash\nexec sleep 60\n' >"$T/bin/logger"
    with_nbc_cmd
    local start=$SECONDS
    run_launcher
    expect_status 0
    expect_output "aks-node-controller completed successfully"
    # Unbounded, it would end in run_launcher's timeout (status 124) after 60 s.
    ((SECONDS - start < 30))
}

@test "environment: HOTFIX_BIN is always derived from BIN_PATH, never taken from the environment" {
    export HOTFIX_BIN="$T/elsewhere-hotfix" FAKE_HOTFIX_VERSION=202604.01.9
    install_agent "$T/elsewhere-hotfix"
    with_nbc_cmd
    run_launcher
    expect_status 0
    expect_calls "baked provision --nbc-cmd=$DIR/aks-node-controller-nbc-cmd.sh"
}

@test "unit: aks-node-controller.service keeps the reference directives" {
    local unit="${BATS_TEST_DIRNAME}/../../deploy/node/aks-node-controller.service" want
    for want in "Type=oneshot" \
        "ExecStart=/bin/bash /opt/azure/containers/aks-node-controller-launcher.sh" \
        "DefaultDependencies=no" "After=network-online.target" "Wants=network-online.target" \
        "RemainAfterExit=yes" "WantedBy=basic.target"; do
        grep -q -x -F -- "$want" "$unit" || { echo "unit lacks $want" >&2; false; }
    done
}
