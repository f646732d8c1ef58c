// Package scripts applies the write_files entries of the node's cloud-config
// custom data (nodecustomdata.yml) as a scripts hotfix.
//
// Parse validates and decodes every entry before Apply writes any, so a bad
// entry means nothing is written; each file is then replaced atomically, with
// its mode applied to new and existing files alike, and a failure part way
// restores every file already written to what was there. Permissions are
// read exactly as cloud-init reads them (see parsePermissions). Options add
// the checks of the reference's embedded payloads (strict, replace-only,
// required permissions, no unsafe paths, no empty content).
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

// Options are the checks a payload's producer asks for. The zero value is
// custom data's (the scripts_version path); Embedded is what the
// reference applies to the payloads an agent carries.
type Options struct {
	// Strict refuses an entry key cloud-init does not know, and defer
	// (writing in cloud-init's final stage has no meaning here).
	Strict bool
	// RequirePermissions refuses an entry without permissions.
	RequirePermissions bool
	// RejectEmptyContent refuses an entry whose decoded content is empty.
	RejectEmptyContent bool
	// ReplaceOnly makes Apply refuse a path where no regular file exists
	// yet: a payload replaces provisioning scripts, it adds none.
	ReplaceOnly bool
	// RejectUnsafePaths makes Apply refuse a path through a symlink or
	// onto anything but a regular file, instead of replacing what is
	// there.
	RejectUnsafePaths bool
}

// Embedded is the reference's apply options for embedded payloads.
var Embedded = Options{Strict: true, RequirePermissions: true, RejectEmptyContent: true, ReplaceOnly: true, RejectUnsafePaths: true}

// entry is a write_files item as cloud-init spells it.
type entry struct {
	Path        string    `yaml:"path"`
	Owner       string    `yaml:"owner"`
	Permissions yaml.Node `yaml:"permissions"`
	Encoding    string    `yaml:"encoding"`
	// Content is the raw text, or the bytes a !!binary tag decoded.
	Content string `yaml:"content"`
	Append  bool   `yaml:"append"`
	Defer   bool   `yaml:"defer"`
	Source  any    `yaml:"source"`
}

// entryKeys are the write_files keys cloud-init knows.
var entryKeys = map[string]bool{"path": true, "owner": true, "permissions": true, "encoding": true, "content": true, "append": true, "defer": true, "source": true}

type cloudConfig struct {
	WriteFiles []yaml.Node `yaml:"write_files"`
}

// Parse decodes the write_files entries of cloud-config data and validates
// each: an absolute path without "..", an owner that is empty, root or
// root:root, permissions as cloud-init reads them without special bits
// (default 0644), and a cloud-init encoding (plain, gzip/gz, base64/b64 or
// gz+b64 and its spellings). Entries that append or fetch from a source, and
// two entries for one path, are refused, and o's checks apply. Data without
// write_files yields no files. The first invalid entry fails the whole
// parse.
func Parse(data []byte, o Options) ([]File, error) {
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
	for i, n := range cc.WriteFiles {
		var e entry
		if err := n.Decode(&e); err != nil {
			return nil, fmt.Errorf("parse write_files[%d]: %w", i, err)
		}
		f, err := e.decode(&n, o, maxTotalSize-total)
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

func (e entry) decode(n *yaml.Node, o Options, budget int) (File, error) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i].Value, n.Content[i+1]
		if o.Strict && !entryKeys[k] {
			return File{}, fmt.Errorf("unknown key %q", k)
		}
		// cloud-init writes text or bytes; a number, a boolean or a date
		// as content is an error there, not the digits written out.
		if k == "content" && v.Kind == yaml.ScalarNode && v.Tag != "!!binary" && !yaml11Text(v) && !yaml11Null().MatchString(v.Value) {
			return File{}, fmt.Errorf("content %q: YAML 1.1 reads it as a number, a boolean or a date, not text (quote it)", v.Value)
		}
	}
	if o.Strict {
		if e.Defer {
			return File{}, errors.New("defer is not supported")
		}
	}
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
	mode := fs.FileMode(defaultMode)
	if e.Permissions.Kind != 0 {
		m, err := parsePermissions(&e.Permissions)
		switch {
		case err == nil:
			mode = m
		case !errors.Is(err, errNoPermissions):
			return File{}, err
		case o.RequirePermissions:
			return File{}, errors.New("permissions are required")
		}
	} else if o.RequirePermissions {
		return File{}, errors.New("permissions are required")
	}
	content, err := decodeContent(e.Encoding, []byte(e.Content), min(maxFileSize, budget))
	if err != nil {
		return File{}, err
	}
	if o.RejectEmptyContent && len(content) == 0 {
		return File{}, errors.New("content is empty")
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
// parent directories with mode 0755, all or nothing. Every path is checked,
// with o's checks, and what is there kept, before the first write; each
// file is then replaced atomically and gets its Mode even if it existed
// with another. If a write fails, every file already written is put back as
// it was (removed if it was not there), and the error says whether that
// worked. A restore puts back content, permission bits and symlinks; the
// owner is root's (the agent writes as root) and directories Apply created
// stay.
func Apply(root string, files []File, o Options) error {
	kept := make([]prior, 0, len(files))
	budget := maxTotalSize
	for _, f := range files {
		if err := checkPath(f.Path); err != nil {
			return fmt.Errorf("apply %q: %w", f.Path, err)
		}
		p, err := keep(root, f.Path, o, budget)
		if err != nil {
			return fmt.Errorf("apply %s: %w", f.Path, err)
		}
		budget -= len(p.content)
		kept = append(kept, p)
	}
	for i, f := range files {
		dst := filepath.Join(root, f.Path)
		err := os.MkdirAll(filepath.Dir(dst), 0o755)
		if err == nil {
			err = atomicfile.WriteFile(dst, f.Content, f.Mode)
		}
		if err != nil {
			err = fmt.Errorf("apply %s: %w", f.Path, err)
			// The failed write was atomic: only the files before it changed.
			if rerr := restore(kept[:i]); rerr != nil {
				return errors.Join(err, fmt.Errorf("restore the files written before it: %w", rerr))
			}
			return fmt.Errorf("%w; the %d files written before it were restored", err, i)
		}
	}
	return nil
}

// prior is what was at a path before Apply: a regular file's content and
// mode, a symlink's target, or nothing.
type prior struct {
	dst     string
	was     was
	content []byte
	mode    fs.FileMode
	link    string
}

// was is the kind of thing a path held before Apply.
type was int

const (
	wasFile was = iota
	wasSymlink
	wasNothing
)

// keep checks what is at root/path (and, with RejectUnsafePaths, every
// directory on the way) and keeps a copy to restore.
func keep(root, path string, o Options, budget int) (prior, error) {
	dst := filepath.Join(root, path)
	if o.RejectUnsafePaths {
		dir := root
		for _, part := range strings.Split(strings.Trim(filepath.Dir(path), "/"), "/") {
			if part == "" {
				continue
			}
			dir = filepath.Join(dir, part)
			fi, err := os.Lstat(dir)
			if errors.Is(err, fs.ErrNotExist) {
				break
			}
			if err != nil {
				return prior{}, err
			}
			if !fi.IsDir() {
				return prior{}, fmt.Errorf("%s is not a directory (%v): unsafe path", dir, fi.Mode().Type())
			}
		}
	}
	fi, err := os.Lstat(dst)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if o.ReplaceOnly {
			return prior{}, errors.New("no such file to replace (a payload replaces files, it adds none)")
		}
		return prior{dst: dst, was: wasNothing}, nil
	case err != nil:
		return prior{}, err
	case fi.Mode().IsRegular():
		if fi.Size() > int64(budget) {
			return prior{}, fmt.Errorf("existing file of %d bytes is too large to keep for a restore", fi.Size())
		}
		content, err := os.ReadFile(dst)
		if err != nil {
			return prior{}, err
		}
		return prior{dst: dst, content: content, mode: fi.Mode().Perm()}, nil
	case o.RejectUnsafePaths || o.ReplaceOnly:
		return prior{}, fmt.Errorf("not a regular file (%v): unsafe path", fi.Mode().Type())
	case fi.Mode()&fs.ModeSymlink != 0:
		// Replaced, never followed; a restore puts the link back.
		link, err := os.Readlink(dst)
		if err != nil {
			return prior{}, err
		}
		return prior{dst: dst, was: wasSymlink, link: link}, nil
	}
	return prior{}, fmt.Errorf("not a regular file (%v)", fi.Mode().Type())
}

// restore puts every kept path back, last written first.
func restore(kept []prior) error {
	var errs []error
	for i := len(kept) - 1; i >= 0; i-- {
		p := kept[i]
		var err error
		switch p.was {
		case wasNothing:
			if err = os.Remove(p.dst); errors.Is(err, fs.ErrNotExist) {
				err = nil
			}
		case wasSymlink:
			tmp := p.dst + ".restore-link"
			os.Remove(tmp)
			if err = os.Symlink(p.link, tmp); err == nil {
				err = os.Rename(tmp, p.dst)
			}
		default:
			err = atomicfile.WriteFile(p.dst, p.content, p.mode)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.dst, err))
		}
	}
	return errors.Join(errs...)
}
