# Real-kernel RDMA tests in a qemu guest (Debian's kernel, soft-RoCE rxe0);
# included from the root Makefile.  See tests/vm/README.md.
#
#   make test-vm                   one boot: rdmacm-utils (Debian's, ours, mixed), dev_* (Debian's + ours),
#                                  c-examples, pyverbs, rsockets against Debian's (beside the rest)
#   make test-vm VM_OURS_MUST_PASS=0   our library's failures reported as expected failures
#   make test-vm-siw               the same on SoftiWARP (siw0; rdmacm-utils without UD)
#   make test-vm-all               both (= make check-vm)
#   make test-vm VM_SECTIONS=...   a subset (test-vm-rsocket: VM_SECTIONS=rsocket)
#   make vm-expected [VM_RDMA=siw] refresh c-examples/expected/dev_*.rxe.txt (.siw.txt) from Debian's library
#   make vm-shell CMD='...'        run any command in the guest
#   make bench-vm                  Debian's library vs ours: cmtime and rping timings (one boot; not in make test)
#   make profile-vm                per cmtime step, instructions run and first run (callgrind; not in make test)
#   make profile-vm-first          the first CM event's calls timed, Debian's vs ours (not in make test)
#   make test-vm-roce              RoCEv2 on the wire: softverbs on the host against rxe in a live guest
#                                  on a tap in a private netns (roce-net.sh; root; part of make check-vm)

VM_DIR            := tests/vm
VM_RUN            := $(VM_DIR)/run-in-guest.sh
# One boot runs every section; under TCG on a busy 2-core host that can pass
# 10 minutes (about 6.5 on a quiet one), so the guest gets 25.
export QRXE_TIMEOUT ?= 1500
VM_RESULTS        ?= $(CURDIR)/build/vm-results
# 1: every check of ours must pass;
# 0: our library's failures are reported as expected failures.
VM_OURS_MUST_PASS ?= 1
VM_SECTIONS       ?= utils utils-ours utils-interop dev-debian dev-ours c-examples pyverbs rsocket
VM_VALGRIND       ?= 0
# siw (iWARP): no UD, so udaddy/mckey fail there, and must fail exactly as with
# Debian's library (same-failure); dev_* compared with the .siw.txt files;
# c-examples too (events the library queues ring a doorbell that iWARP resolves
# differently: src/kernel/bell.rs)
VM_SIW_SECTIONS   ?= utils utils-ours same-failure dev-debian dev-ours c-examples rsocket
vm_space          := $() $()

.PHONY: test-vm test-vm-siw test-vm-all vm-build vm-expected vm-shell vm-deps bench-vm

test-vm-all: test-vm test-vm-siw

vm-deps:
	$(VM_DIR)/install-deps.sh

# Build on the host (fast) what the guest runs (TCG is slow to compile).
vm-build: $(BUILD_DEP)
	tests/pyverbs/prepare.sh
	c-examples/run-device.sh --system --build-only
	c-examples/run-device.sh --lib $(LIBDIR_OUT) --build-only
	BUILD_ONLY=1 VALGRIND=0 bash c-examples/run.sh
	bash tests/rsocket/build.sh

test-vm: vm-build
	@rm -rf $(VM_RESULTS)/rxe; mkdir -p $(VM_RESULTS)/rxe
	QRXE_OUTDIR=$(VM_RESULTS)/rxe \
	QRXE_ENV="VM_RESULTS=$(VM_RESULTS)/rxe VM_OURS_MUST_PASS=$(VM_OURS_MUST_PASS) VM_VALGRIND=$(VM_VALGRIND) VM_EXPECT=rxe VM_SECTIONS=$(subst $(vm_space),+,$(strip $(VM_SECTIONS)))" \
	  $(VM_RUN) 'export VM_SECTIONS=$${VM_SECTIONS//+/ }; bash $(CURDIR)/$(VM_DIR)/suite.sh'

test-vm-siw: vm-build
	@rm -rf $(VM_RESULTS)/siw; mkdir -p $(VM_RESULTS)/siw
	QRXE_RDMA=siw QRXE_OUTDIR=$(VM_RESULTS)/siw \
	QRXE_ENV="VM_RESULTS=$(VM_RESULTS)/siw VM_OURS_MUST_PASS=$(VM_OURS_MUST_PASS) VM_EXPECT=siw VM_SECTIONS=$(subst $(vm_space),+,$(strip $(VM_SIW_SECTIONS))) VM_UTILS_TESTS=rping+ucmatose+ucmatose-ib+cmtime+rdma_server" \
	  $(VM_RUN) 'export VM_SECTIONS=$${VM_SECTIONS//+/ } VM_UTILS_TESTS=$${VM_UTILS_TESTS//+/ }; bash $(CURDIR)/$(VM_DIR)/suite.sh'

# Debian's library is the oracle: store its stdout as the expected files
# (VM_RDMA=rxe -> dev_*.rxe.txt, VM_RDMA=siw -> dev_*.siw.txt).
VM_RDMA ?= rxe
vm-expected: vm-build
	@rm -rf $(VM_RESULTS)/expected-$(VM_RDMA); mkdir -p $(VM_RESULTS)/expected-$(VM_RDMA)
	QRXE_RDMA=$(VM_RDMA) QRXE_OUTDIR=$(VM_RESULTS)/expected-$(VM_RDMA) \
	  $(VM_RUN) 'cd $(CURDIR) && c-examples/run-device.sh --system --no-build $$QRXE_IP && for f in build/dev-examples/system/dev_*.out; do grep -q "^skip:" $$f || cp $$f $(VM_RESULTS)/expected-$(VM_RDMA)/; done'
	for f in $(VM_RESULTS)/expected-$(VM_RDMA)/dev_*.out; do b=$$(basename $$f .out); cp $$f c-examples/expected/$$b.$(VM_RDMA).txt; done
	@ls -l c-examples/expected/

vm-shell:
	$(VM_RUN) '$(CMD)'

# Debian's programs on the guest's rxe0 against the same programs on softverbs on the host,
# over a tap in the namespace roce-net.sh makes (boots its own guest).
.PHONY: test-vm-roce
test-vm-roce: $(BUILD_DEP)
	@rm -rf $(VM_RESULTS)/roce; mkdir -p $(VM_RESULTS)/roce
	ROCE_RESULTS=$(VM_RESULTS)/roce bash $(VM_DIR)/roce-interop.sh

# Debian's library against ours on rxe, alternating (C, ours, C, ours, ...):
# cmtime step totals and rping's wall time, ratio table on stdout and in
# $(VM_RESULTS)/bench/bench.log.  Timings are reported, never asserted: the
# target fails only if a program fails.  ~2.5 min in the guest under TCG (5 rounds).
# BENCH_NOASLR=1: every program under `setarch -R` (see bench.sh: TCG re-translation).
# BENCH_BASE=DIR: that librdmacm plays "C" (an A/B of two builds of ours).
BENCH_ROUNDS ?= 5
BENCH_BASE ?=
BENCH_NOASLR ?= 0
BENCH_VM_TIMEOUT ?= 1200
bench-vm: lib
	@rm -rf $(VM_RESULTS)/bench; mkdir -p $(VM_RESULTS)/bench
	QRXE_TIMEOUT=$(BENCH_VM_TIMEOUT) QRXE_OUTDIR=$(VM_RESULTS)/bench \
	QRXE_ENV="BENCH_RESULTS=$(VM_RESULTS)/bench BENCH_ROUNDS=$(BENCH_ROUNDS) BENCH_NOASLR=$(BENCH_NOASLR) BENCH_BASE=$(if $(BENCH_BASE),$(abspath $(BENCH_BASE)))" \
	  $(VM_RUN) 'bash $(CURDIR)/$(VM_DIR)/bench.sh'

# Deterministic step costs (callgrind in the guest, Debian's library and ours):
# per cmtime-shaped step, the instructions run and those run for the first
# time in the process (what TCG translates). Not in make test.
PROFILE_VM_TIMEOUT ?= 900
.PHONY: profile-vm
profile-vm: lib
	@mkdir -p build/profile $(VM_RESULTS)/profile
	$(CC) -O2 -Wall -pthread -Iinclude -o build/profile/cmsteps tests/vm/profile/cmsteps.c -Lbuild/lib -lrdmacm
	QRXE_TIMEOUT=$(PROFILE_VM_TIMEOUT) QRXE_OUTDIR=$(VM_RESULTS)/profile \
	QRXE_ENV="PROFILE_RESULTS=$(VM_RESULTS)/profile PROFILE_LIB=$(if $(PROFILE_LIB),$(abspath $(PROFILE_LIB)))" \
	  $(VM_RUN) 'bash $(CURDIR)/tests/vm/profile/profile.sh'

# What a process's first CM event costs in each library (resolve, get, ack of
# the first and the second id, timed from outside): cmtime's resolve addr
# step pays these once. Not in make test.
.PHONY: profile-vm-first
profile-vm-first: lib
	@mkdir -p build/profile $(VM_RESULTS)/first
	$(CC) -O2 -Wall -Iinclude -o build/profile/firstevent tests/vm/profile/firstevent.c -Lbuild/lib -lrdmacm
	QRXE_OUTDIR=$(VM_RESULTS)/first QRXE_ENV="PROFILE_RESULTS=$(VM_RESULTS)/first ROUNDS=$(BENCH_ROUNDS)" \
	  $(VM_RUN) 'bash $(CURDIR)/tests/vm/profile/firstevent.sh'
