// Package scripts applies the write_files entries of the node's cloud-config
// custom data (nodecustomdata.yml) as a scripts hotfix.
//
// Parse validates and decodes every entry before Apply writes any, so a bad
// entry means nothing is written; each file is then replaced atomically, with
// its mode applied to new and existing files alike.
package scripts

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"nodehotfix/internal/atomicfile"
)

const (
	// MaxInputSize caps the custom data Parse accepts. Azure limits custom
	// data to 64 KiB, so this is headroom, not a tight fit.
	MaxInputSize = 4 << 20
	// maxFileSize caps one decoded file, so a gzip bomb stops here.
	maxFileSize = 4 << 20
	// maxTotalSize caps all decoded files together: they are all held in
	// memory until Apply.
	maxTotalSize = 16 << 20
	defaultMode  = 0o644
)

// File is one validated, decoded write_files entry.
type File struct {
	// Path is absolute and clean, e.g. /opt/azure/containers/provision.sh.
	Path string
	// Mode is the permission bits.
	Mode fs.FileMode
	// Content is the decoded file content.
	Content []byte
}

// entry is a write_files item as cloud-init spells it.
type entry struct {
	Path        string `yaml:"path"`
	Owner       string `yaml:"owner"`
	Permissions string `yaml:"permissions"`
	Encoding    string `yaml:"encoding"`
	// Content is the raw text, or the bytes a !!binary tag decoded.
	Content string `yaml:"content"`
	Append  bool   `yaml:"append"`
	Source  any    `yaml:"source"`
}

type cloudConfig struct {
	WriteFiles []entry `yaml:"write_files"`
}

// Parse decodes the write_files entries of cloud-config data and validates
// each: an absolute path without "..", an owner that is empty, root or
// root:root, octal permissions without special bits (default 0644), and a
// cloud-init encoding (plain, gzip/gz, base64/b64 or gz+b64 and its
// spellings). Entries that append or fetch from a source, and two entries for
// one path, are refused. Data without write_files yields no files. The first
// invalid entry fails the whole parse.
func Parse(data []byte) ([]File, error) {
	if len(data) > MaxInputSize {
		return nil, fmt.Errorf("parse custom data: %d bytes, more than %d", len(data), MaxInputSize)
	}
	var cc cloudConfig
	if err := yaml.Unmarshal(data, &cc); err != nil {
		return nil, fmt.Errorf("parse custom data: %w", err)
	}
	files := make([]File, 0, len(cc.WriteFiles))
	seen := make(map[string]bool, len(cc.WriteFiles))
	total := 0
	for i, e := range cc.WriteFiles {
		f, err := e.decode(maxTotalSize - total)
		if err != nil {
			return nil, fmt.Errorf("parse write_files[%d] %q: %w", i, e.Path, err)
		}
		if seen[f.Path] {
			return nil, fmt.Errorf("parse write_files[%d] %q: duplicate path", i, e.Path)
		}
		seen[f.Path] = true
		total += len(f.Content)
		files = append(files, f)
	}
	return files, nil
}

func (e entry) decode(budget int) (File, error) {
	if err := checkPath(e.Path); err != nil {
		return File{}, err
	}
	switch e.Owner {
	case "", "root", "root:root":
	default:
		return File{}, fmt.Errorf("owner %q: only root is supported", e.Owner)
	}
	if e.Append {
		return File{}, errors.New("append is not supported")
	}
	if e.Source != nil {
		return File{}, errors.New("source is not supported")
	}
	mode, err := parseMode(e.Permissions)
	if err != nil {
		return File{}, err
	}
	content, err := decodeContent(e.Encoding, []byte(e.Content), min(maxFileSize, budget))
	if err != nil {
		return File{}, err
	}
	return File{Path: filepath.Clean(e.Path), Mode: mode, Content: content}, nil
}

// checkPath accepts absolute paths that name a file and never climb with
// "..": joined under a root, such a path stays inside it.
func checkPath(p string) error {
	switch {
	case p == "":
		return errors.New("path is required")
	case !filepath.IsAbs(p):
		return errors.New("path is not absolute")
	case strings.ContainsRune(p, 0):
		return errors.New("path contains NUL")
	case strings.HasSuffix(p, "/") || filepath.Clean(p) == "/":
		return errors.New("path names a directory")
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return errors.New(`path contains ".."`)
		}
	}
	return nil
}

// parseMode parses permissions as octal, as cloud-init does for strings; an
// unquoted YAML number is taken by its digits, so 0644 and 644 agree.
func parseMode(s string) (fs.FileMode, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return defaultMode, nil
	}
	digits := strings.TrimPrefix(strings.TrimPrefix(s, "0o"), "0O")
	n, err := strconv.ParseUint(digits, 8, 32)
	if err != nil {
		return 0, fmt.Errorf("permissions %q: not an octal mode", s)
	}
	if n > 0o7777 {
		return 0, fmt.Errorf("permissions %q: out of range", s)
	}
	// atomicfile applies only the permission bits; refusing setuid, setgid
	// and sticky beats silently dropping them.
	if n > 0o777 {
		return 0, fmt.Errorf("permissions %q: setuid, setgid and sticky bits are not supported", s)
	}
	return fs.FileMode(n), nil
}

// decodeContent applies a cloud-init encoding to the YAML content bytes.
func decodeContent(encoding string, b []byte, limit int) ([]byte, error) {
	var steps []func([]byte, int) ([]byte, error)
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "", "text/plain":
	case "gz", "gzip":
		steps = append(steps, gunzip)
	case "b64", "base64":
		steps = append(steps, unbase64)
	case "gz+b64", "gz+base64", "gzip+b64", "gzip+base64":
		steps = append(steps, unbase64, gunzip)
	default:
		return nil, fmt.Errorf("encoding %q: not supported", encoding)
	}
	for _, step := range steps {
		var err error
		if b, err = step(b, limit); err != nil {
			return nil, fmt.Errorf("decode %s content: %w", encoding, err)
		}
	}
	if len(b) > limit {
		return nil, fmt.Errorf("content: more than %d bytes", limit)
	}
	return b, nil
}

func unbase64(b []byte, _ int) ([]byte, error) {
	// cloud-init's decoder skips whitespace, which YAML block scalars add.
	clean := bytes.Map(func(r rune) rune {
		if r == ' ' || r == '\t' || r == '\n' || r == '\r' {
			return -1
		}
		return r
	}, b)
	out := make([]byte, base64.StdEncoding.DecodedLen(len(clean)))
	n, err := base64.StdEncoding.Decode(out, clean)
	if err != nil {
		return nil, fmt.Errorf("base64: %w", err)
	}
	return out[:n], nil
}

func gunzip(b []byte, limit int) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	defer zr.Close()
	out, err := io.ReadAll(io.LimitReader(zr, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	if len(out) > limit {
		return nil, fmt.Errorf("gzip: inflates to more than %d bytes", limit)
	}
	return out, nil
}

// Apply writes files under root (a file's path P lands at root/P), creating
// parent directories with mode 0755. Each file is replaced atomically and
// gets its Mode even if it existed with another. Every path is checked
// before the first write; a failure while writing leaves earlier files
// written and later ones untouched.
func Apply(root string, files []File) error {
	for _, f := range files {
		if err := checkPath(f.Path); err != nil {
			return fmt.Errorf("apply %q: %w", f.Path, err)
		}
	}
	for _, f := range files {
		dst := filepath.Join(root, f.Path)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("apply %s: %w", f.Path, err)
		}
		if err := atomicfile.WriteFile(dst, f.Content, f.Mode); err != nil {
			return fmt.Errorf("apply %s: %w", f.Path, err)
		}
	}
	return nil
}
