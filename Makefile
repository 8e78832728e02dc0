# rdmacm-rs: `make` builds build/lib/librdmacm.so.1; `make test` runs every check:
# `make check` (no VM; run it on every change) and `make check-vm` (the qemu suites).
# Both end with a table of the time each target took (tools/timed-make.sh).
#
# The library is linked here, not by cargo: cargo builds a staticlib and we
# link it with our own version script, which is the one recipe that yields
# real `name@@RDMACM_1.x` versions from rustc output (see README, "Symbols").

SONAME      := librdmacm.so.1
VERSION     := 1.5.0
REALNAME    := librdmacm.so.$(VERSION)
CARGO       ?= cargo
CC          ?= cc
PROFILE     ?= release
# TARGET_DIR, LIBDIR_OUT and LINK_STRIP let tools/build-symbols.sh build the same
# libraries unstripped, elsewhere.
TARGET_DIR  ?= target
CARGO_FLAGS := $(if $(filter release,$(PROFILE)),--release,) --target-dir $(TARGET_DIR)
STATICLIB   := $(TARGET_DIR)/$(PROFILE)/librdmacm.a
LIBDIR_OUT  ?= build/lib
LINK_STRIP  ?= -s
NATIVE_LIBS := -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc

# make check/check-vm/test build once, then run the suites with BUILT=1, so that
# no suite relinks a library while a suite in the other lane is loading it.
BUILT       ?=
BUILD_DEP    = $(if $(BUILT),,all)

PREFIX      ?= /usr/local
LIBDIR      ?= $(PREFIX)/lib
INCLUDEDIR  ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
BINDIR      ?= $(PREFIX)/bin
SOFTLIBDIR  ?= $(LIBDIR)/rdmacm-rs/soft
DESTDIR     ?=

.PHONY: bench all lib staticlib test check check-vm test-rust test-abi test-c test-stacks test-ucx test-libfabric check-map install uninstall clean demo

all: lib softverbs

staticlib:
	$(CARGO) build $(CARGO_FLAGS) -p rdmacm

# Outputs are written beside and renamed into place: a program another suite is
# starting (abi-tests/install.sh relinks while make check's other lane runs)
# sees the old file or the new one, never a half-written one.
lib: staticlib librdmacm.map
	mkdir -p $(LIBDIR_OUT)
	$(CC) -shared -o $(LIBDIR_OUT)/$(REALNAME).tmp \
	  -Wl,--whole-archive $(STATICLIB) -Wl,--no-whole-archive \
	  -Wl,--version-script=librdmacm.map -Wl,-soname,$(SONAME) \
	  -Wl,--gc-sections -Wl,-z,relro,-z,now -Wl,--as-needed $(LINK_STRIP) \
	  -libverbs $(NATIVE_LIBS)
	mv -f $(LIBDIR_OUT)/$(REALNAME).tmp $(LIBDIR_OUT)/$(REALNAME)
	ln -sf $(REALNAME) $(LIBDIR_OUT)/$(SONAME)
	ln -sf $(SONAME) $(LIBDIR_OUT)/librdmacm.so
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	  -e 's|@VERSION@|$(VERSION)|' librdmacm.pc.in > $(LIBDIR_OUT)/librdmacm.pc.tmp
	mv -f $(LIBDIR_OUT)/librdmacm.pc.tmp $(LIBDIR_OUT)/librdmacm.pc
	mkdir -p build/bin
	sed -e 's|@LIBDIR@|../lib|' -e 's|@SOFTDIR@|../lib/soft|' tools/rdmacm-soft.in > build/bin/rdmacm-soft.tmp
	chmod +x build/bin/rdmacm-soft.tmp
	mv -f build/bin/rdmacm-soft.tmp build/bin/rdmacm-soft

# The map is generated from the symbol lists; fail if someone edited one but not the other.
check-map:
	tools/gen-map.sh && git diff --exit-code -- librdmacm.map

# make check runs two lanes side by side (tools/timed-make.sh's `//`): much of
# each suite waits on its own peers, and the lanes keep to their own ports.
CHECK_TARGETS    := test-rust test-abi test-c test-softverbs test-rsocket-shm-off test-ucx // test-soft test-rsocket
CHECK_VM_TARGETS := test-vm test-vm-siw test-vm-roce
# Runs after the lanes, alone: Debian's programs whose pass depends on the machine not
# being loaded beyond what the test itself adds (tests/rsocket/run.sh, "alone"), and
# libfabric, whose rxm can crash at teardown when starved of CPU (docs/compatibility.md);
# then softverbs' limits, a minute of system calls that would load the lanes.
CHECK_ALONE      := test-rsocket-alone test-libfabric test-softverbs-limits

check: all
	@rc=0; BUILT=1 tools/timed-make.sh $(CHECK_TARGETS) || rc=1; \
	BUILT=1 tools/timed-make.sh $(CHECK_ALONE) || rc=1; exit $$rc

check-vm: all
	BUILT=1 tools/timed-make.sh $(CHECK_VM_TARGETS)

# Both tiers, even when the first fails; both tables again at the end.
test: all
	@mkdir -p build/timed; rm -f build/timed/test.table; rc=0; \
	BUILT=1 TIMED_MAKE_LOG=build/timed/test.table tools/timed-make.sh $(CHECK_TARGETS) || rc=1; \
	BUILT=1 TIMED_MAKE_LOG=build/timed/test.table tools/timed-make.sh $(CHECK_ALONE) || rc=1; \
	BUILT=1 TIMED_MAKE_LOG=build/timed/test.table tools/timed-make.sh $(CHECK_VM_TARGETS) || rc=1; \
	echo "=== make test: make check, then make check-vm"; cat build/timed/test.table; exit $$rc

test-rust:
	$(CARGO) test --workspace

test-abi: $(BUILD_DEP)
	bash abi-tests/symbols.sh
	bash abi-tests/layout.sh
	bash abi-tests/consumers.sh $(LIBDIR_OUT)
	bash abi-tests/install.sh
	python3 tools/gen-status.py --check

test-c: $(BUILD_DEP)
	bash c-examples/run.sh

# Debian's programs and our device-level c-examples on the soft fabric, also with the
# same-host shared-memory paths off. dev_unreachable runs in netns.sh; dev_af_ib needs
# AF_IB, which the soft fabric (IP only) lacks.
SOFT_DEV = $$(cd c-examples && ls dev_*.c | sed 's/\.c$$//' | grep -v '^dev_unreachable$$\|^dev_af_ib$$')
test-soft: $(BUILD_DEP)
	bash tests/soft/run.sh
	SOFT=1 VALGRIND=0 bash c-examples/run.sh
	bash c-examples/run-device.sh --lib $(LIBDIR_OUT) --launcher build/bin/rdmacm-soft --expect soft,rxe 127.0.0.1 $(SOFT_DEV)
	bash tests/soft/netns.sh
	SOFT_WIRE=roce bash tests/soft/run.sh
	SOFT_WIRE=roce-lo bash tests/soft/run.sh
	bash tests/soft/local.sh
	bash tests/soft/faults.sh
	tests/pyverbs/prepare.sh
	tests/pyverbs/run.sh --lib $(LIBDIR_OUT) --launcher build/bin/rdmacm-soft lo
	@echo "--- the same with the same-host shared-memory paths off (SOFTVERBS_SHM=0)"
	SOFTVERBS_SHM=0 bash tests/soft/run.sh
	SOFTVERBS_SHM=0 SOFT=1 VALGRIND=0 bash c-examples/run.sh
	SOFTVERBS_SHM=0 bash c-examples/run-device.sh --lib $(LIBDIR_OUT) --launcher build/bin/rdmacm-soft --expect soft,rxe 127.0.0.1 $(SOFT_DEV)
	SOFTVERBS_SHM=0 tests/pyverbs/run.sh --lib $(LIBDIR_OUT) --launcher build/bin/rdmacm-soft --label " (ours, SOFTVERBS_SHM=0)" lo

# UCX (Debian's ucx-utils) on the soft fabric: rc_verbs and ud_verbs, on 127.0.0.1 and
# between two network namespaces; libfabric's verbs provider (libfabric-bin): fi_pingpong
# msg and rdm on 127.0.0.1.
test-stacks: test-ucx test-libfabric
test-ucx: $(BUILD_DEP)
	bash tests/soft/ucx.sh
test-libfabric: $(BUILD_DEP)
	bash tests/soft/libfabric.sh

install: lib softverbs
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR)/rdma $(DESTDIR)$(PKGCONFIGDIR)
	install -m 0755 $(LIBDIR_OUT)/$(REALNAME) $(DESTDIR)$(LIBDIR)/$(REALNAME)
	ln -sf $(REALNAME) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/librdmacm.so
	install -m 0644 include/rdma/rdma_cma.h include/rdma/rdma_verbs.h include/rdma/rsocket.h \
	  $(DESTDIR)$(INCLUDEDIR)/rdma/
	install -m 0644 $(LIBDIR_OUT)/librdmacm.pc $(DESTDIR)$(PKGCONFIGDIR)/librdmacm.pc
	install -d $(DESTDIR)$(BINDIR)
	sed -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@SOFTDIR@|$(SOFTLIBDIR)|' tools/rdmacm-soft.in > $(DESTDIR)$(BINDIR)/rdmacm-soft
	chmod 0755 $(DESTDIR)$(BINDIR)/rdmacm-soft
	if [ -e build/lib/soft/libibverbs.so.1 ]; then \
	  install -d $(DESTDIR)$(SOFTLIBDIR) && \
	  install -m 0755 build/lib/soft/libibverbs.so.1.* $(DESTDIR)$(SOFTLIBDIR)/ && \
	  ln -sf $$(basename build/lib/soft/libibverbs.so.1.*) $(DESTDIR)$(SOFTLIBDIR)/libibverbs.so.1 && \
	  install -m 0755 build/lib/soft/libsoftverbs-devnode.so $(DESTDIR)$(SOFTLIBDIR)/; fi

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/$(REALNAME) $(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/librdmacm.so
	rm -f $(DESTDIR)$(INCLUDEDIR)/rdma/rdma_cma.h $(DESTDIR)$(INCLUDEDIR)/rdma/rdma_verbs.h \
	  $(DESTDIR)$(INCLUDEDIR)/rdma/rsocket.h
	-rmdir $(DESTDIR)$(INCLUDEDIR)/rdma 2>/dev/null
	rm -f $(DESTDIR)$(PKGCONFIGDIR)/librdmacm.pc $(DESTDIR)$(BINDIR)/rdmacm-soft
	rm -rf $(DESTDIR)$(SOFTLIBDIR)
	-rmdir $(DESTDIR)$(LIBDIR)/rdmacm-rs 2>/dev/null

# Debian's rping, unmodified, over the soft fabric on 127.0.0.1.
demo: all
	@echo "== rping server and client over the soft RDMA fabric (127.0.0.1) =="
	build/bin/rdmacm-soft timeout 30 rping -s -a 127.0.0.1 -v -C 10 & \
	sleep 0.5; build/bin/rdmacm-soft timeout 30 rping -c -a 127.0.0.1 -v -C 10; c=$$?; wait $$!; s=$$?; \
	echo "client exit $$c, server exit $$s"; [ $$c -eq 0 ] && [ $$s -eq 0 ]

clean:
	$(CARGO) clean
	rm -rf build
include tests/vm/vm.mk
include softverbs/softverbs.mk

# Benchmarks: ratios against the physical floor of the same host (never asserted).
bench: all
	bash tests/bench/soft.sh
	bash tests/rsocket/bench.sh
include tests/rsocket/rsocket.mk
