#!/bin/sh
# tests/tools/hunt.sh PROG [RUNS] [SECONDS]: run build/tests/PROG under
# libusmc until one run takes longer than SECONDS (default 10), then dump
# what it is waiting on (usmc stat -d of its runtime directory, each
# thread's wchan and system call, gdb stacks) into /tmp/hunt.* and kill
# it.  For hangs that show once in a hundred runs (issue 16's notes:
# t_stress, an edge-triggered writer never woken).
set -u
prog=$1 runs=${2:-400} limit=${3:-10}
root=$(cd "$(dirname "$0")/../.." && pwd)
b=$root/build
i=0
while [ "$i" -lt "$runs" ]; do
	i=$((i + 1))
	rd=$(mktemp -d /dev/shm/hunt-XXXXXX)
	USMC_RUNDIR=$rd USMC_CLI=$b/usmc LD_PRELOAD=$b/libusmc.so "$b/tests/$prog" >/tmp/hunt.out 2>&1 &
	pid=$!
	n=0
	while kill -0 "$pid" 2>/dev/null && [ "$n" -lt $((limit * 10)) ]; do
		sleep 0.1
		n=$((n + 1))
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "hunt: $prog run $i still running after ${limit}s (pid $pid); state in /tmp/hunt.*"
		USMC_RUNDIR=$rd "$b/usmc" stat -d >/tmp/hunt.stat 2>&1
		for p in $pid $(pgrep -P "$pid"); do
			for t in /proc/"$p"/task/*; do
				echo "$t $(cat "$t/wchan") $(cut -d' ' -f1 "$t/syscall")"
			done
		done >/tmp/hunt.tasks
		gdb -p "$pid" -batch -ex "thread apply all bt 8" >/tmp/hunt.gdb 2>&1
		pkill -9 -P "$pid"
		kill -9 "$pid"
		rm -rf "$rd"
		exit 1
	fi
	wait "$pid"
	rm -rf "$rd"
done
echo "hunt: $runs runs of $prog, none over ${limit}s"
