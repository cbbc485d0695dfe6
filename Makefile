# usmc: Shared Memory Communications in user space.
#
#   make            build/libusmc.so and build/usmc
#   make asan       build/asan/ (ASan+UBSan library and tests)
#   make tsan       build/tsan/ (TSan library and tests)
#   make copy       build/copy/ (library and tests over dev_copy, the test
#                   device without shared mapping: src/dev_copy.c)
#   make test-copy  the integration suite over build/copy (docs/devices.md)
#   make unit-loop  the concurrency-heavy unit programs, plain and copy, many
#                   runs at once (tests/unit_loop.py; more cores find more)
#   make test       everything, then the whole test suite
#   make conformance  real projects' test suites, plain vs usmc, on an idle
#                     machine and beside two CPU hogs (docs/conformance*.md)
#   make install PREFIX=/usr/local DESTDIR=   bin/usmc, lib/usmc/libusmc.so, man
#                     pages, bash completion, bench/plot.py, docs
#   make deb        build/usmc_VERSION_ARCH.deb (packaging/deb.sh, dpkg-deb)

CC      ?= cc
O       ?= build
CFLAGS  ?= -O2 -g
WARN    := -Wall -Wextra -Werror -Wno-unused-parameter -Wshadow -Wstrict-prototypes \
           -Wmissing-prototypes -Wformat=2 -Wno-format-nonliteral
BASE    := -std=gnu11 -D_GNU_SOURCE -pthread -fPIC $(WARN)
LIBFLAGS := -fvisibility=hidden

COMMON_SRC := src/util.c src/options.c src/controls.c src/log.c src/ifd.c src/rundir.c src/stats.c \
              src/registry.c src/route.c src/reuseport.c src/nl.c src/clc.c src/clc_ln.c src/dev.c src/dev_loopback.c \
              src/dev_copy.c src/guard.c src/real.c src/vmbudget.c
LIB_SRC := $(COMMON_SRC) src/atfork.c src/interpose.c src/interpose_io.c src/interpose_poll.c src/interpose_open.c src/interpose_stdio.c src/interpose_rlimit.c src/fdtab.c src/sock.c src/family.c src/af_usmc.c src/conn.c src/tcp.c src/exit.c src/accept.c \
           src/lgr.c src/cdc.c src/tx.c src/tx_splice.c src/tx_backing.c src/rx.c src/close.c src/wait.c src/waitset.c \
           src/poll.c src/epoll.c src/epoll_list.c src/epoll_ready.c src/epoll_tag.c src/epoll_wait.c src/epoll_kernel.c src/epoll_spin.c src/epoll_bell.c src/epoll_sleep.c src/exec.c src/spawn.c src/migrate.c src/sandbox.c \
           src/listener.c src/handover.c src/scm_send.c src/scm_recv.c src/scm_peer.c src/adopt.c src/shed.c src/stdstream.c src/clc_proof.c src/clc_bind.c src/clc_inband.c src/sigrestart.c
CLI_SRC := $(COMMON_SRC) $(wildcard cli/*.c)
HDRS    := $(wildcard src/*.h cli/*.h)

LIB_OBJ := $(patsubst src/%.c,$(O)/obj/lib/%.o,$(LIB_SRC))
CLI_OBJ := $(patsubst %.c,$(O)/obj/cli/%.o,$(CLI_SRC))

all: $(O)/libusmc.so $(O)/usmc

$(O)/obj/lib/%.o: src/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(BASE) $(LIBFLAGS) $(CFLAGS) -c -o $@ $<

$(O)/obj/cli/%.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(BASE) -iquote src $(CFLAGS) -c -o $@ $<

$(O)/libusmc.so: $(LIB_OBJ) src/libusmc.map
	$(CC) -shared -o $@ $(LIB_OBJ) -Wl,--version-script=src/libusmc.map -Wl,-z,defs \
	    $(CFLAGS) $(LDFLAGS) -pthread -ldl

$(O)/usmc: $(CLI_OBJ)
	$(CC) -o $@ $(CLI_OBJ) $(CFLAGS) $(LDFLAGS) -pthread -lm

# Sanitizer builds: same sources, separate trees.
asan:
	$(MAKE) O=build/asan CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" all tests
tsan:
	$(MAKE) O=build/tsan CFLAGS="-O1 -g -fsanitize=thread" all tests
copy:
	$(MAKE) O=build/copy CFLAGS="-O2 -g -DUSMC_TEST_DEVICES" all tests

include tests/unit/Makefile.inc
include tests/fuzz/Makefile.inc

test:
	tests/run

# Real projects' own network test suites (CPython, Tornado, Twisted), whole,
# plain and under usmc, outcomes compared; results in docs/conformance.md.
# The integration suite again over dev_copy (the test device without shared
# mapping); results in docs/devices.md.  The C programs run over it in
# tests/run (tests/test_unit.py, build "copy").
test-copy: copy
	USMC_TEST_BUILD=$(CURDIR)/build/copy USMC_T_UNSHARED=1 \
	    /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/integration

unit-loop: all tests copy
	tests/unit_loop.py

conformance: all
	tests/conformance/run.py --doc docs/conformance.md --json docs/conformance.json
	tests/conformance/run.py --hog 2 --doc docs/conformance-hog.md --json docs/conformance-hog.json

PREFIX  ?= /usr/local
DESTDIR ?=
BINDIR  := $(DESTDIR)$(PREFIX)/bin
LIBDIR  := $(DESTDIR)$(PREFIX)/lib/usmc
SHAREDIR := $(DESTDIR)$(PREFIX)/share
DOCS    := README.md docs/design.md docs/performance.md docs/reliability.md docs/containers.md

# bin/usmc finds its library in ../lib/usmc and its plot script in
# ../share/usmc (cli/run.c, cli/bench_report.c): PREFIX moves them together.
install: all
	install -d $(BINDIR) $(LIBDIR) $(SHAREDIR)/man/man1 $(SHAREDIR)/man/man7 \
	    $(SHAREDIR)/bash-completion/completions $(SHAREDIR)/usmc $(SHAREDIR)/doc/usmc
	install -m 0755 $(O)/usmc $(BINDIR)/usmc
	install -m 0644 $(O)/libusmc.so $(LIBDIR)/libusmc.so
	install -m 0644 man/usmc.1 $(SHAREDIR)/man/man1/usmc.1
	install -m 0644 man/usmc.7 $(SHAREDIR)/man/man7/usmc.7
	install -m 0644 completion/usmc.bash $(SHAREDIR)/bash-completion/completions/usmc
	install -m 0755 bench/plot.py $(SHAREDIR)/usmc/plot.py
	install -m 0644 $(DOCS) $(SHAREDIR)/doc/usmc/

uninstall:
	rm -f $(BINDIR)/usmc $(LIBDIR)/libusmc.so $(SHAREDIR)/man/man1/usmc.1 \
	    $(SHAREDIR)/man/man7/usmc.7 $(SHAREDIR)/bash-completion/completions/usmc \
	    $(SHAREDIR)/usmc/plot.py
	rm -rf $(SHAREDIR)/doc/usmc
	-rmdir $(LIBDIR) $(SHAREDIR)/usmc

deb: all
	packaging/deb.sh $(O)

clean:
	rm -rf build

# Static analysis: clang-tidy (checks in .clang-tidy) and cppcheck, both
# warning-free; tests/test_static.py runs this.
LINT_SRC := $(wildcard src/*.c cli/*.c)
lint:
	@set -e; for f in $(LINT_SRC); do \
		clang-tidy -quiet $$f -- -std=gnu11 -D_GNU_SOURCE -pthread -iquote src; done
	cppcheck --enable=warning,performance,portability --std=c11 -D_GNU_SOURCE \
		-iquote src --inline-suppr --quiet --error-exitcode=1 src/ cli/

.PHONY: all asan tsan copy test-copy unit-loop test clean tests lint conformance install uninstall deb
