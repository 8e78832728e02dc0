# rdmacm-rs: `make` builds build/lib/librdmacm.so.1; `make test` runs every check.
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
CARGO_FLAGS := $(if $(filter release,$(PROFILE)),--release,)
STATICLIB   := target/$(PROFILE)/librdmacm.a
LIBDIR_OUT  := build/lib
NATIVE_LIBS := -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc

PREFIX      ?= /usr/local
LIBDIR      ?= $(PREFIX)/lib
INCLUDEDIR  ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
DESTDIR     ?=

.PHONY: all lib staticlib test test-rust test-abi test-c check-map install uninstall clean demo

all: lib

staticlib:
	$(CARGO) build $(CARGO_FLAGS) -p rdmacm

lib: staticlib librdmacm.map
	mkdir -p $(LIBDIR_OUT)
	$(CC) -shared -o $(LIBDIR_OUT)/$(REALNAME) \
	  -Wl,--whole-archive $(STATICLIB) -Wl,--no-whole-archive \
	  -Wl,--version-script=librdmacm.map -Wl,-soname,$(SONAME) \
	  -Wl,--gc-sections -Wl,-z,relro,-z,now -Wl,--as-needed -s \
	  -libverbs $(NATIVE_LIBS)
	ln -sf $(REALNAME) $(LIBDIR_OUT)/$(SONAME)
	ln -sf $(SONAME) $(LIBDIR_OUT)/librdmacm.so
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	  -e 's|@VERSION@|$(VERSION)|' librdmacm.pc.in > $(LIBDIR_OUT)/librdmacm.pc

# The map is generated from the symbol lists; fail if someone edited one but not the other.
check-map:
	tools/gen-map.sh && git diff --exit-code -- librdmacm.map

test: lib test-rust test-abi test-c

test-rust:
	$(CARGO) test --workspace

test-abi: lib
	bash abi-tests/symbols.sh
	bash abi-tests/layout.sh
	bash abi-tests/consumers.sh $(LIBDIR_OUT)
	bash abi-tests/install.sh

test-c: lib
	bash c-examples/run.sh

install: lib
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR)/rdma $(DESTDIR)$(PKGCONFIGDIR)
	install -m 0755 $(LIBDIR_OUT)/$(REALNAME) $(DESTDIR)$(LIBDIR)/$(REALNAME)
	ln -sf $(REALNAME) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/librdmacm.so
	install -m 0644 include/rdma/rdma_cma.h include/rdma/rdma_verbs.h include/rdma/rsocket.h \
	  $(DESTDIR)$(INCLUDEDIR)/rdma/
	install -m 0644 $(LIBDIR_OUT)/librdmacm.pc $(DESTDIR)$(PKGCONFIGDIR)/librdmacm.pc

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/$(REALNAME) $(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/librdmacm.so
	rm -f $(DESTDIR)$(INCLUDEDIR)/rdma/rdma_cma.h $(DESTDIR)$(INCLUDEDIR)/rdma/rdma_verbs.h \
	  $(DESTDIR)$(INCLUDEDIR)/rdma/rsocket.h
	-rmdir $(DESTDIR)$(INCLUDEDIR)/rdma 2>/dev/null
	rm -f $(DESTDIR)$(PKGCONFIGDIR)/librdmacm.pc

demo:
	@echo "make demo runs Debian's rping over the soft fabric once issue 4 (softverbs) lands;"
	@echo "today there is no software device yet, so rping reports that no RDMA device exists:"
	-LD_LIBRARY_PATH=$(LIBDIR_OUT) timeout 10 rping -c -a 127.0.0.1 -C 1

clean:
	$(CARGO) clean
	rm -rf build
