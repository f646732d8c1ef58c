// Package layout checks that the README's layout table names every Go
// package of the repository, so a newcomer finds each one's job there.
package layout

import (
	"bufio"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// root is the repository, two levels up from this package.
const root = "../.."

// TestREADMENamesEveryPackage: every directory holding Go files under
// cmd/, internal/, bench/ and test/ is in the layout table: by its own
// path, or in the row of an ancestor that names it (`attest/`, `launch`).
// Generated code (internal/gen) is named once for all.
func TestREADMENamesEveryPackage(t *testing.T) {
	rows := layoutRows(t)
	if len(rows) < 10 {
		t.Fatalf("found %d layout rows in README.md, want the table under ## Layout", len(rows))
	}
	for _, pkg := range packages(t) {
		if !covered(pkg, rows) {
			t.Errorf("README.md's layout table does not name %s/: add a row, or name it in its parent's row", pkg)
		}
	}
}

// tick is a backticked token in a layout row.
var tick = regexp.MustCompile("`([^`]+)`")

// layoutRows returns the backticked tokens of each row of the layout
// table.
func layoutRows(t *testing.T) [][]string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows [][]string
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Layout"
		case in && strings.HasPrefix(line, "| `"):
			var toks []string
			for _, m := range tick.FindAllStringSubmatch(line, -1) {
				toks = append(toks, m[1])
			}
			rows = append(rows, toks)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// packages returns the repository's Go package directories, relative to
// root, slash-separated.
func packages(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, top := range []string{"cmd", "internal", "bench", "test"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(d.Name(), ".go") {
				return nil
			}
			rel, err := filepath.Rel(root, filepath.Dir(p))
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// covered reports whether pkg is named by a row: by its path, or under
// an ancestor the row names (`internal/imds/`, `internal/node/...`) by
// the rest of its path or its last element. internal/gen/ covers every
// generated package under it.
func covered(pkg string, rows [][]string) bool {
	for _, toks := range rows {
		for _, tok := range toks {
			a := strings.TrimSuffix(strings.TrimSuffix(tok, "..."), "/")
			switch {
			case a == pkg:
				return true
			case a == "internal/gen" && strings.HasPrefix(pkg, "internal/gen/"):
				return true
			case strings.HasPrefix(pkg, a+"/") && strings.Contains(a, "/") || strings.HasPrefix(pkg, a+"/") && (a == "bench" || a == "test"):
				rest := strings.TrimPrefix(pkg, a+"/")
				if slices.ContainsFunc(toks, func(t string) bool {
					t = strings.TrimSuffix(t, "/")
					return t == rest || t == path.Base(pkg)
				}) {
					return true
				}
			}
		}
	}
	return false
}
