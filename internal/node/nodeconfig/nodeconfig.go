// Package nodeconfig reads the node's bootstrap inputs (the protojson node
// config and the nbc-cmd.sh command line) to find the live-patching target.
package nodeconfig

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	"nodehotfix/internal/capfile"
	nodeconfigv1 "nodehotfix/internal/gen/nodeconfig/v1"
)

// MaxConfigSize caps the node config and nbc-cmd.sh. Real ones are tens of
// kilobytes, dominated by certificates.
const MaxConfigSize = 4 << 20

// Source says which file a Target came from.
type Source string

// Sources of a Target.
const (
	SourceNodeConfig Source = "node-config"
	SourceNBCCmd     Source = "nbc-cmd"
)

// Target is where the live-patching service is reached and what it is
// trusted with.
type Target struct {
	// Host is the API server FQDN without port: the TLS SNI and the gRPC
	// authority host. Dialling goes to Host:443 unless overridden.
	Host string
	// CAPEM is the decoded cluster CA bundle (PEM); nil when the source had
	// none. It is the only trust anchor for the live-patching connection.
	CAPEM []byte
	// Source says which file supplied the target.
	Source Source
}

// CertPool returns the cluster CA as the trust anchors of the live-patching
// connection; without one, no credentials may be sent.
func (t Target) CertPool() (*x509.CertPool, error) {
	if len(t.CAPEM) == 0 {
		return nil, errors.New("cluster CA unavailable from provision-config; refusing to fetch over unverified TLS")
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(t.CAPEM) {
		return nil, errors.New("parse cluster CA: no PEM certificates")
	}
	return roots, nil
}

// Load parses the node config at path with protojson, discarding unknown
// fields. A syntax error still returns the (possibly partial) config together
// with the error, as the reference continues with a partial config.
func Load(path string) (*nodeconfigv1.Configuration, error) {
	data, err := capfile.Read(path, MaxConfigSize)
	if err != nil {
		return nil, err
	}
	cfg := &nodeconfigv1.Configuration{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, cfg); err != nil {
		return cfg, fmt.Errorf("parse node config %s: %w", path, err)
	}
	return cfg, nil
}

// ResolveTarget finds the live-patching target. The node config is
// authoritative when it names the API server; when it is absent, or present
// without an API server name (a gap in the reference, which then failed), the
// target comes from the nbc-cmd.sh assignments API_SERVER_NAME and
// KUBE_CA_CRT. A target without a CA is returned without error: refusing to
// send credentials over unverified TLS is the caller's decision.
func ResolveTarget(configPath, nbcCmdPath string) (Target, error) {
	cfg, cfgErr := Load(configPath)
	if cfg != nil {
		if host := normalizeHost(cfg.GetApiServerConfig().GetApiServerName()); host != "" {
			ca, err := decodeCA(cfg.GetKubernetesCaCert(), "kubernetes_ca_cert")
			if err != nil {
				return Target{}, err
			}
			return Target{Host: host, CAPEM: ca, Source: SourceNodeConfig}, nil
		}
	}
	t, err := targetFromNBCCmd(nbcCmdPath)
	if err != nil {
		if cfgErr != nil && !errors.Is(cfgErr, fs.ErrNotExist) {
			return Target{}, fmt.Errorf("node config: %w; nbc-cmd fallback: %w", cfgErr, err)
		}
		if cfgErr == nil {
			return Target{}, fmt.Errorf("node config %s has no api_server_config.api_server_name; nbc-cmd fallback: %w", configPath, err)
		}
		return Target{}, fmt.Errorf("no node config; nbc-cmd fallback: %w", err)
	}
	return t, nil
}

func targetFromNBCCmd(path string) (Target, error) {
	data, err := capfile.Read(path, MaxConfigSize)
	if err != nil {
		return Target{}, err
	}
	env := ParseAssignments(string(data))
	host := normalizeHost(env["API_SERVER_NAME"])
	if host == "" {
		return Target{}, fmt.Errorf("%s: API_SERVER_NAME not set", path)
	}
	ca, err := decodeCA(env["KUBE_CA_CRT"], "KUBE_CA_CRT")
	if err != nil {
		return Target{}, fmt.Errorf("%s: %w", path, err)
	}
	return Target{Host: host, CAPEM: ca, Source: SourceNBCCmd}, nil
}

// normalizeHost drops a ":port" suffix: the live-patching port is fixed.
func normalizeHost(name string) string {
	name = strings.TrimSpace(name)
	if h, _, err := net.SplitHostPort(name); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
}

func decodeCA(b64, field string) ([]byte, error) {
	b64 = strings.TrimSpace(b64)
	if b64 == "" {
		return nil, nil
	}
	ca, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", field, err)
	}
	return ca, nil
}

// ColdStartHotfixes returns the out-of-contract top-level "hotfixes" object
// of the node config, the reference's cold-start fallback pointer. It returns
// nil, nil when the file is missing or carries no (or an empty) map.
func ColdStartHotfixes(path string) (map[string]string, error) {
	data, err := capfile.Read(path, MaxConfigSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var doc struct {
		Hotfixes map[string]string `json:"hotfixes"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("parse cold-start pointer in %s: %w", path, err)
	}
	if len(doc.Hotfixes) == 0 {
		return nil, nil
	}
	return doc.Hotfixes, nil
}

// AgentPoolLabel is the kubelet node label naming the node's agent pool.
const AgentPoolLabel = "kubernetes.azure.com/agentpool"

// AgentPool returns the node's agent pool: the AgentPoolLabel kubelet node
// label from the node config, or, without a node config, from nbc-cmd.sh's
// KUBELET_NODE_LABELS (comma-separated key=value; the first match wins).
// It fails when neither names one.
func AgentPool(configPath, nbcCmdPath string) (string, error) {
	cfg, err := Load(configPath)
	switch {
	case cfg != nil:
		// A partial config still names its labels, as the reference reads it.
		if pool := strings.TrimSpace(cfg.GetKubeletConfig().GetKubeletNodeLabels()[AgentPoolLabel]); pool != "" {
			return pool, nil
		}
		if err != nil {
			return "", fmt.Errorf("node config %s: %w", configPath, err)
		}
		return "", fmt.Errorf("node config %s has no %s kubelet node label", configPath, AgentPoolLabel)
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	}
	data, err := capfile.Read(nbcCmdPath, MaxConfigSize)
	if err != nil {
		return "", fmt.Errorf("no node config; nbc-cmd fallback: %w", err)
	}
	for _, pair := range strings.Split(ParseAssignments(string(data))["KUBELET_NODE_LABELS"], ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(pair), "="); ok && strings.TrimSpace(k) == AgentPoolLabel {
			if v = strings.TrimSpace(v); v != "" {
				return v, nil
			}
		}
	}
	return "", fmt.Errorf("%s: KUBELET_NODE_LABELS has no %s label", nbcCmdPath, AgentPoolLabel)
}
