package lpsd

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"nodehotfix/internal/capfile"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/boltstore"
	"nodehotfix/internal/store/etcdstore"
	"nodehotfix/internal/store/memstore"
)

// defaultStore keeps state in a local bbolt file.
const defaultStore = "bolt:/var/lib/lpsd/lpsd.db"

// etcdFlags secure and authenticate lpsd's etcd connection: the store
// holds every release and revocation, so it is never left open to its
// network by accident.
type etcdFlags struct {
	ca, cert, key      string
	user, passwordFile string
	allowPlaintext     bool
}

func (f *etcdFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.ca, "etcd-ca", "", "PEM CA `file` verifying the etcd servers' certificates; turns on TLS")
	fs.StringVar(&f.cert, "etcd-cert", "", "PEM client certificate `file` presented to etcd (with --etcd-key); turns on TLS")
	fs.StringVar(&f.key, "etcd-key", "", "PEM private key `file` of --etcd-cert")
	fs.StringVar(&f.user, "etcd-user", "", "etcd user `name` to authenticate as (with --etcd-password-file)")
	fs.StringVar(&f.passwordFile, "etcd-password-file", "", "`file` holding --etcd-user's password (one line)")
	fs.BoolVar(&f.allowPlaintext, "etcd-allow-plaintext", false, "allow plain-text etcd on an address that is not loopback: anyone on that network can then read and change every release")
}

// maxPasswordFile caps --etcd-password-file.
const maxPasswordFile = 4 << 10

// config turns the flags and the --store endpoints (host:port, or with an
// http:// or https:// scheme) into the client's endpoints and settings.
// Plain text to a non-loopback endpoint is refused unless allowed, and a
// password is never sent in plain text off this host.
func (f etcdFlags) config(endpoints []string, log *slog.Logger) ([]string, etcdstore.Config, error) {
	c := etcdstore.Config{Log: log}
	secure := f.ca != "" || f.cert != "" || f.key != ""
	if secure {
		if (f.cert == "") != (f.key == "") {
			return nil, c, usagef("--etcd-cert and --etcd-key go together")
		}
		c.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		if f.ca != "" {
			pool, err := loadPool(f.ca)
			if err != nil {
				return nil, c, fmt.Errorf("--etcd-ca: %w", err)
			}
			c.TLS.RootCAs = pool
		}
		if f.cert != "" {
			cert, err := tls.LoadX509KeyPair(f.cert, f.key)
			if err != nil {
				return nil, c, fmt.Errorf("--etcd-cert/--etcd-key: %w", err)
			}
			c.TLS.Certificates = []tls.Certificate{cert}
			checkSecretFile(log, "--etcd-key", f.key)
		}
	}
	if (f.user == "") != (f.passwordFile == "") {
		return nil, c, usagef("--etcd-user and --etcd-password-file go together")
	}
	if f.user != "" {
		data, err := capfile.Read(f.passwordFile, maxPasswordFile)
		if err != nil {
			return nil, c, fmt.Errorf("--etcd-password-file: %w", err)
		}
		c.Username, c.Password = f.user, strings.TrimRight(string(data), "\r\n")
		if c.Password == "" {
			return nil, c, fmt.Errorf("--etcd-password-file %s: empty", f.passwordFile)
		}
		checkSecretFile(log, "--etcd-password-file", f.passwordFile)
	}
	out := make([]string, 0, len(endpoints))
	for _, e := range endpoints {
		scheme, hostport, found := strings.Cut(e, "://")
		if !found {
			scheme, hostport = "", e
		}
		switch {
		case scheme == "https" && !secure:
			return nil, c, usagef("etcd endpoint %s is https: set --etcd-ca (and --etcd-cert/--etcd-key if etcd wants a client certificate)", e)
		case scheme == "http" && secure:
			return nil, c, usagef("etcd endpoint %s is http, but TLS is set (--etcd-ca, --etcd-cert): name it host:port or https://", e)
		case scheme != "" && scheme != "http" && scheme != "https":
			return nil, c, usagef("etcd endpoint %s: want host:port, http:// or https://", e)
		}
		host, _, err := net.SplitHostPort(hostport)
		if err != nil {
			return nil, c, fmt.Errorf("etcd endpoint %s: %w", e, err)
		}
		if !secure && !loopback(host) {
			if c.Password != "" {
				return nil, c, usagef("etcd endpoint %s is not on this host: refusing to send --etcd-user's password in plain text; set --etcd-ca", e)
			}
			if !f.allowPlaintext {
				return nil, c, usagef("etcd endpoint %s is not on this host and the connection would be plain text, open to anyone on that network: set --etcd-ca (and --etcd-cert/--etcd-key), or --etcd-allow-plaintext to accept that", e)
			}
			log.Warn("etcd in plain text on a non-loopback address (--etcd-allow-plaintext): anyone on that network can read and change every release", "endpoint", e)
		}
		if secure {
			out = append(out, "https://"+hostport)
		} else {
			out = append(out, "http://"+hostport)
		}
	}
	return out, c, nil
}

// tlsProbeTimeout bounds the look at an etcd that refused plain text;
// a TLS server answers a ClientHello in a round trip.
const tlsProbeTimeout = 2 * time.Second

// speaksTLS reports whether the server at hostport answers a TLS
// ClientHello with a TLS record (a ServerHello or an alert). It only looks
// at the record header, verifies nothing and sends nothing secret.
func speaksTLS(ctx context.Context, hostport string) bool {
	ctx, cancel := context.WithTimeout(ctx, tlsProbeTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", hostport)
	if err != nil {
		return false
	}
	rec := &firstBytes{Conn: conn}
	host, _, _ := net.SplitHostPort(hostport)
	c := tls.Client(rec, &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12})
	_ = c.HandshakeContext(ctx) // fails verifying, or on a client certificate: only the reply's first bytes matter
	c.Close()
	// A TLS record starts with its type, handshake (22) or alert (21),
	// then the major version 3.
	return len(rec.head) >= 2 && (rec.head[0] == 22 || rec.head[0] == 21) && rec.head[1] == 3
}

// firstBytes is a connection that keeps the first bytes read from it.
type firstBytes struct {
	net.Conn
	head []byte
}

func (f *firstBytes) Read(p []byte) (int, error) {
	n, err := f.Conn.Read(p)
	if len(f.head) < 2 {
		f.head = append(f.head, p[:min(n, 2-len(f.head))]...)
	}
	return n, err
}

// loopback reports whether host names this machine.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// openStore opens the backend a --store value names:
//
//	bolt:PATH            a local bbolt file (the default)
//	etcd:HOST:PORT,...   an etcd cluster; every replica watches it
//	mem:                 in memory, lost on exit (tests, demos)
func openStore(ctx context.Context, spec string, ef etcdFlags, log *slog.Logger) (store.Store, error) {
	kind, arg, _ := strings.Cut(spec, ":")
	switch kind {
	case "bolt":
		if arg == "" {
			return nil, usagef("--store %q: bolt needs a file path", spec)
		}
		return boltstore.Open(arg)
	case "etcd":
		var endpoints []string
		for _, e := range strings.Split(arg, ",") {
			if e = strings.TrimSpace(e); e != "" {
				endpoints = append(endpoints, e)
			}
		}
		if len(endpoints) == 0 {
			return nil, usagef("--store %q: etcd needs host:port endpoints", spec)
		}
		endpoints, cfg, err := ef.config(endpoints, log)
		if err != nil {
			return nil, fmt.Errorf("--store %q: %w", spec, err)
		}
		openCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		st, err := etcdstore.Open(openCtx, endpoints, cfg)
		if err != nil && cfg.TLS == nil {
			// A plain-text client meets a TLS etcd as "error reading server
			// preface: EOF", which names neither TLS nor the flags.
			for _, e := range endpoints {
				if hostport := strings.TrimPrefix(e, "http://"); speaksTLS(ctx, hostport) {
					return nil, fmt.Errorf("%w; etcd at %s seems to speak TLS: set --etcd-ca (and --etcd-cert/--etcd-key)", err, hostport)
				}
			}
		}
		return st, err
	case "mem":
		return memstore.New(), nil
	}
	return nil, usagef("--store %q: want bolt:PATH, mem: or etcd:HOST:PORT[,...]", spec)
}
