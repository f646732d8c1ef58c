package pkgmgr

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"time"
)

const (
	attempts = 5
	// attemptTimeout bounds one package manager run; a healthy apt-get
	// update of one repository takes seconds.
	attemptTimeout = 60 * time.Second
	defaultBackoff = 3 * time.Second
	maxBackoff     = 30 * time.Second
)

// retry calls fn up to attempts times, each under attemptTimeout, until it
// succeeds. Between attempts it waits base, doubling per attempt up to
// maxBackoff, with jitter so that a fleet provisioning at once does not hit
// the repository in lockstep. It stops early when ctx is done, when ctx's
// deadline would expire during the wait, or when the command does not exist.
func retry(ctx context.Context, base time.Duration, fn func(context.Context) error) error {
	var err error
	for i := range attempts {
		if i > 0 {
			d := backoff(base, i)
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
				return fmt.Errorf("stopped after %d of %d attempts, no time left for another: %w: %w",
					i, attempts, context.DeadlineExceeded, err)
			}
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("stopped after %d of %d attempts: %w: %w", i, attempts, ctx.Err(), err)
			case <-t.C:
			}
		}
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		err = fn(actx)
		cancel()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			if !errors.Is(err, ctx.Err()) {
				err = fmt.Errorf("%w: %w", ctx.Err(), err)
			}
			return fmt.Errorf("stopped after %d of %d attempts: %w", i+1, attempts, err)
		case errors.Is(err, exec.ErrNotFound):
			// A missing executable will not appear by retrying.
			return err
		}
	}
	return fmt.Errorf("%d attempts: %w", attempts, err)
}

// backoff returns the jittered wait before attempt i (i >= 1): uniform in
// [d/2, d) for d = base<<(i-1), capped at maxBackoff or base if larger.
func backoff(base time.Duration, i int) time.Duration {
	limit := max(base, maxBackoff)
	d := base
	for range i - 1 {
		if d >= limit/2 {
			d = limit
			break
		}
		d *= 2
	}
	if half := d / 2; half > 0 {
		return half + rand.N(half)
	}
	return d
}
