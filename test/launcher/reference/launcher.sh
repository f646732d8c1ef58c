#!/usr/bin/env bash
# The reference launcher in its three generations, reconstructed for tests from their contract
# (shared/design/reference-system.md §5 and reference-since-august.md; not the reference's code),
# chosen by REFERENCE_GENERATION:
#   inline    the August snapshot: the flow in the launcher itself (features exported, check-hotfix
#             if ENABLE_PROVISIONING_HOTFIX is exactly true, download-hotfix if the pointer exists,
#             the hotfix binary if it is executable), then provision;
#   skipping  #9532 as merged: sources the hotfix flow helper, calls anc_run_hotfix_flow and
#             provisions with $ANC_HOTFIX_SELECTED_BIN; without the helper it logs that and
#             provisions with the baked agent;
#   strict    a later version (the default): the same, but without the helper it logs
#             "Missing ANC hotfix flow script: <path>" and exits 1 (its author: both files ship in
#             the same image, so fail loudly).
# Test-only changes: every path is under NODE_ROOT, the agent gets --root (and the inline flow
# --imds-url/--lps-addr) when they are set, and the hostname wait is bounded (the reference runs
# on / and waits with no bound).
set -uo pipefail

root="${NODE_ROOT:-}"
dir="${root%/}/opt/azure/containers"
for _ in $(seq 1 "${HOSTNAME_WAIT_SECONDS:-60}"); do
    [[ "$(cat "${root%/}/proc/sys/kernel/hostname" 2>/dev/null || hostname)" == "$(cat "${root%/}/etc/hostname")" ]] && break
    sleep 1
done

BIN_PATH="${BIN_PATH:-$dir/aks-node-controller}"
HOTFIX_BIN="${BIN_PATH}-hotfix"
HOTFIX_FLOW_SCRIPT="${HOTFIX_FLOW_SCRIPT:-$dir/aks-node-controller-hotfix.sh}"
HOTFIX_JSON="${HOTFIX_JSON:-$dir/aks-node-controller-hotfix.json}"
CONFIG_PATH="${CONFIG_PATH:-$dir/aks-node-controller-config.json}"
NBC_CMD_PATH="${NBC_CMD_PATH:-$dir/aks-node-controller-nbc-cmd.sh}"
FEATURES_PATH="${FEATURES_PATH:-$dir/enabled_features.sh}"

log() { echo "$1"; }
hermetic=()
[[ -n "$root" && "$root" != / ]] && hermetic+=(--root "$root")

if [[ "${REFERENCE_GENERATION:-strict}" == inline ]]; then
    if [[ ! -f "$CONFIG_PATH" && ! -f "$NBC_CMD_PATH" ]]; then
        log "Gracefully exit aks-node-controller without provision config or nbc cmd"
        exit 0
    fi
    if [[ -f "$FEATURES_PATH" ]]; then
        log "Reading feature flags from ${FEATURES_PATH}"
        while IFS='=' read -r key val || [[ -n "$key" ]]; do
            [[ -z "$key" || "$key" == \#* || ! "$key" =~ ^[a-zA-Z_][a-zA-Z0-9_]*$ ]] && continue
            export "${key}=${val}"
        done <"$FEATURES_PATH"
    fi
    net=()
    [[ -n "${IMDS_URL:-}" ]] && net+=("--imds-url=${IMDS_URL}")
    [[ -n "${LPS_ADDR:-}" ]] && net+=("--lps-addr=${LPS_ADDR}")
    if [[ "${ENABLE_PROVISIONING_HOTFIX:-}" == true ]]; then
        log "ENABLE_PROVISIONING_HOTFIX=true; running check-hotfix to refresh hotfix pointer"
        if "$BIN_PATH" check-hotfix ${hermetic[@]+"${hermetic[@]}"} ${net[@]+"${net[@]}"}; then
            log "ANC check-hotfix completed; hotfix pointer refresh attempted"
        else
            log "ANC check-hotfix failed; continuing (fail-open)"
        fi
    fi
    if [[ -f "$HOTFIX_JSON" ]]; then
        log "Found ANC hotfix config at ${HOTFIX_JSON}; running download-hotfix"
        if "$BIN_PATH" download-hotfix ${hermetic[@]+"${hermetic[@]}"}; then
            log "ANC download-hotfix completed; binary selection follows"
        else
            log "ANC download-hotfix failed; binary selection follows"
        fi
    fi
    if [[ -x "$HOTFIX_BIN" ]]; then
        BIN_PATH="$HOTFIX_BIN"
        log "Using hotfix binary: ${HOTFIX_BIN}"
    else
        log "Using VHD-baked binary: ${BIN_PATH}"
    fi
fi

flow=false
if [[ "${REFERENCE_GENERATION:-strict}" == inline ]]; then
    :
elif [[ -f "$HOTFIX_FLOW_SCRIPT" ]]; then
    # shellcheck source=/dev/null
    source "$HOTFIX_FLOW_SCRIPT" && flow=true
elif [[ "${REFERENCE_GENERATION:-strict}" == skipping ]]; then
    log "Missing ANC hotfix flow script: ${HOTFIX_FLOW_SCRIPT}; skipping the hotfix flow"
else
    log "Missing ANC hotfix flow script: ${HOTFIX_FLOW_SCRIPT}"
    exit 1
fi

if [[ ! -f "$CONFIG_PATH" && ! -f "$NBC_CMD_PATH" ]]; then
    log "Gracefully exit aks-node-controller without provision config or nbc cmd"
    exit 0
fi

if $flow; then
    anc_run_hotfix_flow "$BIN_PATH" "$HOTFIX_BIN" "$HOTFIX_JSON" "$FEATURES_PATH"
    BIN_PATH="${ANC_HOTFIX_SELECTED_BIN:-$BIN_PATH}"
elif [[ "${REFERENCE_GENERATION:-strict}" != inline ]]; then
    log "Using VHD-baked binary: ${BIN_PATH}"
fi

cmd=("$BIN_PATH" provision)
[[ -f "$CONFIG_PATH" ]] && cmd+=("--provision-config=$CONFIG_PATH")
[[ -f "$NBC_CMD_PATH" ]] && cmd+=("--nbc-cmd=$NBC_CMD_PATH")
"${cmd[@]}" ${hermetic[@]+"${hermetic[@]}"}
rc=$?
if ((rc == 0)); then
    log "aks-node-controller completed successfully"
else
    log "aks-node-controller exited with code ${rc}"
fi
exit "$rc"
