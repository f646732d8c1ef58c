// Command embed-hotfix puts script hotfix payloads into the agent's source
// tree, where the next build of aks-node-controller embeds them
// (internal/node/embedhotfix, in the reference's scripthotfix/generated
// layout):
//
//	embed-hotfix -from DIR [-to DIR]   copy DIR's payloads and mark them active
//	embed-hotfix -clear [-to DIR]      remove every payload: the agent carries none
//
// DIR holds one rendered nodecustomdata document per platform (ubuntu,
// mariner, acl, azlosguard, flatcar). It may be the reference's generated
// directory as it is (rendered_nodecustomdata_<platform>.yml and an
// "active" file, which must say "true"; dotfiles and READMEs are skipped),
// or this project's earlier
// layout (nodecustomdata_<platform>.yml), which is copied under the
// reference's names. Every payload is parsed and checked as the agent will
// (scripts.Embedded) before any is copied, so a bad one is refused here,
// not on a node. -to defaults to the package's payload directory. `make
// embed-hotfix PAYLOADS=DIR` runs it. Exit codes: 0 done, 1 a bad payload or
// a failed write, 2 usage.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"nodehotfix/internal/atomicfile"
	"nodehotfix/internal/capfile"
	"nodehotfix/internal/node/embedhotfix"
	"nodehotfix/internal/node/scripts"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("embed-hotfix", flag.ContinueOnError)
	fs.SetOutput(stderr)
	from := fs.String("from", "", "`directory` of rendered_nodecustomdata_<platform>.yml payloads (the reference's generated directory)")
	to := fs.String("to", filepath.Join("internal", "node", "embedhotfix", filepath.FromSlash(embedhotfix.Dir)), "the agent's payload `directory`")
	clear := fs.Bool("clear", false, "remove every payload and the active marker")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if (*from == "") == !*clear || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "embed-hotfix: want -from DIR or -clear (and no arguments)")
		return 2
	}
	var err error
	if *clear {
		err = clearPayloads(*to)
	} else {
		err = embed(*from, *to, stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "embed-hotfix:", err)
		return 1
	}
	return 0
}

// earlierPrefix is the payload prefix of this project's earlier layout.
const earlierPrefix = "nodecustomdata_"

// embed checks every payload in from, then copies them to to and marks
// them active.
func embed(from, to string, stdout io.Writer) error {
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	payloads := map[string][]byte{}
	active, rendered := false, false
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "README") {
			continue // .gitkeep, the payload directory's own README
		}
		if name == embedhotfix.ActiveFile {
			active = true
			active, err := capfile.Read(filepath.Join(from, name), 64)
			if err != nil {
				return err
			}
			if strings.TrimSpace(string(active)) != "true" {
				return fmt.Errorf("%s says %q: the payloads are not meant to apply; remove it or make it say true", filepath.Join(from, name), active)
			}
			continue
		}
		base, ok := strings.CutSuffix(name, embedhotfix.PayloadSuffix)
		platform, found := strings.CutPrefix(base, embedhotfix.PayloadPrefix)
		rendered = rendered || found
		if !found {
			platform, found = strings.CutPrefix(base, earlierPrefix)
		}
		if !ok || !found || !slices.Contains(embedhotfix.Platforms, platform) {
			return fmt.Errorf("%s: not a payload; want %s<platform>%s, platform one of %v", filepath.Join(from, name), embedhotfix.PayloadPrefix, embedhotfix.PayloadSuffix, embedhotfix.Platforms)
		}
		target := embedhotfix.PayloadName(platform)
		if _, dup := payloads[target]; dup {
			return fmt.Errorf("%s: a second payload for %s", filepath.Join(from, name), platform)
		}
		data, err := capfile.Read(filepath.Join(from, name), scripts.MaxInputSize)
		if err != nil {
			return err
		}
		files, err := scripts.Parse(data, scripts.Embedded)
		if err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(from, name), err)
		}
		if len(files) == 0 {
			return fmt.Errorf("%s: no write_files entries", filepath.Join(from, name))
		}
		payloads[target] = data
		fmt.Fprintf(stdout, "%s: %d files for %s\n", name, len(files), platform)
	}
	if len(payloads) == 0 {
		return errors.New(from + ": no payloads")
	}
	if rendered && !active {
		// The reference applies its generated payloads only under an
		// active marker; embedding them active would change what they mean.
		return fmt.Errorf("%s: rendered payloads without an %q file saying true: the reference would not apply them; add it to embed them", from, embedhotfix.ActiveFile)
	}
	if err := clearPayloads(to); err != nil {
		return err
	}
	for name, data := range payloads {
		if err := atomicfile.WriteFile(filepath.Join(to, name), data, 0o644); err != nil {
			return err
		}
	}
	if err := atomicfile.WriteFile(filepath.Join(to, embedhotfix.ActiveFile), []byte("true\n"), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "embedded %d payloads into %s; build aks-node-controller now\n", len(payloads), to)
	return nil
}

// clearPayloads removes every payload and the marker from dir.
func clearPayloads(dir string) error {
	names := []string{embedhotfix.ActiveFile}
	for _, p := range embedhotfix.Platforms {
		names = append(names, embedhotfix.PayloadName(p))
	}
	for _, n := range names {
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}
