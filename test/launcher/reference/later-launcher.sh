#!/usr/bin/env bash
# The later reference launchers, reconstructed for tests from their contract (AgentBaker #9532,
# as shared/design/reference-since-august.md records it; not the reference's code). Both source
# the hotfix flow helper, call anc_run_hotfix_flow and provision with $ANC_HOTFIX_SELECTED_BIN.
# Without the helper, REFERENCE_GENERATION says which one this is:
#   skipping  logs it and provisions with the baked agent (#9532 as merged);
#   strict    logs "Missing ANC hotfix flow script: <path>" and exits 1 (a later version; its
#             author: both files ship in the same image, so fail loudly). The default.
# Test-only changes: every path is under NODE_ROOT, provision gets --root when it is set and the
# hostname wait is bounded (the reference runs on / and waits with no bound).
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

flow=false
if [[ -f "$HOTFIX_FLOW_SCRIPT" ]]; then
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
else
    log "Using VHD-baked binary: ${BIN_PATH}"
fi

cmd=("$BIN_PATH" provision)
[[ -f "$CONFIG_PATH" ]] && cmd+=("--provision-config=$CONFIG_PATH")
[[ -f "$NBC_CMD_PATH" ]] && cmd+=("--nbc-cmd=$NBC_CMD_PATH")
[[ -n "$root" && "$root" != / ]] && cmd+=(--root "$root")
"${cmd[@]}"
rc=$?
if ((rc == 0)); then
    log "aks-node-controller completed successfully"
else
    log "aks-node-controller exited with code ${rc}"
fi
exit "$rc"
