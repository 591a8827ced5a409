//go:build linux

package peers

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// processCPU is this process's user + system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTick is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on
// every Linux build that matters).
const clockTick = 10 * time.Millisecond

// serverCPU is the user + system CPU time of the processes pids and of
// their live children (PostgreSQL serves each connection from a child of
// the postmaster), from /proc; ok is false if none could be read.
func serverCPU(pids []int) (d time.Duration, ok bool) {
	if len(pids) == 0 {
		return 0, false
	}
	want := map[int]bool{}
	for _, p := range pids {
		want[p] = true
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, false
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, cpu, err := procStat(pid)
		if err != nil || (!want[pid] && !want[ppid]) {
			continue
		}
		d += cpu
		ok = true
	}
	return d, ok
}

// procStat reads a process's parent and CPU time (utime + stime) from
// /proc/<pid>/stat.
func procStat(pid int) (ppid int, cpu time.Duration, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields after it start after the last ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, 0, os.ErrInvalid
	}
	// f[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
	ppid, err = strconv.Atoi(f[1])
	if err != nil {
		return 0, 0, err
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, os.ErrInvalid
	}
	return ppid, time.Duration(ut+st) * clockTick, nil
}
