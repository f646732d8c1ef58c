// Package procstat reads resource use (memory, CPU time) from /proc.
package procstat

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is USER_HZ, the unit of the CPU times in /proc/PID/stat; it is
// 100 on every Linux architecture Go supports.
const clockTick = 100

// Memory is a process's resident set size now and at its peak, in bytes.
type Memory struct {
	RSS, HWM int64
}

// ReadMemory returns VmRSS and VmHWM of pid.
func ReadMemory(pid int) (Memory, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, err
	}
	var m Memory
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *int64
		switch key {
		case "VmRSS":
			dst = &m.RSS
		case "VmHWM":
			dst = &m.HWM
		default:
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(val), "kB")), 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("parse %s of pid %d: %w", key, pid, err)
		}
		*dst = kb << 10
	}
	return m, nil
}

// CPU returns the user plus system CPU time pid has used.
func CPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may contain spaces; fields after it are
	// counted from the closing parenthesis. utime and stime are fields 14
	// and 15, so the 12th and 13th after it.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTick, nil
}

// MiB renders bytes in MiB with one decimal.
func MiB(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// Machine is a reading of the whole machine's CPU time counters.
type Machine struct {
	Busy, Total time.Duration
}

// ReadMachine returns the CPU time all CPUs spent busy (not idle or waiting
// for I/O) and in total since boot, from /proc/stat.
func ReadMachine() (Machine, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return Machine{}, err
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return Machine{}, fmt.Errorf("parse /proc/stat: %q", line)
	}
	var m Machine
	for i, s := range f[1:] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return Machine{}, fmt.Errorf("parse /proc/stat: %w", err)
		}
		d := time.Duration(n) * time.Second / clockTick
		// Fields 8 and 9 (guest, guest_nice) are already in user and nice.
		if i >= 7 {
			continue
		}
		m.Total += d
		if i != 3 && i != 4 { // idle, iowait
			m.Busy += d
		}
	}
	return m, nil
}

// Self returns the CPU time this process and the children it has waited
// for have used.
func Self() time.Duration {
	var d time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if syscall.Getrusage(who, &ru) == nil {
			d += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	return d
}

// Load describes how busy the machine was over an interval, and how much of
// that was this process, so a report can say whether others competed.
type Load struct {
	Wall            time.Duration
	MachineBusy     time.Duration
	MachineCapacity time.Duration
	Self            time.Duration
}

// Meter measures a Load from its creation to Stop.
type Meter struct {
	start time.Time
	m     Machine
	self  time.Duration
}

// NewMeter starts measuring.
func NewMeter() *Meter {
	m, _ := ReadMachine()
	return &Meter{start: time.Now(), m: m, self: Self()}
}

// Stop returns the Load since NewMeter.
func (mt *Meter) Stop() Load {
	m, _ := ReadMachine()
	return Load{Wall: time.Since(mt.start), MachineBusy: m.Busy - mt.m.Busy, MachineCapacity: m.Total - mt.m.Total, Self: Self() - mt.self}
}

// String renders l as "machine busy B% (this process S%, others O%)",
// where this process includes the children it has waited for.
func (l Load) String() string {
	if l.MachineCapacity <= 0 {
		return "machine load unknown"
	}
	pct := func(d time.Duration) float64 { return 100 * float64(d) / float64(l.MachineCapacity) }
	return fmt.Sprintf("machine CPU busy %.0f%% (this process %.0f%%, everything else %.0f%%)", pct(l.MachineBusy), pct(l.Self), pct(max(l.MachineBusy-l.Self, 0)))
}
