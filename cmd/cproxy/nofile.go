package main

import (
	"math"
	"syscall"
)

// openFileLimit is the process's limit on open files (RLIMIT_NOFILE's soft
// limit); unlimited when it cannot be read.
func openFileLimit() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return math.MaxUint64
	}
	return uint64(l.Cur)
}
