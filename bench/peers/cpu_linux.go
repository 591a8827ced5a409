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

// serverCPU is the user + system CPU time of the processes pids, of their
// live children (PostgreSQL serves each connection from a child of the
// postmaster) and of their children that exited and were reaped (a session
// closed mid-run, a cancel request's short-lived process: without them
// the sum could shrink over a run), from /proc; ok is false if none could
// be read.
//
// A child reaped while /proc is being read could be missed (read after it
// was reaped, its parent before) or counted twice, so a scan during which
// a parent's reaped-children time moved is done again.
func serverCPU(pids []int) (d time.Duration, ok bool) {
	if len(pids) == 0 {
		return 0, false
	}
	for range 5 {
		r0 := reapedCPU(pids)
		d, ok = scanCPU(pids)
		if reapedCPU(pids) == r0 {
			break
		}
	}
	return d, ok
}

// reapedCPU is the CPU time of the reaped children of pids.
func reapedCPU(pids []int) (d time.Duration) {
	for _, p := range pids {
		if _, _, r, err := procStat(p); err == nil {
			d += r
		}
	}
	return d
}

// scanCPU is one read of /proc for serverCPU.
func scanCPU(pids []int) (d time.Duration, ok bool) {
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
		ppid, cpu, reaped, err := procStat(pid)
		switch {
		case err != nil:
			continue
		case want[pid]:
			d += cpu + reaped
		case want[ppid]:
			d += cpu
		default:
			continue
		}
		ok = true
	}
	return d, ok
}

// procStat reads a process's parent and CPU time (utime + stime) from
// /proc/<pid>/stat, and that of its reaped children (cutime + cstime).
func procStat(pid int) (ppid int, cpu, reaped time.Duration, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields after it start after the last ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return 0, 0, 0, os.ErrInvalid
	}
	// f[0] is field 3 (state): ppid is field 4, utime 14, stime 15,
	// cutime 16, cstime 17.
	ppid, err = strconv.Atoi(f[1])
	if err != nil {
		return 0, 0, 0, err
	}
	var t [4]int64
	for i := range t {
		if t[i], err = strconv.ParseInt(f[11+i], 10, 64); err != nil {
			return 0, 0, 0, os.ErrInvalid
		}
	}
	return ppid, time.Duration(t[0]+t[1]) * clockTick, time.Duration(t[2]+t[3]) * clockTick, nil
}
