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

anc_hotfix_log() {
    if command -v logger >/dev/null 2>&1; then
        logger -t "${LOGGER_TAG:-aks-node-controller-launcher}" -- "$1" 2>/dev/null || :
    fi
    printf '%s\n' "$1"
}

# _anc_hotfix_launch runs `<bin> launch <flags>` with the hermetic overrides; the caller
# routes its fd 3.
_anc_hotfix_launch() {
    local bin="$1"
    shift
    local args=()
    [[ -z "${NODE_ROOT:-}" || "${NODE_ROOT}" == / ]] || args+=(--root "$NODE_ROOT")
    [[ -z "${IMDS_URL:-}" ]] || args+=("--imds-url=${IMDS_URL}")
    [[ -z "${LPS_ADDR:-}" ]] || args+=("--lps-addr=${LPS_ADDR}")
    "$bin" launch "$@" ${args[@]+"${args[@]}"} --result-fd=3
}

# _anc_hotfix_apply exports the flag records and takes the selected agent from the last
# "selected" record.
_anc_hotfix_apply() {
    local record key
    while IFS= read -r record; do
        case "$record" in
        "flag "*)
            record="${record#flag }"
            key="${record%%=*}"
            if [[ "$key" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]]; then
                export "${key}=${record#*=}" 2>/dev/null || anc_hotfix_log "Cannot export feature flag ${key}; skipped"
            fi
            ;;
        "selected "*) ANC_HOTFIX_SELECTED_BIN="${record#selected }" ;;
        esac
    done <<<"$1"
}

_anc_hotfix_default_bin() {
    local root="${NODE_ROOT:-}"
    printf '%s' "${BIN_PATH:-${root%/}/opt/azure/containers/aks-node-controller}"
}

# anc_hotfix_read_feature_flags <features_path> exports the flags the agent accepts from the
# file; a missing file, or an agent that cannot read it, exports nothing.
anc_hotfix_read_feature_flags() {
    local features_path="$1" records=""
    [[ -f "$features_path" ]] || return 0
    { records=$(_anc_hotfix_launch "$(_anc_hotfix_default_bin)" --features-only --features="$features_path" 3>&1 1>&4 4>&-); } 4>&1 || return 0
    _anc_hotfix_apply "$records"
}

anc_run_hotfix_flow() {
    local bin_path="$1" hotfix_bin="$2" hotfix_json="$3" features_path="$4" records="" rc=0
    ANC_HOTFIX_SELECTED_BIN="$bin_path"
    { records=$(_anc_hotfix_launch "$bin_path" --select-only --bin-path="$bin_path" --hotfix-bin="$hotfix_bin" \
        --hotfix-json="$hotfix_json" --features="$features_path" 3>&1 1>&4 4>&-); } 4>&1 || rc=$?
    if ((rc == 0)); then
        _anc_hotfix_apply "$records"
    else
        anc_hotfix_log "aks-node-controller launch --select-only exited with code ${rc}; continuing (fail-open)"
        anc_hotfix_read_feature_flags "$features_path"
        ANC_HOTFIX_SELECTED_BIN="$bin_path"
        anc_hotfix_log "Using VHD-baked binary: ${bin_path}"
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
