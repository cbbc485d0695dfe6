"""A hostile neighbour of usmc processes (run as the same or another user).

    hostile_attacker.py OP ARGS...

  truncate PATH [SIZE]        shrink a shared file under its users (SIGBUS bait)
  fifo PATH                   replace PATH (if any) by a FIFO, mode 0666
  symlink PATH TARGET         replace PATH (if any) by a symlink to TARGET
  fill DIR                    write DIR/fill-PID until the file system is full
  plant FROM TO               copy a file (a valid object of ours), mode 0666
  lgfifo RUNDIR ID            lg-ID/ holding a FIFO named mem
  forge-entries INDEX PORT ID the 4 CLC entries of client port PORT: proposals
                              of a foreign 4-tuple from link group ID
  forge-announce INDEX N      N "client inside connect()" announcements with
                              link group 0 in a listener's index header

Offsets follow src/clc.h (struct usmc_clc_index, struct usmc_clc_entry).
Prints "done" and exits 0; any failure is an exception (exit 1).
"""
import os
import struct
import sys

CLC_CONNECTING = 64
CONNECTING_OFF = 40                              # after magic..epoch
CONNECTING_LGR_OFF = CONNECTING_OFF + 8 * CLC_CONNECTING
CONNECTING_PORT_OFF = CONNECTING_LGR_OFF + 8 * CLC_CONNECTING
ENTRY_BASE, ENTRY_SIZE, WAYS = 4096, 64, 4
CLC_PROPOSED = 2
FOREIGN_HASH = 0x5a5a5b                          # odd, 24 bits: like usmc_clc_tuple_hash()


def replace(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def pwrite(path, off, data):
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
    try:
        os.pwrite(fd, data, off)
    finally:
        os.close(fd)


def main(op, *a):
    if op == "truncate":
        os.truncate(a[0], int(a[1]) if len(a) > 1 else 0)
    elif op == "fifo":
        replace(a[0])
        os.mkfifo(a[0], 0o666)
        os.chmod(a[0], 0o666)
    elif op == "symlink":
        replace(a[0])
        os.symlink(a[1], a[0])
    elif op == "fill":
        path = os.path.join(a[0], "fill-%d" % os.getpid())
        with open(path, "wb") as f:
            block = b"\xa5" * (1 << 20)
            try:
                while True:
                    f.write(block)
                    f.flush()
            except OSError:
                pass
        # Whatever a page is left: fill it byte-wise.
        with open(path, "ab", buffering=0) as f:
            try:
                while True:
                    f.write(b"\xa5" * 4096)
            except OSError:
                pass
        os.chmod(path, 0o644)
    elif op == "plant":
        data = open(a[0], "rb").read()
        replace(a[1])
        with open(a[1], "wb") as f:
            f.write(data)
        os.chmod(a[1], 0o666)
    elif op == "lgfifo":
        d = os.path.join(a[0], "lg-%016x" % int(a[1], 0))
        os.mkdir(d, 0o755)
        os.mkfifo(os.path.join(d, "mem"), 0o666)
    elif op == "forge-entries":
        port, lgr = int(a[1]), int(a[2], 0)
        for way in range(WAYS):
            e = struct.pack("<QQIII4s", (FOREIGN_HASH << 8) | CLC_PROPOSED, lgr, 0, 1, 7,
                            b"\x01\0\0\0")
            pwrite(a[0], ENTRY_BASE + (port * WAYS + way) * ENTRY_SIZE, e)
    elif op == "forge-announce":
        for i in range(int(a[1])):
            pwrite(a[0], CONNECTING_LGR_OFF + 8 * i, struct.pack("<Q", 0))
            pwrite(a[0], CONNECTING_PORT_OFF + 4 * i, struct.pack("<I", 0))
            pwrite(a[0], CONNECTING_OFF + 8 * i, struct.pack("<Q", (0x7777 << 32) | (i << 2) | 2))
    else:
        raise SystemExit("unknown op %s" % op)
    print("done", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
