package main

import (
	"context"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"nodehotfix/internal/atomicfile"
	"nodehotfix/internal/imds/emulator"
	"nodehotfix/internal/imds/imdssign"
)

type options struct {
	listen       string
	addrFile     string
	vmID         string
	subscription string
	sku          string
	location     string
	validity     time.Duration
	sans         string
	intermediate bool
	rootsOut     string
	intermsOut   string
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("imds-emulator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "`address` to serve on (169.254.169.254:80 to stand in for the real service)")
	fs.StringVar(&o.addrFile, "addr-file", "", "write the bound address to this `file` once listening (for --listen with port 0)")
	fs.StringVar(&o.vmID, "vm-id", "", "VM ID to attest (default: a random UUID)")
	fs.StringVar(&o.subscription, "subscription", "", "subscription ID to attest (default: a random UUID)")
	fs.StringVar(&o.sku, "sku", "22_04-lts-gen2", "image SKU")
	fs.StringVar(&o.location, "location", "eastus", "VM location")
	fs.DurationVar(&o.validity, "validity", 6*time.Hour, "attested document lifetime")
	fs.StringVar(&o.sans, "san", "eastus.metadata.azure.com,metadata.azure.com", "comma-separated SANs of the signing certificate")
	fs.BoolVar(&o.intermediate, "intermediate", false, "sign through an intermediate CA, served at "+emulator.AIAPath)
	fs.StringVar(&o.rootsOut, "write-roots", "", "write the CA root (PEM) to this `file`, for lpsd --imds-roots")
	fs.StringVar(&o.intermsOut, "write-intermediates", "", "write the intermediate (PEM) to this `file`, for lpsd --imds-intermediates")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "imds-emulator: unexpected arguments: %s\n", strings.Join(fs.Args(), " "))
		return 2
	}
	if err := serve(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "imds-emulator:", err)
		return 1
	}
	return 0
}

func serve(ctx context.Context, o options, stdout, stderr io.Writer) error {
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	if o.vmID == "" {
		o.vmID = uuid()
	}
	if o.subscription == "" {
		o.subscription = uuid()
	}
	ca, err := imdssign.NewCA(imdssign.CAConfig{DNSNames: splitList(o.sans), Intermediate: o.intermediate})
	if err != nil {
		return fmt.Errorf("mint CA: %w", err)
	}
	if o.rootsOut != "" {
		if err := atomicfile.WriteFile(o.rootsOut, ca.RootPEM(), 0o644); err != nil {
			return fmt.Errorf("--write-roots: %w", err)
		}
	}
	if o.intermsOut != "" {
		if ca.Intermediate == nil {
			return errors.New("--write-intermediates needs --intermediate")
		}
		data := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Intermediate.Raw})
		if err := atomicfile.WriteFile(o.intermsOut, data, 0o644); err != nil {
			return fmt.Errorf("--write-intermediates: %w", err)
		}
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	if o.addrFile != "" {
		if err := atomicfile.WriteFile(o.addrFile, []byte(addr+"\n"), 0o644); err != nil {
			ln.Close()
			return fmt.Errorf("--addr-file: %w", err)
		}
	}
	srv := &http.Server{
		Handler: emulator.Handler(emulator.Config{
			VM:       emulator.VM{VMID: o.vmID, SubscriptionID: o.subscription, SKU: o.sku, Location: o.location},
			CA:       ca,
			Validity: o.validity,
			Log:      log,
		}),
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       30 * time.Second,
	}
	fmt.Fprintf(stdout, "imds-emulator listening on %s vmId=%s subscriptionId=%s\n", addr, o.vmID, o.subscription)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// uuid returns a random RFC 4122 version-4 UUID.
func uuid() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
