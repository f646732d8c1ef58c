// Package customdata renders a node's cloud-init custom data: a boothook
// that lays down the node's bootstrap files and starts the launcher.
package customdata

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	nodeconfigv1 "nodehotfix/internal/gen/nodeconfig/v1"
	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/features"
)

// MaxSize is the cloud's custom-data limit for the base64-encoded payload;
// Render refuses to produce more than fits.
const MaxSize = 87380 * 3 / 4

// Input is what a node's custom data carries.
type Input struct {
	// Config is the node config; required. Its enabled_features map
	// becomes enabled_features.sh.
	Config *nodeconfigv1.Configuration
	// Pointer is an optional hotfix pointer document to stage at boot.
	Pointer []byte
	// NBCCmd is an optional bootstrap command line (nbc-cmd.sh).
	NBCCmd string
	// Root prefixes every path; empty means "/". Only tests and demos set it.
	Root string
}

// Render returns the boothook script. Files are written from base64 (no
// heredoc content can end the heredoc or be expanded), each 0600, in the
// order config, pointer, enabled_features.sh, nbc-cmd. A file with no content
// is left out entirely, so a node without features gets byte-identical
// custom data to one from before features existed.
func Render(in Input) ([]byte, error) {
	if in.Config == nil {
		return nil, errors.New("render custom data: node config is required")
	}
	root := in.Root
	if root == "" {
		root = "/"
	}
	p := func(rel string) string { return path.Join(root, rel) }
	containers := p("opt/azure/containers")

	cfgJSON, err := marshalConfig(in.Config)
	if err != nil {
		return nil, err
	}
	if len(in.Pointer) > 0 {
		ptr, err := hotfix.ParsePointer(in.Pointer)
		if err != nil {
			return nil, fmt.Errorf("render custom data: %w", err)
		}
		// A node reads such a list, but runs no hotfix while it holds it.
		if n := len(ptr.RevokedUnreadable); n > 0 {
			return nil, fmt.Errorf("render custom data: the pointer's revoked list has %d entries that are not versions (YYYYMM.DD.PATCH); a node would run no hotfix: fix or remove them", n)
		}
	}

	var b bytes.Buffer
	fmt.Fprintf(&b, "#cloud-boothook\n#!/bin/bash\nset -euo pipefail\n")
	fmt.Fprintf(&b, "# Boothooks run on every boot; provisioning happens once.\n")
	fmt.Fprintf(&b, "if [ -f %s ]; then exit 0; fi\n", shq(path.Join(containers, "provision.complete")))
	fmt.Fprintf(&b, "logger -t aks-boothook 'boothook start' || true\n")
	fmt.Fprintf(&b, "mkdir -p %s %s\n", shq(containers), shq(p("var/log/azure")))
	writeFile(&b, path.Join(containers, "aks-node-controller-config.json"), cfgJSON)
	writeFile(&b, path.Join(containers, "aks-node-controller-hotfix.json"), in.Pointer)
	writeFile(&b, path.Join(containers, "enabled_features.sh"), features.Render(in.Config.GetEnabledFeatures()))
	writeFile(&b, path.Join(containers, "aks-node-controller-nbc-cmd.sh"), []byte(in.NBCCmd))
	launcher := path.Join(containers, "aks-node-controller-launcher.sh")
	fmt.Fprintf(&b, "if [ -f %s ]; then\n", shq(launcher))
	if root != "/" {
		fmt.Fprintf(&b, "  NODE_ROOT=%s nohup /bin/bash %s > %s 2>&1 &\n", shq(root), shq(launcher), shq(p("var/log/azure/aks-node-controller.output")))
	} else {
		fmt.Fprintf(&b, "  nohup /bin/bash %s > %s 2>&1 &\n", shq(launcher), shq(p("var/log/azure/aks-node-controller.output")))
	}
	fmt.Fprintf(&b, "else\n  systemctl start --no-block aks-node-controller.service\nfi\n")
	if b.Len() > MaxSize {
		return nil, fmt.Errorf("render custom data: %d bytes exceeds the %d-byte custom-data limit", b.Len(), MaxSize)
	}
	return b.Bytes(), nil
}

func writeFile(b *bytes.Buffer, dst string, content []byte) {
	if len(content) == 0 {
		return
	}
	enc := base64.StdEncoding.EncodeToString(content)
	fmt.Fprintf(b, "base64 -d > %s <<'NODEHOTFIX_EOF'\n", shq(dst))
	for len(enc) > 76 {
		b.WriteString(enc[:76])
		b.WriteByte('\n')
		enc = enc[76:]
	}
	b.WriteString(enc)
	b.WriteString("\nNODEHOTFIX_EOF\n")
	fmt.Fprintf(b, "chmod 0600 %s\n", shq(dst))
}

// marshalConfig encodes the config with proto field names and a two-space
// indent, as the reference's marshaller does. protojson's output is
// deliberately unstable in whitespace, so it is re-indented.
func marshalConfig(c *nodeconfigv1.Configuration) ([]byte, error) {
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode node config: %w", err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return nil, fmt.Errorf("indent node config: %w", err)
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// shq single-quotes s for bash.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
