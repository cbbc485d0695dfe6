#!/bin/bash
# A forking server's parent keeps every client's link group attached
# (mapping of lg-*/mem + descriptors) after the clients exited normally.
set -e
B=${B:-$(cd "$(dirname "$0")/../.." && pwd)/build}
export USMC_RUNDIR=$(mktemp -d /dev/shm/usmc-repro-XXXX)
cd "$(mktemp -d)"
cat > srv.py <<'PY'
import os, signal, socket, sys
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", int(sys.argv[1]))); ls.listen(16)
print("listening", flush=True)
while True:
    c, _ = ls.accept()
    if os.fork() == 0:
        ls.close()
        while True:
            d = c.recv(65536)
            if not d: break
            c.sendall(d)
        c.close(); os._exit(0)
    c.close()
PY
cat > cli.py <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"x" * 1000); s.shutdown(socket.SHUT_WR)
n = 0
while True:
    d = s.recv(65536)
    if not d: break
    n += len(d)
assert n == 1000
s.close()
PY
PORT=$((20000 + RANDOM % 20000))
$B/usmc run -- /usr/bin/python3 srv.py $PORT > srv.out 2>&1 &
SRV=$!
sleep 0.5
count() { echo "fds=$(ls /proc/$SRV/fd | wc -l) lg_maps=$(grep -c '/lg-' /proc/$SRV/maps)"; }
echo "before: $(count)"
for i in $(seq 1 20); do $B/usmc run -- /usr/bin/python3 cli.py $PORT; done
sleep 0.5
$B/usmc stat >/dev/null   # collect the dead
echo "after 20 clients (all exited): $(count)"
$B/usmc stat --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print("smc_client", d["smc_client"], "smc_server", d["smc_server"], "tcp_fallback", d["tcp_fallback"])'
grep '/lg-' /proc/$SRV/maps | head -3
kill -9 $SRV; rm -rf "$USMC_RUNDIR"
