#!/usr/bin/env bash
# aks-node-controller-launcher.sh: the on-node launcher. The boothook starts it with
# `nohup /bin/bash <this file>`, or systemd starts it through aks-node-controller.service.
#
# Order (same as the reference launcher; every step except provision is fail-open):
#   1. wait (bounded) until the kernel hostname (/proc/sys/kernel/hostname, what `hostname`
#      prints) matches the first line of /etc/hostname;
#   2. exit 0 if neither the provision config nor the nbc cmd file exists;
#   3. read enabled_features.sh as data and export the accepted KEY=VALUE pairs;
#   4. if ENABLE_PROVISIONING_HOTFIX is exactly `true`: `<baked> check-hotfix`;
#   5. if the hotfix pointer file exists: `<baked> download-hotfix`;
#   6. use the staged hotfix binary only if it passes the checks below, else the baked one;
#   7. run `<binary> provision [--provision-config=F] [--nbc-cmd=F]`, exit with its code.
#
# Environment (read from the environment only, never from the features file):
#   BIN_PATH, HOTFIX_JSON, CONFIG_PATH, NBC_CMD_PATH, FEATURES_PATH  path overrides, as the reference.
#   EVENTS_DIR       where the launcher's telemetry event (its binary choice) goes; default the
#                    guest agent's events directory under NODE_ROOT.
#     HOTFIX_BIN is always "${BIN_PATH}-hotfix".
#   NODE_ROOT        absolute directory the default paths (and /etc/hostname and
#                    /proc/sys/kernel/hostname) resolve under;
#                    default "/". When it is not "/", every node subcommand also gets
#                    `--root NODE_ROOT`, so production argv is exactly the reference's.
#   IMDS_URL, LPS_ADDR  when non-empty, passed as --imds-url / --lps-addr to check-hotfix and
#                    download-hotfix only.
#   HOSTNAME_WAIT_SECONDS (default 60, 0..600), CHECK_HOTFIX_TIMEOUT_SECONDS (120, 1..900),
#   DOWNLOAD_HOTFIX_TIMEOUT_SECONDS (300, 1..900), HOTFIX_VERSION_TIMEOUT_SECONDS (10, 1..60).
#                    An out-of-range or non-numeric value means the default.
#
# enabled_features.sh is DATA. It is never sourced, evaluated or executed.
#   Whole file ignored (every feature off, one log line with the reason) when the path is a
#   symlink or not a regular file (a FIFO is never opened, so it cannot hang us), when it or its
#   directory is not owned by the launcher's user (root on a node) or is group/world-writable
#   (so nobody else can swap a FIFO in after the check), is larger than 64 KiB,
#   has more than 256 lines, contains a CR (CRLF line endings) or a NUL byte, or sets a key
#   twice. Producers render a map as LF lines and drop values containing CR or LF, so any of
#   these means the file was not written by a producer; no line of it is trusted, and a CR is
#   never stripped, so "true\r" can never turn the hotfix path on.
#   Per line: blank lines and lines starting with `#` are skipped. Otherwise the line must be
#   KEY=VALUE with KEY an ASCII identifier [A-Za-z_][A-Za-z0-9_]* starting at column 1; other
#   lines (leading whitespace, `export KEY=...`, no `=`) are skipped with a log line.
#   VALUE is everything after the first `=`, kept byte for byte: no quote removal (so `"true"`
#   is not `true`), no inline-comment stripping, no whitespace trimming, no expansion. The
#   gate compares with exactly `true`.
#   Reserved keys are refused with a log line (see _reserved_key_reason): the launcher's own
#   variables, anything starting with `_` (the launcher's internals), and names that change
#   how bash, the dynamic loader, libc, the Go runtime, TLS trust, proxies or the interpreters
#   used by provisioning behave. It is a denylist, because producers accept any identifier and
#   CSE scripts consume the exported flags.
#
# The hotfix binary is used only if it is a regular, executable, non-symlink file that, like its
# directory, is owned by the launcher's user and not group/world-writable, and
# `<hotfix> version` (bounded by timeout, output capped) reports YYYYMM.DD.PATCH with the same
# YYYYMM.DD as `<baked> version` and a strictly higher PATCH. Versions parse as
# internal/hotfix.ParseVersion does (month 01-12, day 01-31, PATCH without leading zeros and at
# most 2147483647); anything else keeps the baked one.
#
# `set -e` is deliberately off (as in the reference): every hotfix step must be able to fail
# without stopping provisioning, so failures are checked explicitly where they matter.
# Requires bash >= 4.4 and coreutils `timeout` and `stat`; without them the hotfix steps fail
# open and the features file is ignored.
set -uo pipefail

readonly _LOG_TAG="aks-node-controller-launcher"
readonly _FEATURES_MAX_BYTES=65536
readonly _FEATURES_MAX_LINES=256
readonly _VERSION_MAX_BYTES=64
readonly _MAX_PATCH=2147483647
# Enumerated rather than ranges, so matching never depends on the locale.
readonly _DIGITS="0123456789"
readonly _IDENT_CHARS="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_${_DIGITS}"

# _seconds VAR VALUE DEFAULT MIN MAX sets VAR to VALUE if it is a decimal integer in [MIN, MAX],
# else to DEFAULT.
_seconds() {
    local _v="$2"
    if [[ -n "$_v" && "$_v" != *[!$_DIGITS]* && ${#_v} -le 4 ]] &&
        ((10#$_v >= $4 && 10#$_v <= $5)); then
        printf -v "$1" '%d' "$((10#$_v))"
    else
        printf -v "$1" '%s' "$3"
    fi
}

# The launcher runs on every node's critical path, so everything before provision uses bash
# builtins (helpers set variables rather than print into a subshell), and an external command
# only where bash has no equivalent: stat(1) for owner and mode, mv(1) for the event's rename,
# timeout(1) around the agent.
readonly _NODE_ROOT_RAW="${NODE_ROOT:-/}"
_ROOT="$_NODE_ROOT_RAW"
while [[ "$_ROOT" == */ ]]; do _ROOT="${_ROOT%/}"; done # "/" -> "", "/x//" -> "/x"
readonly _ROOT
readonly _CONTAINERS="${_ROOT}/opt/azure/containers"
readonly _HOSTNAME_FILE="${_ROOT}/etc/hostname"
# The kernel's hostname, what hostname(1) prints; under a NODE_ROOT, the node root's copy.
readonly _KERNEL_HOSTNAME_FILE="${_ROOT}/proc/sys/kernel/hostname"

BIN_PATH="${BIN_PATH:-${_CONTAINERS}/aks-node-controller}"
HOTFIX_BIN="${BIN_PATH}-hotfix"
HOTFIX_JSON="${HOTFIX_JSON:-${_CONTAINERS}/aks-node-controller-hotfix.json}"
CONFIG_PATH="${CONFIG_PATH:-${_CONTAINERS}/aks-node-controller-config.json}"
NBC_CMD_PATH="${NBC_CMD_PATH:-${_CONTAINERS}/aks-node-controller-nbc-cmd.sh}"
FEATURES_PATH="${FEATURES_PATH:-${_CONTAINERS}/enabled_features.sh}"
EVENTS_DIR="${EVENTS_DIR:-${_ROOT}/var/log/azure/Microsoft.Azure.Extensions.CustomScript/events}"
readonly BIN_PATH HOTFIX_BIN HOTFIX_JSON CONFIG_PATH NBC_CMD_PATH FEATURES_PATH EVENTS_DIR

_seconds _HOSTNAME_WAIT "${HOSTNAME_WAIT_SECONDS:-}" 60 0 600
_seconds _CHECK_TIMEOUT "${CHECK_HOTFIX_TIMEOUT_SECONDS:-}" 120 1 900
_seconds _DOWNLOAD_TIMEOUT "${DOWNLOAD_HOTFIX_TIMEOUT_SECONDS:-}" 300 1 900
_seconds _VERSION_TIMEOUT "${HOTFIX_VERSION_TIMEOUT_SECONDS:-}" 10 1 60
readonly _HOSTNAME_WAIT _CHECK_TIMEOUT _DOWNLOAD_TIMEOUT _VERSION_TIMEOUT

# Hermetic-mode flags. Empty in production, so the argv matches the reference exactly.
_ROOT_ARGS=()
if [[ -n "$_ROOT" ]]; then _ROOT_ARGS=(--root "$_ROOT"); fi
_NET_ARGS=()
if [[ -n "${IMDS_URL:-}" ]]; then _NET_ARGS+=(--imds-url "$IMDS_URL"); fi
if [[ -n "${LPS_ADDR:-}" ]]; then _NET_ARGS+=(--lps-addr "$LPS_ADDR"); fi
readonly _ROOT_ARGS _NET_ARGS

# Names the features file may never set (exact match), besides the prefixes in
# _reserved_key_reason.
readonly _LAUNCHER_VARS=(BIN_PATH HOTFIX_BIN HOTFIX_JSON CONFIG_PATH NBC_CMD_PATH FEATURES_PATH EVENTS_DIR
    NODE_ROOT IMDS_URL LPS_ADDR HOSTNAME_WAIT_SECONDS CHECK_HOTFIX_TIMEOUT_SECONDS
    DOWNLOAD_HOTFIX_TIMEOUT_SECONDS HOTFIX_VERSION_TIMEOUT_SECONDS)
readonly _SHELL_VARS=(PATH IFS ENV SHELL HOME CDPATH GLOBIGNORE PROMPT_COMMAND SHELLOPTS BASHOPTS
    PS1 PS2 PS3 PS4 POSIXLY_CORRECT TMPDIR HOSTNAME SHLVL PWD OLDPWD OPTIND OPTARG OPTERR REPLY
    RANDOM SRANDOM SECONDS LINENO EPOCHSECONDS EPOCHREALTIME UID EUID PPID GROUPS FUNCNAME
    PIPESTATUS DIRSTACK HOSTTYPE MACHTYPE OSTYPE TMOUT TIMEFORMAT INPUTRC MAIL MAILCHECK MAILPATH
    FCEDIT FIGNORE EXECIGNORE GLOBSORT COLUMNS LINES COPROC USER LOGNAME TERM auto_resume
    histchars LANG LANGUAGE)
readonly _PROCESS_VARS=(GCONV_PATH GETCONF_DIR GLIBC_TUNABLES HOSTALIASES LOCALDOMAIN LOCPATH
    NLSPATH NIS_PATH RES_OPTIONS TZDIR GODEBUG GOGC GOMAXPROCS GOMEMLIMIT GOTRACEBACK GORACE
    GOFIPS140 SSL_CERT_FILE SSL_CERT_DIR HTTP_PROXY HTTPS_PROXY NO_PROXY ALL_PROXY FTP_PROXY
    http_proxy https_proxy no_proxy all_proxy ftp_proxy NOTIFY_SOCKET APT_CONFIG PERLLIB
    RUBYOPT RUBYLIB NODE_OPTIONS)

_FEATURE_KEYS=()
_FEATURE_VALUES=()
_SELECTED_BIN=""
# _WHY carries a reason out of the checks that return one (no subshell needed to read it).
_WHY=""

# Logging goes to stdout and to one logger(1) process for the whole run, fed through the pipe
# of a co-process: a logger per line cost about a millisecond each on every node's critical
# path. The co-process drains its input even if logger exits early, so a log write can never
# raise SIGPIPE in the launcher, and the few kilobytes a run logs never fill the pipe, so a
# stalled syslog cannot block it. Bash marks the co-process's descriptors close-on-exec, so
# the agent's steps and provision do not inherit them.
_LOG_PID=""

_start_logger() {
    command -v logger >/dev/null 2>&1 || return 0
    coproc _LOGGER {
        logger -t "$_LOG_TAG" >/dev/null 2>&1
        while IFS= read -r _; do :; done
    }
    _LOG_PID="${_LOGGER_PID:-}"
}

# _stop_logger closes the co-process's input and waits until it has passed everything on and
# exited (its output pipe reaches EOF); after 2 s of a logger stuck on a stalled syslog it
# gives up, so the launcher always exits.
_stop_logger() {
    local _in="${_LOGGER[1]:-}" _out="${_LOGGER[0]:-}" _line
    [[ -n "$_LOG_PID" ]] || return 0
    if [[ -n "$_in" ]]; then exec {_in}>&-; fi
    if [[ -n "$_out" ]]; then
        read -r -t 2 -u "$_out" _line
        if (($? > 128)); then kill "$_LOG_PID" 2>/dev/null; fi
    fi
    _LOG_PID=""
}

log() {
    printf '%s\n' "$*"
    # Empty once bash has reaped a co-process that died.
    if [[ -n "${_LOGGER[1]:-}" ]]; then
        printf '%s\n' "$*" 1>&"${_LOGGER[1]}" 2>/dev/null
    fi
}

# _quote VAR S sets VAR to S in shell-quoted form, so control bytes in logged data stay visible.
_quote() {
    printf -v "$1" '%q' "$2"
}

# _RESERVED maps each exactly-named reserved key to its reason. It is filled on first use, only
# when a features file exists: looking a key up costs a hash probe, where a loop over the
# ~110 names cost about 0.3 ms per key of the file.
declare -A _RESERVED=()

_fill_reserved() {
    local _n
    for _n in "${_LAUNCHER_VARS[@]}"; do _RESERVED[$_n]="launcher variable"; done
    for _n in "${_SHELL_VARS[@]}"; do _RESERVED[$_n]="shell or locale variable"; done
    for _n in "${_PROCESS_VARS[@]}"; do _RESERVED[$_n]="runtime, trust, proxy or interpreter variable"; done
}

# _reserved_key_reason KEY sets _WHY to why KEY may not come from the features file and
# returns 0, or returns 1 if KEY is allowed.
_reserved_key_reason() {
    local _k="$1"
    if ((${#_RESERVED[@]} == 0)); then _fill_reserved; fi
    if [[ -n "${_RESERVED[$_k]:-}" ]]; then
        _WHY="${_RESERVED[$_k]}"
        return 0
    fi
    # One match for the common case, a key with none of the reserved prefixes below (the
    # right side of == is an extended glob in [[ ]] whatever the extglob option).
    if [[ "$_k" != @(_|BASH|LC_|COMP_|HIST|READLINE_|LD_|MALLOC_|RESOLV_|GRPC_|SYSTEMD_|LISTEN_|PYTHON|PERL5)* ]]; then
        return 1
    fi
    if [[ "$_k" == _* ]]; then
        _WHY="launcher-internal name"
    elif [[ "$_k" == BASH* || "$_k" == LC_* || "$_k" == COMP_* || "$_k" == HIST* || "$_k" == READLINE_* ]]; then
        _WHY="shell or locale variable"
    elif [[ "$_k" == LD_* || "$_k" == MALLOC_* || "$_k" == RESOLV_* ]]; then
        _WHY="dynamic loader or libc variable"
    elif [[ "$_k" == GRPC_* || "$_k" == SYSTEMD_* || "$_k" == LISTEN_* || "$_k" == PYTHON* || "$_k" == PERL5* ]]; then
        _WHY="runtime, trust, proxy or interpreter variable"
    else
        return 1
    fi
}

# _owner_mode_reason WHAT UID MODE sets _WHY and returns 0 if a file owned by UID with octal
# MODE must not be trusted (not owned by the launcher's user, or writable by group or others),
# else returns 1. WHAT prefixes the reason ("" for the file itself).
_owner_mode_reason() {
    if [[ "$2" != "$EUID" ]]; then
        _WHY="${1}owned by uid ${2}, not ${EUID}"
    elif ((8#$3 & 8#022)); then
        _WHY="${1}writable by group or others (mode ${3})"
    else
        return 1
    fi
}

# _insecure_file_reason FILE sets _WHY and returns 0 if FILE or its directory must not be
# trusted, else returns 1. The directory matters because whoever can write it can replace the
# file after these checks. One stat(1) for both (bash cannot read owner or mode); stat does not
# follow symlinks.
_insecure_file_reason() {
    local _file="$1" _dir _st _fuid _fmode _duid _dmode
    _dir="${_file%/*}"
    if [[ "$_file" != */* ]]; then _dir=.; fi
    if [[ -z "$_dir" ]]; then _dir=/; fi
    if ! _st="$(stat --printf '%u %a ' -- "$_file" "$_dir" 2>/dev/null)"; then
        _WHY="cannot stat it or its directory"
        return 0
    fi
    read -r _fuid _fmode _duid _dmode <<<"$_st"
    _owner_mode_reason "" "$_fuid" "$_fmode" || _owner_mode_reason "its directory ${_dir} is " "$_duid" "$_dmode"
}

# _read_features FILE fills _FEATURE_KEYS/_FEATURE_VALUES with the accepted pairs of FILE and
# returns 0, or logs why the whole file is void (every feature stays off) and returns 1.
# It never opens anything that is not a regular file, and reads at most the size cap.
_read_features() {
    local _file="$1" _text="" _rc=-1
    # Bytes, not characters: in a UTF-8 locale `read` swallows the LF after an invalid
    # multibyte lead byte, merging two lines (and hiding a duplicate key).
    local LC_ALL=C
    _FEATURE_KEYS=()
    _FEATURE_VALUES=()
    if [[ -L "$_file" ]]; then
        _WHY="it is a symlink"
    elif [[ ! -f "$_file" ]]; then
        _WHY="not a regular file"
    elif _insecure_file_reason "$_file"; then
        :
    else
        # One read up to the first NUL or cap+1 bytes: status 0 means a NUL (bash variables
        # cannot hold one) or too large; 1 means the whole file was read.
        { IFS= read -r -d '' -n "$((_FEATURES_MAX_BYTES + 1))" _text; _rc=$?; } <"$_file" 2>/dev/null
        if ((_rc < 0)); then
            _WHY="cannot open it"
        elif ((_rc == 0 && ${#_text} > _FEATURES_MAX_BYTES)); then
            _WHY="larger than ${_FEATURES_MAX_BYTES} bytes"
        elif ((_rc == 0)); then
            _WHY="contains a NUL byte"
        elif [[ "$_text" == *$'\r'* ]]; then
            _WHY="contains a carriage return (CRLF line endings?)"
        else
            _parse_features "$_file" "$_text"
            return
        fi
    fi
    log "Ignoring feature flags file ${_file}: ${_WHY}; all features stay off"
    return 1
}

# _parse_features FILE TEXT appends the accepted pairs of TEXT to _FEATURE_KEYS/_FEATURE_VALUES.
# It returns 1, after logging why, when a file-level anomaly (too many lines, duplicate key)
# voids the file. Lines are split by parameter expansion, which stays linear in the line length.
_parse_features() {
    local _file="$1" _rest="$2" _line _key _n=0 _q
    local -A _first_line=()
    while [[ -n "$_rest" ]]; do
        _line="${_rest%%$'\n'*}"
        _rest="${_rest:${#_line}+1}"
        _n=$((_n + 1))
        if ((_n > _FEATURES_MAX_LINES)); then
            log "Ignoring feature flags file ${_file}: more than ${_FEATURES_MAX_LINES} lines; all features stay off"
            return 1
        fi
        if [[ -z "$_line" || "$_line" == "#"* ]]; then
            continue
        fi
        if [[ "$_line" != *=* ]]; then
            log "Feature flags line ${_n}: not KEY=VALUE; skipped"
            continue
        fi
        _key="${_line%%=*}"
        # An ASCII identifier: [A-Za-z_][A-Za-z0-9_]* (inline: this runs once per line).
        if [[ -z "$_key" || "$_key" == [$_DIGITS]* || "$_key" == *[!$_IDENT_CHARS]* ]]; then
            _quote _q "$_key"
            log "Feature flags line ${_n}: invalid key ${_q}; skipped"
            continue
        fi
        if [[ -n "${_first_line[$_key]:-}" ]]; then
            log "Ignoring feature flags file ${_file}: key ${_key} set twice (lines ${_first_line[$_key]} and ${_n}); all features stay off"
            return 1
        fi
        _first_line[$_key]="$_n"
        if _reserved_key_reason "$_key"; then
            log "Feature flags line ${_n}: refusing reserved key ${_key} (${_WHY}); skipped"
            continue
        fi
        _FEATURE_KEYS+=("$_key")
        _FEATURE_VALUES+=("${_line#*=}")
    done
}

# _apply_features FILE exports the accepted KEY=VALUE pairs of FILE, or nothing.
_apply_features() {
    local _file="$1" _i
    if [[ ! -e "$_file" && ! -L "$_file" ]]; then
        return 0
    fi
    log "Reading feature flags from ${_file}"
    _read_features "$_file" || return 0
    for _i in "${!_FEATURE_KEYS[@]}"; do
        export "${_FEATURE_KEYS[$_i]}=${_FEATURE_VALUES[$_i]}"
    done
    log "Exported ${#_FEATURE_KEYS[@]} feature flag(s) from ${_file}"
}

# _wait_for_hostname polls once a second until the kernel's hostname (what hostname(1)
# prints) equals the first line of /etc/hostname, for at most _HOSTNAME_WAIT seconds (the
# reference waits forever), then carries on either way.
_wait_for_hostname() {
    local _want _have _waited=0 _qwant _qhave
    if [[ -L "$_HOSTNAME_FILE" || ! -f "$_HOSTNAME_FILE" ]]; then
        log "No regular file ${_HOSTNAME_FILE}; not waiting for the hostname"
        return 0
    fi
    if [[ ! -f "$_KERNEL_HOSTNAME_FILE" || ! -r "$_KERNEL_HOSTNAME_FILE" ]]; then
        log "Cannot read the kernel hostname from ${_KERNEL_HOSTNAME_FILE}; not waiting for the hostname"
        return 0
    fi
    while :; do
        _want=""
        _have=""
        IFS= read -r -n 256 _want <"$_HOSTNAME_FILE" 2>/dev/null
        IFS= read -r -n 256 _have <"$_KERNEL_HOSTNAME_FILE" 2>/dev/null
        if [[ -n "$_want" && "$_have" == "$_want" ]]; then
            return 0
        fi
        if ((_waited >= _HOSTNAME_WAIT)); then
            _quote _qhave "$_have"
            _quote _qwant "$_want"
            log "Hostname ${_qhave} still differs from ${_HOSTNAME_FILE} ${_qwant} after ${_waited}s; continuing"
            return 0
        fi
        if ((_waited == 0)); then
            log "Waiting up to ${_HOSTNAME_WAIT}s for hostname to match ${_HOSTNAME_FILE}"
        fi
        sleep 1
        _waited=$((_waited + 1))
    done
}

# _run_step NAME TIMEOUT ARGS... runs `$BIN_PATH ARGS...` bounded by TIMEOUT seconds and logs
# its exit code when it fails. It returns the step's exit code.
_run_step() {
    local _name="$1" _timeout="$2" _rc
    shift 2
    timeout -k 5 "$_timeout" "$BIN_PATH" "$@"
    _rc=$?
    if ((_rc == 124)); then
        log "ANC ${_name} timed out after ${_timeout}s"
    elif ((_rc != 0)); then
        log "ANC ${_name} exited with code ${_rc}"
    fi
    return "$_rc"
}

_maybe_check_hotfix() {
    if [[ "${ENABLE_PROVISIONING_HOTFIX:-}" != "true" ]]; then
        if [[ -n "${ENABLE_PROVISIONING_HOTFIX+set}" ]]; then
            local _q
            _quote _q "$ENABLE_PROVISIONING_HOTFIX"
            log "ENABLE_PROVISIONING_HOTFIX is ${_q}, not exactly true; skipping check-hotfix"
        fi
        return 0
    fi
    log "ENABLE_PROVISIONING_HOTFIX=true; running check-hotfix to refresh hotfix pointer"
    if _run_step check-hotfix "$_CHECK_TIMEOUT" check-hotfix "${_ROOT_ARGS[@]}" "${_NET_ARGS[@]}"; then
        log "ANC check-hotfix completed; hotfix pointer refresh attempted"
    else
        log "ANC check-hotfix failed; continuing (fail-open)"
    fi
}

# download-hotfix runs whenever the pointer exists, including one check-hotfix just wrote.
_maybe_download_hotfix() {
    if [[ ! -f "$HOTFIX_JSON" ]]; then
        return 0
    fi
    log "Found ANC hotfix config at ${HOTFIX_JSON}; running download-hotfix"
    if _run_step download-hotfix "$_DOWNLOAD_TIMEOUT" download-hotfix "${_ROOT_ARGS[@]}" "${_NET_ARGS[@]}"; then
        log "ANC download-hotfix completed; binary selection follows"
    else
        log "ANC download-hotfix failed; binary selection follows"
    fi
}

# _binary_version BIN prints what `BIN version` reported and returns 0, or prints why it could
# not be read and returns 1. Both ends of the pipe are bounded, so neither a hanging binary nor
# a child holding stdout open can block us, and at most _VERSION_MAX_BYTES are read.
_binary_version() {
    local _out _rc
    _out="$(
        timeout -k 1 "$_VERSION_TIMEOUT" "$1" version </dev/null 2>/dev/null |
            timeout "$_VERSION_TIMEOUT" head -c "$_VERSION_MAX_BYTES"
        exit "${PIPESTATUS[0]}"
    )"
    _rc=$?
    if ((_rc == 124)); then
        echo "\`version\` timed out after ${_VERSION_TIMEOUT}s"
        return 1
    elif ((_rc != 0)); then
        echo "\`version\` exited with code ${_rc}"
        return 1
    fi
    printf '%s\n' "$_out"
}

# _parse_version VAR V sets VAR to "YYYYMM.DD PATCH" for a strict YYYYMM.DD.PATCH, or returns 1.
_parse_version() {
    local _v="$2" _ym _dd _patch _rest
    [[ "$_v" == *.*.* && "$_v" != *.*.*.* ]] || return 1
    _ym="${_v%%.*}"
    _rest="${_v#*.}"
    _dd="${_rest%%.*}"
    _patch="${_rest#*.}"
    [[ ${#_ym} -eq 6 && ${#_dd} -eq 2 && -n "$_patch" && ${#_patch} -le 10 ]] || return 1
    [[ "$_ym$_dd$_patch" != *[!$_DIGITS]* ]] || return 1
    [[ "$_patch" == 0 || "$_patch" != 0* ]] || return 1
    ((10#${_ym:4:2} >= 1 && 10#${_ym:4:2} <= 12 && 10#$_dd >= 1 && 10#$_dd <= 31)) || return 1
    ((10#$_patch <= _MAX_PATCH)) || return 1
    printf -v "$1" '%s %s' "${_ym}.${_dd}" "$_patch"
}

# _hotfix_verdict HOTFIX BAKED sets _WHY to why HOTFIX may be used and returns 0, or sets it to
# why not (empty if no hotfix is staged) and returns 1.
_hotfix_verdict() {
    local _hotfix="$1" _baked="$2" _hv _bv _hp _bp _q
    _WHY=""
    if [[ ! -e "$_hotfix" && ! -L "$_hotfix" ]]; then
        return 1
    fi
    if [[ -L "$_hotfix" ]]; then
        _WHY="it is a symlink"
        return 1
    elif [[ ! -f "$_hotfix" ]]; then
        _WHY="not a regular file"
        return 1
    elif [[ ! -x "$_hotfix" ]]; then
        _WHY="not executable"
        return 1
    elif _insecure_file_reason "$_hotfix"; then
        return 1
    fi
    if ! _hv="$(_binary_version "$_hotfix")"; then
        _WHY="hotfix ${_hv}"
        return 1
    fi
    if ! _parse_version _hp "$_hv"; then
        _quote _q "$_hv"
        _WHY="hotfix reports malformed version ${_q}"
        return 1
    fi
    if ! _bv="$(_binary_version "$_baked")"; then
        _WHY="baked ${_bv}"
        return 1
    fi
    if ! _parse_version _bp "$_bv"; then
        _quote _q "$_bv"
        _WHY="baked binary reports malformed version ${_q}"
        return 1
    fi
    if [[ "${_hp% *}" != "${_bp% *}" ]]; then
        _WHY="different base (hotfix ${_hv}, baked ${_bv})"
        return 1
    elif ((${_hp#* } <= ${_bp#* })); then
        _WHY="not newer (hotfix ${_hv}, baked ${_bv})"
        return 1
    fi
    _WHY="hotfix ${_hv} is newer than baked ${_bv}"
}

# _json_string VAR S sets VAR to S as a JSON string literal; control characters become spaces.
_json_string() {
    local -n _json_out="$1"
    local _s="${2//\\/\\\\}"
    _s="${_s//\"/\\\"}"
    printf -v _json_out '"%s"' "${_s//[[:cntrl:]]/ }"
}

# _emit_event LEVEL MESSAGE writes one guest-agent telemetry event, in the agent's format, for
# the launcher's binary choice. It is best effort: telemetry never stops provisioning. The file
# appears by rename, so the collector never reads a partial one. Builtins only, apart from the
# rename: this runs on every node's critical path.
_emit_event() {
    local _us="${EPOCHREALTIME/[.,]/}" _now _jnow _jlevel _jmsg _tmp
    TZ=UTC printf -v _now '%(%Y-%m-%d %H:%M:%S)T.%s' "${_us:0:-6}" "${_us: -6:3}"
    _json_string _jnow "$_now"
    _json_string _jlevel "$1"
    _json_string _jmsg "$2"
    [[ -d "$EVENTS_DIR" ]] || mkdir -p "$EVENTS_DIR" 2>/dev/null || return 0
    _tmp="${EVENTS_DIR}/.launcher-event.$$"
    if printf '{"Timestamp":%s,"OperationId":%s,"Version":"","TaskName":"AKS.AKSNodeController.Launcher","EventLevel":%s,"Message":%s,"EventPid":"%d","EventTid":"0"}' \
        "$_jnow" "$_jnow" "$_jlevel" "$_jmsg" "$$" >"$_tmp" 2>/dev/null &&
        mv -f "$_tmp" "${EVENTS_DIR}/${_us}000.json"; then
        return 0
    fi
    rm -f "$_tmp"
    return 0
}

# _select_binary sets _SELECTED_BIN to the binary provision must run.
_select_binary() {
    local _why
    if _hotfix_verdict "$HOTFIX_BIN" "$BIN_PATH"; then
        _why="$_WHY"
        log "Hotfix binary accepted: ${_why}"
        log "Using hotfix binary: ${HOTFIX_BIN}"
        _SELECTED_BIN="$HOTFIX_BIN"
        _emit_event Informational "launcher choice=hotfix reason=${_why}"
    else
        _why="$_WHY"
        if [[ -n "$_why" ]]; then
            log "Not using hotfix binary ${HOTFIX_BIN}: ${_why}"
        fi
        log "Using VHD-baked binary: ${BIN_PATH}"
        _SELECTED_BIN="$BIN_PATH"
        _emit_event Informational "launcher choice=baked reason=${_why:-no hotfix staged}"
    fi
}

# _provision runs provision in the background (as the reference does, so the pid is logged),
# waits for it and exits with its exit code.
_provision() {
    local _pid _rc
    local -a _cmd=("$_SELECTED_BIN" provision)
    if [[ -f "$CONFIG_PATH" ]]; then
        log "Launching aks-node-controller with config ${CONFIG_PATH}"
        _cmd+=("--provision-config=${CONFIG_PATH}")
    fi
    if [[ -f "$NBC_CMD_PATH" ]]; then
        log "Launching aks-node-controller with nbc cmd ${NBC_CMD_PATH}"
        _cmd+=("--nbc-cmd=${NBC_CMD_PATH}")
    fi
    _cmd+=("${_ROOT_ARGS[@]}")
    "${_cmd[@]}" &
    _pid=$!
    log "Spawned aks-node-controller (pid ${_pid})"
    wait "$_pid"
    _rc=$?
    if ((_rc == 0)); then
        log "aks-node-controller completed successfully"
    else
        log "aks-node-controller exited with code ${_rc}"
    fi
    exit "$_rc"
}

main() {
    _start_logger
    trap _stop_logger EXIT
    if [[ "$_NODE_ROOT_RAW" != /* ]]; then
        local _q
        _quote _q "$_NODE_ROOT_RAW"
        log "NODE_ROOT must be an absolute path, got ${_q}"
        exit 2
    fi
    _wait_for_hostname
    if [[ ! -f "$CONFIG_PATH" && ! -f "$NBC_CMD_PATH" ]]; then
        log "Gracefully exit aks-node-controller without provision config or nbc cmd"
        exit 0
    fi
    _apply_features "$FEATURES_PATH"
    _maybe_check_hotfix
    _maybe_download_hotfix
    _select_binary
    _provision
}

# Sourcing (tests) defines the functions without running anything.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    main "$@"
fi
