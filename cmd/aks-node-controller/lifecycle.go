package main

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"nodehotfix/internal/node/checkhotfix"
	"nodehotfix/internal/node/downloadhotfix"
	"nodehotfix/internal/node/embedhotfix"
	"nodehotfix/internal/node/event"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/localdns"
)

// result is what a task's work returns to its lifecycle.
type result interface {
	// Message is the telemetry event's message, without timing.
	Message() string
	// Failed reports an Error-level outcome.
	Failed() bool
}

// task is one agent command's lifecycle: its budget, its panic guard, its
// one log line and its one telemetry event. Every command runs through one,
// whether a launcher started it as a process or launch runs it in-process.
type task[R result] struct {
	name   string // the command, for the log
	event  string // the telemetry task
	budget time.Duration
	// onPanic turns a recovered panic into the result: a bug in a hotfix
	// step must never stop provisioning.
	onPanic func(v any) R
}

// run runs work under t's budget and panic guard, then logs and records
// the result.
func (t task[R]) run(ctx context.Context, root layout.Root, log *slog.Logger, work func(ctx context.Context) R) R {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, t.budget)
	defer cancel()
	res := func() (res R) {
		defer func() {
			if v := recover(); v != nil {
				log.Error(t.name+" panicked (fail-open)", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				res = t.onPanic(v)
			}
		}()
		return work(ctx)
	}()
	end := time.Now()
	level := event.LevelInformational
	if res.Failed() {
		level = event.LevelError
		log.Warn(t.name+" failed (fail-open)", "result", res.Message(), "durationMs", end.Sub(start).Milliseconds())
	} else {
		log.Info(t.name+" completed", "result", res.Message(), "durationMs", end.Sub(start).Milliseconds())
	}
	emit(root, log, t.event, level, res.Message(), start, end)
	return res
}

func applyEmbeddedTask() task[embedhotfix.Result] {
	return task[embedhotfix.Result]{
		name: "apply-embedded-hotfix", event: event.TaskApplyEmbedded, budget: embedhotfix.Budget,
		onPanic: func(v any) embedhotfix.Result {
			return embedhotfix.Result{Outcome: embedhotfix.Failed, Err: fmt.Errorf("panic: %v", v)}
		},
	}
}

func checkHotfixTask(budget time.Duration) task[checkhotfix.Result] {
	return task[checkhotfix.Result]{
		name: "check-hotfix", event: event.TaskCheckHotfix, budget: budget,
		onPanic: func(v any) checkhotfix.Result { return checkhotfix.Result{Outcome: checkhotfix.Failed, Panic: v} },
	}
}

func downloadHotfixTask(budget time.Duration) task[downloadhotfix.Result] {
	return task[downloadhotfix.Result]{
		name: "download-hotfix", event: event.TaskDownloadHotfix, budget: budget,
		onPanic: func(v any) downloadhotfix.Result {
			return downloadhotfix.Result{Outcome: downloadhotfix.Failed, Route: downloadhotfix.RouteNone, Err: fmt.Errorf("panic: %v", v)}
		},
	}
}

func localDNSTask(name, ev string, budget time.Duration) task[localdns.Result] {
	return task[localdns.Result]{
		name: name, event: ev, budget: budget,
		onPanic: func(v any) localdns.Result {
			return localdns.Result{Outcome: localdns.Failed, Err: fmt.Errorf("panic: %v", v)}
		},
	}
}
