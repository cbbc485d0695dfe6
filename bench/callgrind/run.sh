#!/bin/sh
# Instructions per 14 B ping-pong round trip in libusmc, counted exactly by
# callgrind on the server side (both ends preloaded; the client runs
# natively).  Two runs of N and 2N round trips; their difference divided by
# N leaves out start-up and the handshake.
#
#   bench/callgrind/run.sh [N]      (default 20000; needs valgrind)
set -e
cd "$(dirname "$0")/../.."
n=${1:-20000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -o "$tmp/pp" bench/callgrind/pp.c
mkdir -p "$tmp/run"
port=$((20000 + $$ % 20000))
total() {
	USMC_RUNDIR="$tmp/run" LD_PRELOAD="$PWD/build/libusmc.so" timeout 300 \
		valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$1" \
		"$tmp/pp" s "$port" "$1" 2>"$tmp/vg.$1" &
	srv=$!
	sleep 3
	USMC_RUNDIR="$tmp/run" LD_PRELOAD="$PWD/build/libusmc.so" timeout 120 "$tmp/pp" c "$port" "$1"
	wait "$srv"
	sed -n 's/.*I *refs: *//p' "$tmp/vg.$1" | tr -d ,
	port=$((port + 1))
}
a=$(total "$n")
b=$(total $((2 * n)))
echo "instructions per round trip (server: one recv, one send): $(( (b - a) / n ))"
