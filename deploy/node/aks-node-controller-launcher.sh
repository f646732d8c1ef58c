#!/usr/bin/env bash
# aks-node-controller-launcher.sh: the boothook (nohup) or aks-node-controller.service starts it.
# It runs `<baked> launch`, which provisions the node (see `aks-node-controller launch -h`), and
# exits with its code. If launch is missing (an older agent) or ends before it provisions,
# it runs `<baked> provision` itself: fail-open even against a bug in launch. Environment, as
# the reference's launcher: BIN_PATH HOTFIX_JSON CONFIG_PATH NBC_CMD_PATH FEATURES_PATH; for
# hermetic runs NODE_ROOT IMDS_URL LPS_ADDR HOSTNAME_WAIT_SECONDS.
set -uo pipefail

root="${NODE_ROOT:-/}"
[[ "$root" == /* ]] || { printf 'NODE_ROOT must be an absolute path, got %q\n' "$root"; exit 2; }
dir="${root%/}/opt/azure/containers"
bin="${BIN_PATH:-$dir/aks-node-controller}"
config="${CONFIG_PATH:-$dir/aks-node-controller-config.json}"
nbc="${NBC_CMD_PATH:-$dir/aks-node-controller-nbc-cmd.sh}"
# launch records this ID before it provisions; from then on provisioning (and any fallback) is its.
# The ID's name, the record's path and its LaunchID field are internal/node/handover's; its tests pin them.
id="${EPOCHREALTIME:-${RANDOM}${RANDOM}}" # bash < 5 has no EPOCHREALTIME
export AKS_NODE_CONTROLLER_LAUNCH_ID="${id/[.,]/}-$$"
handover="${root%/}/var/log/azure/aks/launch.json"

args=()
[[ "$root" == / ]] || args+=(--root "$root")
for pair in bin-path=BIN_PATH hotfix-json=HOTFIX_JSON provision-config=CONFIG_PATH \
    nbc-cmd=NBC_CMD_PATH features=FEATURES_PATH imds-url=IMDS_URL lps-addr=LPS_ADDR; do
    var="${pair#*=}"
    [[ -z "${!var:-}" ]] || args+=("--${pair%%=*}=${!var}")
done
[[ "${HOSTNAME_WAIT_SECONDS:-}" =~ ^[0-9]{1,4}$ ]] && args+=("--hostname-wait=${HOSTNAME_WAIT_SECONDS}s")

"$bin" launch "${args[@]}"
rc=$?
((rc == 0)) && exit 0
record=""
[[ -f "$handover" && ! -L "$handover" ]] && IFS= read -r -n 4096 record <"$handover"
[[ "$record" == *"\"LaunchID\":\"${AKS_NODE_CONTROLLER_LAUNCH_ID}\""* ]] && exit "$rc"

echo "aks-node-controller launch exited with code ${rc} before it provisioned; falling back"
prov=(provision)
[[ -f "$config" ]] && prov+=("--provision-config=${config}")
[[ -f "$nbc" ]] && prov+=("--nbc-cmd=${nbc}")
((${#prov[@]} > 1)) || { echo "Gracefully exit aks-node-controller without provision config or nbc cmd"; exit 0; }
[[ "$root" == / ]] || prov+=(--root "$root")
echo "Using VHD-baked binary: ${bin}"
"$bin" "${prov[@]}"
