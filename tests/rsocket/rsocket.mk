# rsockets, included by the root Makefile: the preload library
# build/lib/librspreload.so (crate rspreload/, a cdylib with unversioned libc
# overrides, no SONAME, like upstream's), its install into $(LIBDIR)/rsocket,
# and `make test-rsocket` (tests/rsocket/run.sh, ends with "N passed, M failed").

RSP_LIB := $(LIBDIR_OUT)/librspreload.so
RSP_DIR := $(LIBDIR)/rsocket

.PHONY: rspreload test-rsocket test-rsocket-shm-off test-vm-rsocket test-vm-rsocket-siw bench-vm-rsocket profile-vm-rsocket install-rspreload uninstall-rspreload

all: rspreload

rspreload:
	$(CARGO) build $(CARGO_FLAGS) -p rspreload
	mkdir -p $(LIBDIR_OUT)
	install -m 0755 $(TARGET_DIR)/$(PROFILE)/librspreload.so $(RSP_LIB).tmp
	mv -f $(RSP_LIB).tmp $(RSP_LIB)

test-rsocket: $(BUILD_DEP)
	bash tests/rsocket/run.sh

# The same suite without valgrind and with softverbs' same-host shared-memory paths off
# (make check's other lane; its own logs and ports).
test-rsocket-shm-off: $(BUILD_DEP)
	SOFTVERBS_SHM=0 VALGRIND=0 RS_OUT=build/rsocket-tests-shm0 RS_TEST_PORT=32000 bash tests/rsocket/run.sh

# Debian's riostream and udpong with their default arguments, quiet and under two busy
# loops: their pass needs a machine not loaded by another suite (udpong resends after
# 1 ms and never recovers from duplicates; riostream's receiver spins), so make check
# runs this after its two lanes, alone.
test-rsocket-alone: $(BUILD_DEP)
	bash tests/rsocket/run.sh riostream-default udpong-default

# Over rxe in the qemu guest of tests/vm: Debian's rstream/riostream/udpong/rcopy
# and the preload library with ours, Debian's, and mixed (the wire format); our
# C checks over rxe. The `rsocket` section of `make test-vm` (which runs it beside
# the other sections); these targets boot for it alone. On siw: iWARP's message
# mode (RS_OPT_MSG_SEND) against Debian's; datagram rsockets fail there with both
# libraries (no UD QPs).
test-vm-rsocket:
	$(MAKE) --no-print-directory test-vm VM_SECTIONS=rsocket

test-vm-rsocket-siw:
	$(MAKE) --no-print-directory test-vm-siw VM_SIW_SECTIONS=rsocket

# rstream with Debian's rsockets vs ours on rxe in the qemu guest (ratios, never asserted).
RS_BENCH_ROUNDS ?= 5
RS_PIN ?= 1
bench-vm-rsocket: all
	@mkdir -p $(VM_RESULTS)/rsocket-bench
	QRXE_OUTDIR=$(VM_RESULTS)/rsocket-bench QRXE_ENV="RS_PIN=$(RS_PIN) RS_VM_OUT=$(VM_RESULTS)/rsocket-bench ROUNDS=$(RS_BENCH_ROUNDS) RS_TESTS=$(RS_TESTS) RS_BASE=$(if $(RS_BENCH_BASE),$(abspath $(RS_BENCH_BASE)))" \
	  $(VM_RUN) 'bash $(CURDIR)/tests/rsocket/bench-vm.sh'

# Instructions per 64-byte ping-pong round trip in the client, Debian's rsockets vs
# ours (callgrind in the guest; deterministic where the timings swing). Not in make test.
profile-vm-rsocket: all
	@mkdir -p $(VM_RESULTS)/rsocket-profile
	QRXE_OUTDIR=$(VM_RESULTS)/rsocket-profile QRXE_ENV="PROFILE_RESULTS=$(VM_RESULTS)/rsocket-profile PROFILE_LIB=$(if $(PROFILE_LIB),$(abspath $(PROFILE_LIB)))" \
	  $(VM_RUN) 'bash $(CURDIR)/tests/rsocket/profile-vm.sh'

install: install-rspreload
uninstall: uninstall-rspreload

# Upstream installs it off the default search path, with two compat names.
install-rspreload: rspreload
	install -d $(DESTDIR)$(RSP_DIR)
	install -m 0755 $(RSP_LIB) $(DESTDIR)$(RSP_DIR)/librspreload.so
	ln -sf librspreload.so $(DESTDIR)$(RSP_DIR)/librspreload.so.1
	ln -sf librspreload.so $(DESTDIR)$(RSP_DIR)/librspreload.so.1.0.0

uninstall-rspreload:
	rm -f $(DESTDIR)$(RSP_DIR)/librspreload.so $(DESTDIR)$(RSP_DIR)/librspreload.so.1 \
	  $(DESTDIR)$(RSP_DIR)/librspreload.so.1.0.0
	-rmdir $(DESTDIR)$(RSP_DIR) 2>/dev/null
