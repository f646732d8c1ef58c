package features

import (
	"strings"
	"testing"
)

func TestReserved(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key    string
		reason string // "" for a key a flag may use
	}{
		{"HOTFIX_BIN", reasonAgent},
		{"NODE_ROOT", reasonAgent},
		{"CHECK_HOTFIX_TIMEOUT_SECONDS", reasonAgent},
		{"AKS_NODE_CONTROLLER_VERSION", reasonAgent},
		{"_", reasonAgent},
		{"_SELECTED_BIN", reasonAgent},
		{"FUNCNEST", reasonShell},
		{"BASH_ENV", reasonShell},
		{"BASHOPTS", reasonShell},
		{"BASH_XTRACEFD", reasonShell},
		{"ENV", reasonShell},
		{"SHELLOPTS", reasonShell},
		{"IFS", reasonShell},
		{"PATH", reasonShell},
		{"PS0", reasonShell},
		{"PS4", reasonShell},
		{"TMOUT", reasonShell},
		{"HISTFILE", reasonShell},
		{"CHILD_MAX", reasonShell},
		{"HOME", reasonShell},
		{"TMPDIR", reasonShell},
		{"LANG", reasonLocale},
		{"LC_ALL", reasonLocale},
		{"TZ", reasonLocale},
		{"LD_PRELOAD", reasonLibc},
		{"LD_LIBRARY_PATH", reasonLibc},
		{"MALLOC_CHECK_", reasonLibc},
		{"GLIBC_TUNABLES", reasonLibc},
		{"RESOLV_HOST_CONF", reasonLibc},
		{"GODEBUG", reasonGo},
		{"GOMAXPROCS", reasonGo},
		{"GOFIPS140", reasonGo},
		{"HTTPS_PROXY", reasonProxy},
		{"https_proxy", reasonProxy},
		{"no_proxy", reasonProxy},
		{"SSL_CERT_FILE", reasonTrust},
		{"SSLKEYLOGFILE", reasonTrust},
		{"OPENSSL_CONF", reasonTrust},
		{"OPENSSL_MODULES", reasonTrust},
		{"CURL_CA_BUNDLE", reasonTrust},
		{"REQUESTS_CA_BUNDLE", reasonTrust},
		{"NODE_EXTRA_CA_CERTS", reasonTrust},
		{"NODE_TLS_REJECT_UNAUTHORIZED", reasonTrust},
		{"NODE_OPTIONS", reasonTool},
		{"PYTHONPATH", reasonTool},
		{"GIT_SSL_NO_VERIFY", reasonTool},
		{"GIT_CONFIG_COUNT", reasonTool},
		{"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", reasonTool},
		{"PERL5OPT", reasonTool},
		{"PERLLIB", reasonTool},
		{"RUBYOPT", reasonTool},
		{"APT_CONFIG", reasonTool},
		{"DPKG_ROOT", reasonTool},
		{"WGETRC", reasonTool},
		{"GNUPGHOME", reasonTool},
		{"TAR_OPTIONS", reasonTool},
		{"SYSTEMD_LOG_LEVEL", reasonSystemd},
		{"LISTEN_FDS", reasonSystemd},
		{"NOTIFY_SOCKET", reasonSystemd},
		{HotfixKey, ""},
		{"ENABLE_FOO", ""},
		{"MY_FLAG", ""},
		{"NODE_NAME", ""},
		{"CONTAINERD_VERSION", ""},
		// Case-sensitive, as the environment is.
		{"path", ""},
		{"ld_preload", ""},
		{"Bash_env", ""},
	}
	for _, tt := range tests {
		reason, reserved := Reserved(tt.key)
		if reason != tt.reason || reserved != (tt.reason != "") {
			t.Errorf("Reserved(%q) = %q, %v; want %q, %v", tt.key, reason, reserved, tt.reason, tt.reason != "")
		}
	}
}

// TestReservedCoversLauncher checks that nothing the shell launcher refused
// reaches a child now: its _LAUNCHER_VARS, _SHELL_VARS and _PROCESS_VARS and
// an example of each prefix of _reserved_key_reason.
func TestReservedCoversLauncher(t *testing.T) {
	t.Parallel()
	launcher := strings.Fields(`
		BIN_PATH HOTFIX_BIN HOTFIX_JSON CONFIG_PATH NBC_CMD_PATH FEATURES_PATH EVENTS_DIR
		NODE_ROOT IMDS_URL LPS_ADDR HOSTNAME_WAIT_SECONDS CHECK_HOTFIX_TIMEOUT_SECONDS
		DOWNLOAD_HOTFIX_TIMEOUT_SECONDS HOTFIX_VERSION_TIMEOUT_SECONDS
		PATH IFS ENV SHELL HOME CDPATH GLOBIGNORE PROMPT_COMMAND SHELLOPTS BASHOPTS
		PS1 PS2 PS3 PS4 POSIXLY_CORRECT TMPDIR HOSTNAME SHLVL PWD OLDPWD OPTIND OPTARG OPTERR REPLY
		RANDOM SRANDOM SECONDS LINENO EPOCHSECONDS EPOCHREALTIME UID EUID PPID GROUPS FUNCNAME
		PIPESTATUS DIRSTACK HOSTTYPE MACHTYPE OSTYPE TMOUT TIMEFORMAT INPUTRC MAIL MAILCHECK MAILPATH
		FCEDIT FIGNORE EXECIGNORE GLOBSORT COLUMNS LINES COPROC USER LOGNAME TERM auto_resume
		histchars LANG LANGUAGE
		GCONV_PATH GETCONF_DIR GLIBC_TUNABLES HOSTALIASES LOCALDOMAIN LOCPATH
		NLSPATH NIS_PATH RES_OPTIONS TZDIR GODEBUG GOGC GOMAXPROCS GOMEMLIMIT GOTRACEBACK GORACE
		GOFIPS140 SSL_CERT_FILE SSL_CERT_DIR HTTP_PROXY HTTPS_PROXY NO_PROXY ALL_PROXY FTP_PROXY
		http_proxy https_proxy no_proxy all_proxy ftp_proxy NOTIFY_SOCKET APT_CONFIG PERLLIB
		RUBYOPT RUBYLIB NODE_OPTIONS
		_X BASHX LC_X COMP_X HISTX READLINE_X LD_X MALLOC_X RESOLV_X GRPC_X SYSTEMD_X LISTEN_X
		PYTHONX PERL5X`)
	for _, k := range launcher {
		if _, reserved := Reserved(k); !reserved {
			t.Errorf("Reserved(%q) = false; the launcher refused it", k)
		}
	}
}

// TestReservedTables keeps the tables tidy: exact names are identifiers that
// no prefix already covers, and no prefix hides another.
func TestReservedTables(t *testing.T) {
	t.Parallel()
	for name := range reservedNames() {
		if !ValidKey(name) {
			t.Errorf("reserved name %q is not a valid key", name)
		}
		for _, p := range reservedPrefixes {
			if strings.HasPrefix(name, p.prefix) {
				t.Errorf("reserved name %q is already covered by prefix %q", name, p.prefix)
			}
		}
	}
	for i, p := range reservedPrefixes {
		for j, q := range reservedPrefixes {
			if i != j && strings.HasPrefix(q.prefix, p.prefix) {
				t.Errorf("reserved prefix %q hides %q", p.prefix, q.prefix)
			}
		}
	}
}
