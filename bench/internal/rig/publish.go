package rig

import (
	"context"
	"os"
	"path/filepath"

	"nodehotfix/test/harness"
)

// PublishRelease publishes version to the running lpsd l as an operator
// would, through lpsctl: a new release key in dir, a signed stand-in
// artifact, publish, then a rollout to 100%, so every node l serves is
// answered with the pointer. It returns the envelope's path.
func PublishRelease(ctx context.Context, l *harness.LPSD, dir, version string) (string, error) {
	priv, _, err := l.GenerateKeys(ctx, dir)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "artifact")
	if err := os.WriteFile(bin, []byte("stand-in artifact\n"), 0o644); err != nil {
		return "", err
	}
	envFile, err := l.SignRelease(ctx, dir, harness.Release{Version: version, Binary: bin, URL: "https://artifacts.invalid/aks-node-controller", KeyFile: priv, SkipVersionCheck: true})
	if err != nil {
		return "", err
	}
	for _, args := range [][]string{{"release", "publish", "--envelope", envFile, "--reason", "bench"}, {"rollout", "set", version, "--percent", "100", "--reason", "bench"}} {
		if _, err := l.Ctl(ctx, args...); err != nil {
			return "", err
		}
	}
	return envFile, nil
}
