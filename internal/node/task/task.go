// Package task runs an agent command's work through the one lifecycle every
// command shares: its budget, its panic guard, its log line, its telemetry
// event.
package task

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"nodehotfix/internal/node/event"
	"nodehotfix/internal/node/layout"
)

// Result is what a task's work returns to its lifecycle.
type Result interface {
	// Message is the telemetry event's message, without timing.
	Message() string
	// Failed reports an Error-level outcome.
	Failed() bool
}

// Recorder is where a task's log line and telemetry event go: the log, and
// the events directory under Root, each event carrying Version.
type Recorder struct {
	Root layout.Root
	// Log receives the task's line; nil discards.
	Log *slog.Logger
	// Version is the agent's version, recorded in every event.
	Version string
}

func (r Recorder) log() *slog.Logger {
	if r.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Log
}

// Event writes one telemetry event; a failure to write it is logged, never
// returned: telemetry must not change what a command does.
func (r Recorder) Event(task, level, msg string, start, end time.Time) {
	if _, err := event.Write(r.Root.EventsDir(), event.Event{
		Task: task, Level: level, Message: msg + event.Timing(start, end), Start: start, End: end, Version: r.Version,
	}); err != nil {
		r.log().Warn("write event", "task", task, "err", err)
	}
}

// Task is one agent command's lifecycle. The same Task runs the command
// whether a launcher started it as a process or launch runs it in-process.
type Task[R Result] struct {
	// Name is the command, for the log.
	Name string
	// Event is the telemetry task (event.Task…).
	Event string
	// Budget is the work's deadline. Zero sets none: the work is bounded
	// by ctx alone, for a step only the process that runs it can stop.
	Budget time.Duration
	// OnPanic turns a recovered panic into the result: a bug in a hotfix
	// step must never stop provisioning.
	OnPanic func(v any) R
}

// Run runs work under t's budget and panic guard, then logs the result on
// rec's log and records it as one event.
func (t Task[R]) Run(ctx context.Context, rec Recorder, work func(ctx context.Context) R) R {
	log := rec.log()
	start := time.Now()
	if t.Budget > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.Budget)
		defer cancel()
	}
	res := func() (res R) {
		defer func() {
			if v := recover(); v != nil {
				log.Error(t.Name+" panicked (fail-open)", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				res = t.OnPanic(v)
			}
		}()
		return work(ctx)
	}()
	end := time.Now()
	level := event.LevelInformational
	if res.Failed() {
		level = event.LevelError
		log.Warn(t.Name+" failed (fail-open)", "result", res.Message(), "durationMs", end.Sub(start).Milliseconds())
	} else {
		log.Info(t.Name+" completed", "result", res.Message(), "durationMs", end.Sub(start).Milliseconds())
	}
	rec.Event(t.Event, level, res.Message(), start, end)
	return res
}
