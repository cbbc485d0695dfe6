#!/bin/sh
# SPDX-License-Identifier: MIT
# bench/manycore.sh OUTDIR [QUICK] - the many-core figures of docs/perf/manycore.md,
# TCP vs usmc side by side, on a machine with 16 or more CPUs (the lent
# device machine; see the document for how the programs got there):
#
#   nginx8   nginx with 8 workers on CPUs N/2..N-1, wrk -t 8 -c 400 on CPUs
#            0..N/2-1, keep-alive and Connection: close (bench/programs.py)
#   redis    redis-c200 and redis-c50-P16 at default settings, client on CPU 2,
#            server on CPU 3, as on the 2-CPU machine (bench/programs.py)
#   sweep    seed 004's redis-benchmark --threads 1,2,4,8, 1 KB, -c 200,
#            client threads on the first half of the CPUs (bench/redis_sweep.py)
#   pairs    1, 2, 4, 8 independent usmc bench pairs (bench/scaling.py)
#
# Each part runs under its own timeout and writes OUTDIR/<part>.{txt,json};
# a part that fails leaves its log and the others still run; PARTS="nginx8
# pairs" runs only those.  QUICK (any
# second argument): one short repetition of each, to try the script out.
set -u
out=${1:?usage: bench/manycore.sh OUTDIR [QUICK]}
quick=${2:-}
mkdir -p "$out"
cd "$(dirname "$0")/.." || exit 1
n=$(nproc)
h=$((n / 2))
C="0-$((h - 1))"
S="$h-$((n - 1))"
reps=3 dur=2 sreps=1 preps=3 pairs=1,2,4,8
[ -n "$quick" ] && reps=1 dur=1 preps=1 pairs=1,2
[ "$n" -lt 16 ] && pairs=1,2
rc=2,3
[ "$n" -lt 4 ] && rc=0,1
{
	uname -a
	echo "cpus $n, client $C, server $S"
	grep -m1 'model name' /proc/cpuinfo
	cat /proc/loadavg
	git log -1 --format='%H %s' 2>/dev/null | cut -c1-100
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

parts=${PARTS:-nginx8 redis sweep pairs}
part() {	# NAME SECONDS CMD...: one part under its own deadline
	name=$1 secs=$2
	shift 2
	case " $parts " in *" $name "*) ;; *) return 0 ;; esac
	t0=$(date +%s)
	timeout -k 5 "$secs" "$@" > "$out/$name.txt" 2>&1
	echo "== $name: rc $? in $(($(date +%s) - t0)) s"
	tail -n 40 "$out/$name.txt"
}

part nginx8 100 python3 bench/programs.py --workloads nginx-ka,nginx-close \
	--reps $reps --duration $dur --cpus "$C/$S" --nginx-workers 8 \
	--wrk-threads 8 --wrk-conns 400 --json "$out/nginx8.json"
part redis 100 python3 bench/programs.py --workloads redis-c200,redis-c50-P16 \
	--reps $reps --cpus $rc --json "$out/redis.json"
part sweep 140 python3 bench/redis_sweep.py --threads 1,2,4,8 --sizes 1024 \
	--conns 200 --reps $sreps --cpus "$C/$S" --out "$out/sweep"
part pairs 150 python3 bench/scaling.py --pairs $pairs --reps $preps --duration 1 \
	--json "$out/pairs.json" --md "$out/pairs.md"
