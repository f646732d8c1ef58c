package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// IMDS is a running imds-emulator.
type IMDS struct {
	*Proc
	URL       string
	RootsFile string
	VMID      string
	Sub       string
}

// StartIMDS starts an emulator for vmID and sub on a loopback port.
func StartIMDS(ctx context.Context, b Binaries, dir, vmID, sub string) (*IMDS, error) {
	return StartIMDSWith(ctx, b, dir, IMDSOptions{VMID: vmID, Sub: sub})
}

// IMDSOptions configure StartIMDSWith.
type IMDSOptions struct {
	VMID, Sub string
	// Listen is the address; empty means a loopback port.
	Listen string
	// Prefix wraps the command, e.g. InNetns(name).
	Prefix []string
}

// StartIMDSWith starts an emulator.
func StartIMDSWith(ctx context.Context, b Binaries, dir string, o IMDSOptions) (*IMDS, error) {
	addrFile := filepath.Join(dir, "imds.addr")
	roots := filepath.Join(dir, "imds-roots.pem")
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	vmID, sub := o.VMID, o.Sub
	argv := append(append([]string(nil), o.Prefix...),
		b.IMDS, "--listen", o.Listen, "--addr-file", addrFile, "--write-roots", roots,
		"--vm-id", vmID, "--subscription", sub)
	p, err := Start("imds-emulator", filepath.Join(dir, "imds.log"), argv, nil)
	if err != nil {
		return nil, err
	}
	addr, err := WaitFile(ctx, p, addrFile)
	if err != nil {
		p.Kill()
		return nil, err
	}
	return &IMDS{Proc: p, URL: "http://" + addr, RootsFile: roots, VMID: vmID, Sub: sub}, nil
}

// LPSDOptions configure StartLPSD.
type LPSDOptions struct {
	// Store is the --store value; empty means a bbolt file in the dir.
	Store string
	// IMDSRoots is the emulator's root bundle.
	IMDSRoots string
	// TLS is the serving material; zero means mint new material in dir.
	TLS TLSFiles
	// Region labels the instance.
	Region string
	// Name distinguishes several instances sharing dir.
	Name string
	// Listen is the node-facing address; empty means a loopback port.
	Listen string
	// Prefix wraps the command (and lpsctl), e.g. InNetns(name).
	Prefix []string
	// Extra flags.
	Extra []string
}

// LPSD is a running lpsd.
type LPSD struct {
	*Proc
	GRPCAddr, AdminAddr, HTTPAddr string
	TLS                           TLSFiles
	TokenFile                     string
	ctl                           string
	prefix                        []string
}

// StartLPSD starts lpsd on loopback ports with an admin token.
func StartLPSD(ctx context.Context, b Binaries, dir string, o LPSDOptions) (*LPSD, error) {
	name := o.Name
	if name == "" {
		name = "lpsd"
	}
	if o.TLS.CertFile == "" {
		var err error
		if o.TLS, err = MintTLS(dir); err != nil {
			return nil, err
		}
	}
	if o.Store == "" {
		o.Store = "bolt:" + filepath.Join(dir, name+".db")
	}
	tokenFile := filepath.Join(dir, "admin.token")
	if _, err := os.Stat(tokenFile); err != nil {
		tok := make([]byte, 16)
		rand.Read(tok)
		if err := os.WriteFile(tokenFile, []byte("harness:"+hex.EncodeToString(tok)+"\n"), 0o600); err != nil {
			return nil, err
		}
	}
	addrFile := filepath.Join(dir, name+".addr")
	os.Remove(addrFile)
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	argv := append(append([]string(nil), o.Prefix...),
		b.LPSD,
		"--listen", o.Listen, "--admin-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
		"--addr-file", addrFile,
		"--tls-cert", o.TLS.CertFile, "--tls-key", o.TLS.KeyFile,
		"--admin-token-file", tokenFile,
		"--store", o.Store,
		"--imds-roots", o.IMDSRoots,
		// Nothing balances these: stop at once (Extra may set one).
		"--drain-delay", "0s",
	)
	if o.Region != "" {
		argv = append(argv, "--region", o.Region)
	}
	argv = append(argv, o.Extra...)
	p, err := Start(name, filepath.Join(dir, name+".log"), argv, nil)
	if err != nil {
		return nil, err
	}
	line, err := WaitFile(ctx, p, addrFile)
	if err != nil {
		p.Kill()
		return nil, err
	}
	var addrs struct{ GRPC, Admin, HTTP string }
	if err := json.Unmarshal([]byte(line), &addrs); err != nil {
		p.Kill()
		return nil, fmt.Errorf("parse %s: %w", addrFile, err)
	}
	return &LPSD{Proc: p, GRPCAddr: addrs.GRPC, AdminAddr: addrs.Admin, HTTPAddr: addrs.HTTP, TLS: o.TLS, TokenFile: tokenFile, ctl: b.LPSCtl, prefix: o.Prefix}, nil
}

// Ctl runs lpsctl against this instance and returns its stdout.
func (l *LPSD) Ctl(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	argv := append(append([]string(nil), l.prefix...), l.ctl)
	cmd := exec.CommandContext(ctx, argv[0], append(argv[1:], args...)...)
	cmd.Env = append(os.Environ(),
		"LPSCTL_SERVER="+l.AdminAddr,
		"LPSCTL_TOKEN_FILE="+l.TokenFile,
		"LPSCTL_CA="+l.TLS.CAFile,
	)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("lpsctl %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), nil
}
