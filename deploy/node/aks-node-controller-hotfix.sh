#!/usr/bin/env bash
# aks-node-controller-hotfix.sh: the hotfix flow that later reference launchers source from
# /opt/azure/containers (AgentBaker #9532; HOTFIX_FLOW_SCRIPT overrides the path). They call
#   anc_run_hotfix_flow <bin> <hotfix_bin> <hotfix_json> <features_path>
# and provision with "$ANC_HOTFIX_SELECTED_BIN"; one generation exits 1 without this file, so
# the agent's packaging always installs it beside aks-node-controller-launcher.sh.
#
# A thin shim over `<bin> launch --select-only`, which does the whole flow in Go, as launch
# does it for our own launcher: the feature flags read as data, check-hotfix when
# ENABLE_PROVISIONING_HOTFIX is exactly "true", download-hotfix when the pointer exists, the
# choice of agent (hotfix.Select: never "executable, so use it"), and <hotfix_bin>
# apply-embedded-hotfix once the hotfix is chosen. It prints the reference's log lines on
# stdout and its answer on fd 3, one record a line: "flag KEY=VALUE" for each accepted flag
# (exported here, as the reference's helper exports the file's pairs, so the bootstrap that
# the launcher's provision starts sees them; reserved keys never are) and "selected PATH".
# Fail-open in every branch: a missing, old or crashing agent leaves the selection at <bin>.
# Run as a script it prints the selected binary last. Hermetic runs: NODE_ROOT IMDS_URL LPS_ADDR.

# Every variable of the helper's own starts with _anc_: that prefix is reserved, so no flag can
# be swallowed by, or overwrite, one of them.
anc_hotfix_log() {
    if command -v logger >/dev/null 2>&1; then
        logger -t "${LOGGER_TAG:-aks-node-controller-launcher}" -- "$1" 2>/dev/null || :
    fi
    printf '%s\n' "$1" 2>/dev/null || :
}

# _anc_hotfix_launch runs `<bin> launch <flags>` with the hermetic overrides; the caller
# routes its fd 3.
_anc_hotfix_launch() {
    local _anc_bin="$1"
    shift
    local _anc_args=()
    [[ -z "${NODE_ROOT:-}" || "${NODE_ROOT}" == / ]] || _anc_args+=(--root "$NODE_ROOT")
    [[ -z "${IMDS_URL:-}" ]] || _anc_args+=("--imds-url=${IMDS_URL}")
    [[ -z "${LPS_ADDR:-}" ]] || _anc_args+=("--lps-addr=${LPS_ADDR}")
    "$_anc_bin" launch "$@" ${_anc_args[@]+"${_anc_args[@]}"} --result-fd=3
}

# _anc_hotfix_export exports the flag records. A name the sourcing shell already uses for
# something export would not simply replace (an array, an integer, a nameref, a read-only
# variable) is skipped: exporting into it could rewrite the launcher's own state.
_anc_hotfix_export() {
    local _anc_record _anc_key _anc_decl
    while IFS= read -r _anc_record; do
        [[ "$_anc_record" == "flag "* ]] || continue
        _anc_record="${_anc_record#flag }"
        _anc_key="${_anc_record%%=*}"
        [[ "$_anc_key" =~ ^[A-Za-z][A-Za-z0-9_]*$ ]] || continue
        if _anc_decl="$(declare -p "$_anc_key" 2>/dev/null)" && [[ "$_anc_decl" != "declare -- "* && "$_anc_decl" != "declare -x "* ]]; then
            anc_hotfix_log "Feature flag ${_anc_key} names a shell variable with attributes (${_anc_decl%% "$_anc_key"*}); skipped"
            continue
        fi
        export "${_anc_key}=${_anc_record#*=}" 2>/dev/null || anc_hotfix_log "Cannot export feature flag ${_anc_key}; skipped"
    done <<<"$1"
}

# _anc_hotfix_read_flags <bin> <features_path> exports the flags <bin> accepts from the file; a
# missing file, or an agent that cannot read it, exports nothing: every feature stays off.
_anc_hotfix_read_flags() {
    local _anc_records=""
    [[ -f "$2" ]] || return 0
    { _anc_records=$(_anc_hotfix_launch "$1" --features-only --features="$2" 3>&1 1>&4 4>&-); } 4>&1 || return 0
    _anc_hotfix_export "$_anc_records"
}

# anc_hotfix_read_feature_flags <features_path>: the reference's entry point, with the baked
# agent at BIN_PATH (or its default).
anc_hotfix_read_feature_flags() {
    local _anc_root="${NODE_ROOT:-}"
    _anc_hotfix_read_flags "${BIN_PATH:-${_anc_root%/}/opt/azure/containers/aks-node-controller}" "$1"
}

anc_run_hotfix_flow() {
    local _anc_bin="$1" _anc_hotfix="$2" _anc_records="" _anc_rc=0 _anc_selected=""
    { _anc_records=$(_anc_hotfix_launch "$_anc_bin" --select-only --bin-path="$_anc_bin" --hotfix-bin="$_anc_hotfix" \
        --hotfix-json="$3" --features="$4" 3>&1 1>&4 4>&-); } 4>&1 || _anc_rc=$?
    if ((_anc_rc == 0)); then
        _anc_hotfix_export "$_anc_records"
        # Only the agent's last word counts, and only if it names one of the two binaries.
        _anc_selected="$(printf '%s\n' "$_anc_records" | sed -n 's/^selected //p' | tail -n 1)"
    else
        anc_hotfix_log "aks-node-controller launch --select-only exited with code ${_anc_rc}; continuing (fail-open)"
        _anc_hotfix_read_flags "$_anc_bin" "$4"
    fi
    if [[ -n "$_anc_selected" && ("$_anc_selected" == "$_anc_bin" || "$_anc_selected" == "$_anc_hotfix") ]]; then
        ANC_HOTFIX_SELECTED_BIN="$_anc_selected"
    else
        ((_anc_rc != 0)) || anc_hotfix_log "The agent named no binary it may choose (${_anc_selected:-none}); continuing (fail-open)"
        ANC_HOTFIX_SELECTED_BIN="$_anc_bin"
        anc_hotfix_log "Using VHD-baked binary: ${_anc_bin}"
    fi
    export ANC_HOTFIX_SELECTED_BIN
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    _dir="${NODE_ROOT:-}"
    _dir="${_dir%/}/opt/azure/containers"
    BIN_PATH="${BIN_PATH:-${_dir}/aks-node-controller}"
    anc_run_hotfix_flow "$BIN_PATH" "${HOTFIX_BIN:-${BIN_PATH}-hotfix}" \
        "${HOTFIX_JSON:-${_dir}/aks-node-controller-hotfix.json}" "${FEATURES_PATH:-${_dir}/enabled_features.sh}"
    printf '%s\n' "$ANC_HOTFIX_SELECTED_BIN"
fi
