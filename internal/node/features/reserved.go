package features

import (
	"fmt"
	"strings"
	"sync"
)

// Reasons a key is reserved, one per kind of program it would steer.
const (
	reasonAgent   = "agent variable"
	reasonShell   = "shell variable"
	reasonLocale  = "locale variable"
	reasonLibc    = "dynamic loader or libc variable"
	reasonGo      = "Go runtime variable"
	reasonProxy   = "proxy variable"
	reasonTrust   = "TLS trust variable"
	reasonTool    = "tool or interpreter variable"
	reasonSystemd = "systemd or D-Bus variable"
)

// The reserved keys are a denylist on purpose: producers accept any
// identifier, and the CSE scripts consume the flags they export, so an
// allowlist here would silently drop flags this agent has never heard of.
// What it protects is every child that receives Env (the bootstrap script,
// the CSE scripts, a hotfix agent) and every program those start. Keys are
// case-sensitive, as the environment is: the lower-case proxy names are
// listed because curl, wget, Go and Python read them.

// reservedNames maps each exactly-named reserved key to its reason. It is
// built on first use: every agent command pays the package's init, and only
// the paths that read the features file look keys up.
var reservedNames = sync.OnceValue(func() map[string]string {
	return byName(map[string][]string{
		reasonAgent: {
			"BIN_PATH", "HOTFIX_BIN", "HOTFIX_JSON", "CONFIG_PATH", "NBC_CMD_PATH", "FEATURES_PATH",
			"EVENTS_DIR", "NODE_ROOT", "IMDS_URL", "LPS_ADDR", "HOSTNAME_WAIT_SECONDS",
			"CHECK_HOTFIX_TIMEOUT_SECONDS", "DOWNLOAD_HOTFIX_TIMEOUT_SECONDS",
			"HOTFIX_VERSION_TIMEOUT_SECONDS",
			// The later reference launchers' and the hotfix flow helper's.
			"HOTFIX_FLOW_SCRIPT", "LOGGER_TAG",
		},
		// Everything bash (or sh, for ENV) reads from its environment or sets
		// itself, from the bash manual's "Shell Variables". FUNCNEST, CHILD_MAX,
		// TMOUT and OPTIND change how a script runs; PS4 is expanded (and runs
		// command substitutions) under set -x; COLUMNS and LINES change the
		// output of tools scripts parse.
		reasonShell: {
			"PATH", "IFS", "ENV", "SHELLOPTS", "POSIXLY_CORRECT", "CDPATH", "GLOBIGNORE",
			"EXECIGNORE", "GLOBSORT", "FUNCNEST", "CHILD_MAX", "TMOUT", "PS0", "PS1", "PS2", "PS3",
			"PS4", "PROMPT_COMMAND", "PROMPT_DIRTRIM", "TIMEFORMAT", "INPUTRC", "HOSTFILE",
			"IGNOREEOF", "HOME", "SHELL", "TMPDIR", "MAIL", "MAILCHECK", "MAILPATH", "FCEDIT",
			"FIGNORE", "HOSTNAME", "HOSTTYPE", "MACHTYPE", "OSTYPE", "SHLVL", "PWD", "OLDPWD",
			"OPTIND", "OPTARG", "OPTERR", "REPLY", "RANDOM", "SRANDOM", "SECONDS", "LINENO",
			"EPOCHSECONDS", "EPOCHREALTIME", "UID", "EUID", "PPID", "GROUPS", "FUNCNAME",
			"PIPESTATUS", "DIRSTACK", "COPROC", "MAPFILE", "COMPREPLY", "EMACS", "INSIDE_EMACS",
			"COLUMNS", "LINES", "USER", "LOGNAME", "TERM", "TERMINFO", "TERMINFO_DIRS", "TERMCAP",
			"auto_resume", "histchars",
		},
		reasonLocale: {"LANG", "LANGUAGE", "TZ"},
		// glibc's list of variables it drops for setuid programs (unsecvars.h)
		// outside the prefixes, plus two more it reads.
		reasonLibc: {
			"GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH",
			"NIS_PATH", "NLSPATH", "RES_OPTIONS", "TZDIR", "LIBC_FATAL_STDERR_", "DATEMSK",
		},
		reasonGo: {
			"GODEBUG", "GOGC", "GOMAXPROCS", "GOMEMLIMIT", "GOTRACEBACK", "GORACE", "GOFIPS140",
			"GOCOVERDIR", "ZONEINFO",
		},
		reasonProxy: {
			"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "FTP_PROXY", "SOCKS_PROXY",
			"http_proxy", "https_proxy", "no_proxy", "all_proxy", "ftp_proxy", "socks_proxy",
			"grpc_proxy", "no_grpc_proxy",
		},
		reasonTrust: {
			"SSL_CERT_FILE", "SSL_CERT_DIR", "SSLKEYLOGFILE", "REQUESTS_CA_BUNDLE",
			"NODE_EXTRA_CA_CERTS", "NODE_TLS_REJECT_UNAUTHORIZED", "NODE_USE_OPENSSL_CA",
			"NODE_USE_SYSTEM_CA",
		},
		// Programs provisioning runs, or may: Node.js (no NODE_ prefix, which
		// flags may well use), wget, gnupg (apt keys), apt and debconf, tar and
		// the compressors it runs (TAR_OPTIONS can run commands), grep, the
		// container runtime clients, kubectl, and temp-dir lookups (Python's
		// tempfile reads TEMP and TMP).
		reasonTool: {
			"NODE_OPTIONS", "NODE_PATH", "NODE_ICU_DATA", "NODE_REDIRECT_WARNINGS",
			"NODE_V8_COVERAGE", "NODE_PRESERVE_SYMLINKS", "NODE_COMPILE_CACHE", "NODE_DEBUG",
			"NODE_DEBUG_NATIVE", "NODE_REPL_EXTERNAL_MODULE", "WGETRC", "SYSTEM_WGETRC",
			"GNUPGHOME", "GPG_AGENT_INFO", "APT_CONFIG", "DEBIAN_FRONTEND", "DEBIAN_PRIORITY",
			"TAR_OPTIONS", "GZIP", "XZ_OPT", "XZ_DEFAULTS", "GREP_OPTIONS", "CONTAINERD_ADDRESS",
			"CONTAINERD_NAMESPACE", "CONTAINER_RUNTIME_ENDPOINT", "IMAGE_SERVICE_ENDPOINT",
			"DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY", "KUBECONFIG",
			"TEMP", "TMP",
		},
		// What systemd passes to services and sd_notify/sd_listen_fds read, and
		// the bus addresses systemctl and busctl connect to.
		reasonSystemd: {
			"NOTIFY_SOCKET", "INVOCATION_ID", "JOURNAL_STREAM", "WATCHDOG_USEC", "WATCHDOG_PID",
			"CREDENTIALS_DIRECTORY", "RUNTIME_DIRECTORY", "STATE_DIRECTORY", "CACHE_DIRECTORY",
			"LOGS_DIRECTORY", "CONFIGURATION_DIRECTORY", "DBUS_SYSTEM_BUS_ADDRESS",
			"DBUS_SESSION_BUS_ADDRESS",
		},
	})
})

// reservedPrefixes reserves every key starting with a prefix. A prefix is
// used only where the family is open-ended and no flag plausibly starts
// with it.
var reservedPrefixes = []struct{ prefix, reason string }{
	// "_": the launcher's and agent's internals, and bash's $_.
	{"_", reasonAgent},
	// How the agent talks to its children (AKS_NODE_CONTROLLER_VERSION…).
	{"AKS_NODE_CONTROLLER_", reasonAgent},
	// The hotfix flow helper's answer (ANC_HOTFIX_SELECTED_BIN) and
	// whatever the reference names next in that family.
	{"ANC_", reasonAgent},
	// BASH_ENV, BASHOPTS, BASH_XTRACEFD, BASH_COMPAT, BASH_LOADABLES_PATH…
	{"BASH", reasonShell},
	{"COMP_", reasonShell},
	{"HIST", reasonShell},
	{"READLINE_", reasonShell},
	{"LC_", reasonLocale},
	// LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT…; MALLOC_CHECK_, MALLOC_TRACE…;
	// RESOLV_HOST_CONF…
	{"LD_", reasonLibc},
	{"MALLOC_", reasonLibc},
	{"RESOLV_", reasonLibc},
	// OPENSSL_CONF, OPENSSL_MODULES, OPENSSL_ENGINES…; CURL_CA_BUNDLE,
	// CURL_HOME, CURL_SSL_BACKEND…
	{"OPENSSL_", reasonTrust},
	{"CURL_", reasonTrust},
	// GIT_SSL_NO_VERIFY, GIT_SSL_CAINFO, GIT_CONFIG_*, GIT_SSH_COMMAND…
	{"GIT_", reasonTool},
	// GRPC_DEFAULT_SSL_ROOTS_FILE_PATH, GRPC_XDS_BOOTSTRAP, GRPC_PROXY_EXP…
	{"GRPC_", reasonTool},
	// PYTHONPATH, PYTHONHOME, PYTHONHTTPSVERIFY, PYTHONWARNINGS…
	{"PYTHON", reasonTool},
	// PERL5LIB, PERL5OPT, PERLLIB, PERLIO_DEBUG, PERL_LWP_SSL_CA_FILE… (debconf
	// and dpkg's maintainer scripts are Perl).
	{"PERL", reasonTool},
	// RUBYOPT, RUBYLIB, RUBY_YJIT_ENABLE…
	{"RUBY", reasonTool},
	{"npm_config_", reasonTool},
	{"NPM_CONFIG_", reasonTool},
	// DPKG_ROOT, DPKG_ADMINDIR, DPKG_FORCE…; DEBCONF_DB_OVERRIDE…;
	// DNF_VAR_* (substituted into repository URLs).
	{"DPKG_", reasonTool},
	{"DEBCONF_", reasonTool},
	{"DNF_VAR_", reasonTool},
	// XDG_CONFIG_HOME and friends: where git, systemctl --user and others
	// find their configuration.
	{"XDG_", reasonTool},
	// SYSTEMD_LOG_LEVEL, SYSTEMD_PAGER…; LISTEN_FDS, LISTEN_PID…
	{"SYSTEMD_", reasonSystemd},
	{"LISTEN_", reasonSystemd},
}

// Reserved reports whether key may not reach a child's environment from the
// features file, and why: reason is a short category such as
// "shell variable" or "dynamic loader or libc variable". It is safe for
// concurrent use.
func Reserved(key string) (reason string, reserved bool) {
	if r, ok := reservedNames()[key]; ok {
		return r, true
	}
	for _, p := range reservedPrefixes {
		if strings.HasPrefix(key, p.prefix) {
			return p.reason, true
		}
	}
	return "", false
}

// byName inverts reason → names. A name listed twice is a programmer error.
func byName(lists map[string][]string) map[string]string {
	m := make(map[string]string)
	for reason, names := range lists {
		for _, n := range names {
			if prev, dup := m[n]; dup {
				panic(fmt.Sprintf("features: reserved key %s listed as %q and %q", n, prev, reason))
			}
			m[n] = reason
		}
	}
	return m
}
