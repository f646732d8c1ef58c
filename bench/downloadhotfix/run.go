package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"nodehotfix/bench/internal/procstat"
	"nodehotfix/bench/internal/rig"
	"nodehotfix/bench/internal/stats"
	"nodehotfix/internal/hotfix"
	"nodehotfix/test/harness"
)

type options struct {
	n, warmup, rssN int
	sizes           string
	keep            bool
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("downloadhotfix", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.n, "n", 10, "measured iterations per size")
	fs.IntVar(&o.warmup, "warmup", 2, "unmeasured iterations first")
	fs.IntVar(&o.rssN, "rss-n", 3, "runs per size under time(1) for peak memory")
	fs.StringVar(&o.sizes, "sizes", "16,64", "comma-separated artifact sizes in MiB; the last is the one compared with curl")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var sizes []int64
	for _, s := range strings.Split(o.sizes, ",") {
		var mib int64
		if _, err := fmt.Sscan(strings.TrimSpace(s), &mib); err != nil || mib <= 0 {
			fmt.Fprintf(stderr, "downloadhotfix: bad -sizes %q\n", o.sizes)
			return 2
		}
		sizes = append(sizes, mib<<20)
	}
	return rig.Session(ctx, "downloadhotfix", o.keep, stdout, stderr, func(ctx context.Context, dir string) error {
		return bench(ctx, o, sizes, dir, stdout)
	})
}

// artifact is one hotfix binary padded to a size, with the node that
// downloads it.
type artifact struct {
	size   int64
	path   string
	url    string
	sha256 string
	node   *harness.Node
}

type sample struct {
	agent, curl, curlSync []float64
	agentRSS, curlRSS     []float64
}

func bench(ctx context.Context, o options, sizes []int64, dir string, out io.Writer) error {
	r, err := rig.New(ctx, dir, 1)
	if err != nil {
		return err
	}
	artDir := filepath.Join(dir, "artifacts")
	if err := os.MkdirAll(artDir, 0o755); err != nil {
		return err
	}
	// Stripped, so that it fits the smallest artifact; the padding makes up
	// the rest of each size.
	hotfixBin := filepath.Join(dir, "hotfix-agent")
	if err := harness.GoBuild(ctx, "./cmd/aks-node-controller", hotfixBin, "-s -w -X main.version="+rig.HotfixVersion); err != nil {
		return err
	}
	srv, err := harness.StartArtifactServer(artDir, r.TLS)
	if err != nil {
		return err
	}
	defer srv.Close()

	var arts []*artifact
	for _, size := range sizes {
		a := &artifact{size: size, path: filepath.Join(artDir, fmt.Sprintf("aks-node-controller-%dMiB", size>>20))}
		if err := pad(hotfixBin, a.path, size); err != nil {
			return err
		}
		a.url = srv.URL + "/" + filepath.Base(a.path)
		if a.sha256, _, err = rig.FileSHA256(a.path); err != nil {
			return err
		}
		env, err := r.SignRelease(rig.HotfixVersion, a.url, a.sha256, size)
		if err != nil {
			return err
		}
		if a.node, err = r.NewNode(fmt.Sprintf("node-%dMiB", size>>20), nil); err != nil {
			return err
		}
		ptr, err := json.Marshal(hotfix.Pointer{Hotfixes: map[string]string{rig.HotfixVersion[:9]: rig.HotfixVersion}, Releases: []json.RawMessage{env}})
		if err != nil {
			return err
		}
		if err := os.WriteFile(a.node.Path("opt/azure/containers/aks-node-controller-hotfix.json"), ptr, 0o644); err != nil {
			return err
		}
		arts = append(arts, a)
	}

	fmt.Fprintf(out, "download-hotfix direct path vs curl + sha256sum, HTTPS on loopback; %d iterations per size after %d warm-up, interleaved\n\n", o.n, o.warmup)
	results := make([]sample, len(arts))
	for i := -o.warmup; i < o.n; i++ {
		for k, a := range arts {
			s := &results[k]
			staged := a.node.Path("opt/azure/containers/aks-node-controller-hotfix")
			os.Remove(staged)
			res, err := rig.Run(ctx, []string{r.Agent, "download-hotfix", "--root", a.node.Root, "--artifact-ca", r.TLS.CAFile})
			if err != nil {
				return err
			}
			if res.Exit != 0 || !bytes.Contains(res.Output, []byte("outcome=staged route=direct")) {
				return fmt.Errorf("download-hotfix did not stage %s (exit %d):\n%s", a.url, res.Exit, res.Output)
			}
			if sum, n, err := rig.FileSHA256(staged); err != nil || sum != a.sha256 || n != a.size {
				return fmt.Errorf("staged binary %s: sha256 %s size %d (err %v), want %s %d", staged, sum, n, err, a.sha256, a.size)
			}
			c, err := curlSHA(ctx, a, r.TLS.CAFile, false)
			if err != nil {
				return err
			}
			cs, err := curlSHA(ctx, a, r.TLS.CAFile, true)
			if err != nil {
				return err
			}
			if i < 0 {
				continue
			}
			s.agent = append(s.agent, ms(res.Wall))
			s.curl = append(s.curl, ms(c))
			s.curlSync = append(s.curlSync, ms(cs))
		}
	}
	// Peak memory in separate runs: time(1) around each process.
	for i := 0; i < o.rssN; i++ {
		for k, a := range arts {
			os.Remove(a.node.Path("opt/azure/containers/aks-node-controller-hotfix"))
			rss, res, err := rig.PeakRSS(ctx, dir, []string{r.Agent, "download-hotfix", "--root", a.node.Root, "--artifact-ca", r.TLS.CAFile})
			if err != nil {
				return err
			}
			if !bytes.Contains(res.Output, []byte("outcome=staged route=direct")) {
				return fmt.Errorf("download-hotfix under time(1) did not stage:\n%s", res.Output)
			}
			f := filepath.Join(a.node.Root, "curl-download")
			crss, _, err := rig.PeakRSS(ctx, dir, []string{"curl", "-so", f, "--cacert", r.TLS.CAFile, a.url})
			if err != nil {
				return err
			}
			results[k].agentRSS = append(results[k].agentRSS, float64(rss)/(1<<20))
			results[k].curlRSS = append(results[k].curlRSS, float64(crss)/(1<<20))
		}
	}
	for k, a := range arts {
		s := results[k]
		ag, cu, cs := stats.Of(s.agent), stats.Of(s.curl), stats.Of(s.curlSync)
		fmt.Fprintf(out, "%d MiB artifact\n", a.size>>20)
		fmt.Fprintf(out, "  %-38s %s\n", "download-hotfix (staged, direct)", ag.String("ms"))
		fmt.Fprintf(out, "  %-38s %s\n", "curl -so F URL && sha256sum F", cu.String("ms"))
		fmt.Fprintf(out, "  %-38s %s\n", "  ... && sync F (same durability)", cs.String("ms"))
		fmt.Fprintf(out, "  ratio download-hotfix / curl+sha256sum: %.2fx (target <= 1.3x); / curl+sha256sum+sync: %.2fx\n", ag.Median/cu.Median, ag.Median/cs.Median)
		fmt.Fprintf(out, "  throughput: download-hotfix %.0f MiB/s, curl+sha256sum %.0f MiB/s\n", float64(a.size>>20)/(ag.Median/1000), float64(a.size>>20)/(cu.Median/1000))
		fmt.Fprintf(out, "  peak RSS (time -f %%M): download-hotfix %s, curl %s\n\n", stats.Of(s.agentRSS).String(" MiB"), stats.Of(s.curlRSS).String(" MiB"))
	}
	if len(arts) > 1 {
		first, last := stats.Of(results[0].agentRSS).Median, stats.Of(results[len(arts)-1].agentRSS).Median
		fmt.Fprintf(out, "peak RSS of download-hotfix: %d MiB artifact %.1f MiB, %d MiB artifact %.1f MiB (growth %+.1f MiB for %+d MiB of artifact)\n",
			arts[0].size>>20, first, arts[len(arts)-1].size>>20, last, last-first, (arts[len(arts)-1].size-arts[0].size)>>20)
	}
	return nil
}

// curlSHA times `curl -so F URL` then `sha256sum F` (and, with sync,
// `sync F`, which fsyncs it as download-hotfix does its file) as separate
// processes on the node's file system, and returns their summed wall time.
func curlSHA(ctx context.Context, a *artifact, caFile string, sync bool) (time.Duration, error) {
	f := filepath.Join(a.node.Root, "curl-download")
	os.Remove(f)
	c, err := rig.Run(ctx, []string{"curl", "-so", f, "--cacert", caFile, a.url})
	if err != nil || c.Exit != 0 {
		return 0, fmt.Errorf("curl %s: exit %d %v %s", a.url, c.Exit, err, c.Output)
	}
	h, err := rig.Run(ctx, []string{"sha256sum", f})
	if err != nil || h.Exit != 0 || !bytes.HasPrefix(h.Output, []byte(a.sha256)) {
		return 0, fmt.Errorf("sha256sum %s: exit %d %v %s", f, h.Exit, err, h.Output)
	}
	total := c.Wall + h.Wall
	if sync {
		s, err := rig.Run(ctx, []string{"sync", f})
		if err != nil || s.Exit != 0 {
			return 0, fmt.Errorf("sync %s: exit %d %v %s", f, s.Exit, err, s.Output)
		}
		total += s.Wall
	}
	return total, nil
}

// pad copies the binary at src to dst and appends random bytes up to size;
// an ELF binary runs with trailing data.
func pad(src, dst string, size int64) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if int64(len(data)) > size {
		return fmt.Errorf("agent binary is %s, larger than the %s artifact", procstat.MiB(int64(len(data))), procstat.MiB(size))
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	rng := rand.NewChaCha8([32]byte{1})
	if _, err := io.CopyN(f, rng, size-int64(len(data))); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
