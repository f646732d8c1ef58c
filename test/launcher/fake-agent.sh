#!/usr/bin/env bash
# fake-agent.sh stands in for the baked aks-node-controller in the launcher shim's tests. Each call
# appends "<argv, shell-quoted>" to $FAKE_CALLS, then behaves as $FAKE_LAUNCH says for `launch`:
#   ok        exit 0 (the default)
#   started   record the handover for $AKS_NODE_CONTROLLER_LAUNCH_ID, as launch does before it
#             provisions, then exit $FAKE_EXIT_LAUNCH (a failed bootstrap: its code stands)
#   stale     record a handover for another launch ID, then exit $FAKE_EXIT_LAUNCH
#   unknown   an older agent without launch: "unknown command", exit 2
#   killed    die by SIGKILL
#   env       write `launch`'s AKS_NODE_CONTROLLER_LAUNCH_ID to $FAKE_ENV_DUMP, exit 0
# `provision` exits $FAKE_EXIT_PROVISION (default 0).
set -uo pipefail

printf '%q ' "$@" >>"${FAKE_CALLS:?FAKE_CALLS must be set}"
printf '\n' >>"$FAKE_CALLS"

handover="${NODE_ROOT:-/}"
handover="${handover%/}/var/log/azure/aks/launch.json"
case "${1:-}" in
launch)
    case "${FAKE_LAUNCH:-ok}" in
    started | stale)
        id="$AKS_NODE_CONTROLLER_LAUNCH_ID"
        [[ "$FAKE_LAUNCH" == stale ]] && id="1-1"
        mkdir -p "${handover%/*}"
        printf '{"LaunchID":"%s","Agent":"baked","AgentVersion":"202604.01.0","Pid":%d}' "$id" "$$" >"$handover"
        exit "${FAKE_EXIT_LAUNCH:-1}"
        ;;
    unknown)
        echo "aks-node-controller: unknown command: launch" >&2
        exit 2
        ;;
    killed) kill -9 $$ ;;
    env) printf '%s\n' "${AKS_NODE_CONTROLLER_LAUNCH_ID:-unset}" >"$FAKE_ENV_DUMP" ;;
    esac
    ;;
provision) exit "${FAKE_EXIT_PROVISION:-0}" ;;
esac
exit 0
