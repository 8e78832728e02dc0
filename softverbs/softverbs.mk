# softverbs: our software RDMA device as its own libibverbs.so.1 (included by the root
# Makefile). `make softverbs` leaves build/lib/soft/libibverbs.so.1 -> libibverbs.so.1.14.0;
# `make test-softverbs` runs every softverbs check and ends with "N passed, M failed".

SV_DIR       := softverbs
SV_OUT       := $(LIBDIR_OUT)/soft
SV_SONAME    := libibverbs.so.1
SV_REALNAME  := libibverbs.so.1.14.0
SV_STATICLIB := $(TARGET_DIR)/$(PROFILE)/libsoftverbs.a

.PHONY: softverbs softverbs-staticlib softverbs-devnode test-softverbs test-softverbs-limits

softverbs-staticlib:
	$(CARGO) build $(CARGO_FLAGS) -p softverbs

softverbs: softverbs-staticlib $(SV_DIR)/libibverbs.map
	mkdir -p $(SV_OUT)
	$(CC) -shared -o $(SV_OUT)/$(SV_REALNAME).tmp \
	  -Wl,--whole-archive $(SV_STATICLIB) -Wl,--no-whole-archive \
	  -Wl,--version-script=$(SV_DIR)/libibverbs.map -Wl,-soname,$(SV_SONAME) \
	  -Wl,--gc-sections -Wl,-z,relro,-z,now -Wl,--as-needed $(LINK_STRIP) \
	  $(NATIVE_LIBS)
	mv -f $(SV_OUT)/$(SV_REALNAME).tmp $(SV_OUT)/$(SV_REALNAME)
	ln -sf $(SV_REALNAME) $(SV_OUT)/$(SV_SONAME)

# The node UCX and others look for before opening a device (softverbs/devnode), preloaded
# by rdmacm-soft.
SV_DEVNODE := $(SV_OUT)/libsoftverbs-devnode.so
softverbs: softverbs-devnode
softverbs-devnode:
	$(CARGO) build $(CARGO_FLAGS) -p softverbs-devnode
	mkdir -p $(SV_OUT)
	install -m 0755 $(TARGET_DIR)/$(PROFILE)/libsoftverbs_devnode.so $(SV_DEVNODE).tmp
	mv -f $(SV_DEVNODE).tmp $(SV_DEVNODE)

test-softverbs: $(BUILD_DEP)
	bash $(SV_DIR)/tests/run.sh

test-softverbs-limits: $(BUILD_DEP)
	bash $(SV_DIR)/tests/limits.sh
