#!/usr/bin/env bash
# fake-agent.sh stands in for aks-node-controller in the launcher tests. Installed as
# <dir>/aks-node-controller it plays the "baked" role; as <dir>/aks-node-controller-hotfix
# it plays "hotfix". Each call appends one line, "<role> <argv, shell-quoted>", to $FAKE_CALLS.
#
# Knobs (environment; ROLE is BAKED or HOTFIX, SUB is the subcommand upper-cased with - → _):
#   FAKE_<ROLE>_VERSION  what `version` prints (defaults 202604.01.0 / 202604.01.1)
#   FAKE_EXIT_<SUB>      exit code of SUB for either role (default 0)
#   FAKE_SLEEP_<SUB>     seconds SUB sleeps before exiting (default 0)
#   FAKE_POINTER         check-hotfix creates this file (a pointer "written by check-hotfix")
#   FAKE_STAGE_HOTFIX=1  download-hotfix copies this script to <baked>-hotfix
#   FAKE_ENV_DUMP        provision writes `declare -p` of FAKE_ENV_VARS (names) to this file
set -uo pipefail

role=baked
if [[ "$0" == *-hotfix ]]; then role=hotfix; fi

{
    printf '%s' "$role"
    printf ' %q' "$@"
    printf '\n'
} >>"${FAKE_CALLS:?FAKE_CALLS must be set}"

sub="${1:-}"
knob="$(printf '%s' "$sub" | tr 'a-z-' 'A-Z_')"

sleep_var="FAKE_SLEEP_${knob}"
if [[ -n "${!sleep_var:-}" ]]; then sleep "${!sleep_var}"; fi

case "$sub" in
version)
    if [[ "$role" == hotfix ]]; then
        printf '%s\n' "${FAKE_HOTFIX_VERSION-202604.01.1}"
    else
        printf '%s\n' "${FAKE_BAKED_VERSION-202604.01.0}"
    fi
    ;;
check-hotfix)
    if [[ -n "${FAKE_POINTER:-}" ]]; then printf '{"hotfixes":{}}\n' >"$FAKE_POINTER"; fi
    ;;
download-hotfix)
    if [[ "${FAKE_STAGE_HOTFIX:-}" == 1 ]]; then
        cp -- "$0" "$0-hotfix"
        chmod 0755 "$0-hotfix"
    fi
    ;;
provision)
    if [[ -n "${FAKE_ENV_DUMP:-}" ]]; then
        for name in ${FAKE_ENV_VARS:-}; do
            declare -p "$name" 2>/dev/null || echo "unset $name"
        done >"$FAKE_ENV_DUMP"
    fi
    ;;
esac

exit_var="FAKE_EXIT_${knob}"
exit "${!exit_var:-0}"
