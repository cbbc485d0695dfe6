#!/bin/bash
# tests/tools/busybox_wrk.sh [ROUNDS] [USMC_BUILD...]: busybox httpd (a
# fork per connection, the socket dup2'ed onto stdin/stdout) serving a
# 100 KB file to wrk -t1 -c1 -d3s: requests/s plain and under each usmc
# build given (default: build/), side by side in each round.  Needs
# busybox and wrk.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
rounds=${1:-3}
shift || true
builds=("$@")
[ ${#builds[@]} -eq 0 ] && builds=("$root/build")
www=$(mktemp -d /tmp/busybox-wrk-XXXXXX)
trap 'rm -rf "$www"' EXIT
head -c 100000 /dev/urandom > "$www/f.bin"
one() {	# one PREFIX...: requests/s
	local rd p sp r
	rd=$(mktemp -d /dev/shm/busybox-wrk-XXXXXX)
	p=$((20000 + RANDOM % 20000))
	USMC_RUNDIR=$rd "$@" busybox httpd -f -p 127.0.0.1:$p -h "$www" & sp=$!
	for _ in $(seq 100); do ss -ltn | grep -q ":$p " && break; sleep 0.05; done
	r=$(USMC_RUNDIR=$rd timeout 30 "$@" wrk -t1 -c1 -d3s "http://127.0.0.1:$p/f.bin" |
	    awk '/Requests\/sec/ {print $2}')
	kill $sp; wait $sp 2>/dev/null
	rm -rf "$rd"
	echo "${r:-failed}"
}
for i in $(seq "$rounds"); do
	line="round $i: plain $(one env)"
	for b in "${builds[@]}"; do
		line="$line, $b $(one "$b/usmc" run --)"
	done
	echo "$line"
done
