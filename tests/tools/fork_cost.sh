#!/bin/bash
# tests/tools/fork_cost.sh [N] [USMC_BUILD...]: the cost of fork + _exit +
# waitpid in a process holding a listener, plain and under each usmc build
# given (default: build/), one after the other.  A fork-per-connection
# server pays this once per connection.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
n=${1:-2000}
shift || true
builds=("$@")
[ ${#builds[@]} -eq 0 ] && builds=("$root/build")
d=$(mktemp -d /tmp/fork-cost-XXXXXX)
trap 'rm -rf "$d"' EXIT
cat > "$d/fb.c" <<'C'
#define _GNU_SOURCE
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001) };
	int n = atoi(argv[1]), l = socket(AF_INET, SOCK_STREAM, 0), i, st;
	struct timespec t0, t1;

	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 4))
		return 1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (i = 0; i < n; i++) {
		pid_t p = fork();

		if (p == 0)
			_exit(0);
		waitpid(p, &st, 0);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("%.1f\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / n / 1000.0);
	return 0;
}
C
cc -O2 -o "$d/fb" "$d/fb.c" || exit 1
echo "plain: $("$d/fb" "$n") us per fork+exit+wait"
for b in "${builds[@]}"; do
	rd=$(mktemp -d /dev/shm/fork-cost-XXXXXX)
	echo "usmc ($b): $(USMC_RUNDIR=$rd timeout 300 "$b/usmc" run -- "$d/fb" "$n") us"
	rm -rf "$rd"
done
