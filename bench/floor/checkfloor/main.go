// Command checkfloor is the floor check-hotfix is measured against: the
// least a process can do for the same result on the wire, namely one GET of
// the attested document from the metadata service and one gRPC call over
// TLS (same ALPN, same cluster CA, same service name, the document as
// "authorization") to the live-patching service. It reads no node config,
// writes no file, logs nothing and emits no event.
//
//	checkfloor -imds-url URL -lps-addr HOST:PORT -ca FILE
//
// Exit 0 when the service answered (a config or NotFound), 1 otherwise.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	lpsv1 "nodehotfix/internal/gen/akslivepatching/v1"
)

func main() { os.Exit(run()) }

func run() int {
	imdsURL := flag.String("imds-url", "", "metadata service base URL")
	lpsAddr := flag.String("lps-addr", "", "live-patching host:port")
	caFile := flag.String("ca", "", "cluster CA PEM file")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := check(ctx, *imdsURL, *lpsAddr, *caFile); err != nil {
		fmt.Fprintln(os.Stderr, "checkfloor:", err)
		return 1
	}
	return 0
}

func check(ctx context.Context, imdsURL, lpsAddr, caFile string) error {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, imdsURL+"/metadata/attested/document?api-version=2025-04-07", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Metadata", "true")
	resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
	if err != nil {
		return err
	}
	var doc struct{ Signature string }
	err = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&doc)
	resp.Body.Close()
	if err != nil {
		return err
	}

	creds := credentials.NewTLS(&tls.Config{
		RootCAs:    roots,
		ServerName: "aks-security-patch.data.mcr.microsoft.com",
		NextProtos: []string{"aks-live-patching", "h2"},
	})
	conn, err := grpc.NewClient("passthrough:///"+lpsAddr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", doc.Signature)
	out, err := lpsv1.NewLivePatchingServiceClient(conn).GetComponentConfig(ctx, &lpsv1.GetComponentConfigRequest{ComponentName: "aksNodeController"})
	if status.Code(err) == codes.NotFound {
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Println(len(out.GetConfig()))
	return nil
}
