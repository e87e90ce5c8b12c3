# cube: the two commands of the README, plus a few helpers.
#   make run     install missing Debian packages, build the library, the MPI plugin, the cube
#                tool and the examples (not the tests), then `cube info` and `cube demo` (CPU)
#   make check   install what the tests need (Debian, as root) if missing, build, run CTest,
#                then the same tests under ASan+UBSan and under TSan
#   make bench   build and run the benchmarks (never part of the tests; bench_cuda says
#                "cuda unavailable" and exits 0 on a machine with no GPU)
#   make install install into $(PREFIX) (default /usr/local)

BUILD ?= build
PREFIX ?= /usr/local
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")

.PHONY: all build programs run check deps test test-asan test-tsan test-fuzz fuzz bench install clean soak

all: build

# Debian packages the build and the tests need (installed only if missing).
PACKAGES := cmake gcc make pkg-config libxxhash-dev libcjson-dev libdlpack-dev python3-numpy python3-pytest python3-jsonschema pocl-opencl-icd ocl-icd-opencl-dev opencl-headers \
            openmpi-bin libopenmpi-dev \
            clang libclang-rt-14-dev

deps:
	@missing=""; \
	if command -v dpkg >/dev/null 2>&1; then \
	  for p in $(PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	fi; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" != 0 ]; then echo "run as root, or install:$$missing"; exit 1; fi; \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
	fi

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DCMAKE_INSTALL_PREFIX=$(PREFIX)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# What `make run` needs: the library (shared, static, the MPI plugin), the cube tool and the
# examples (CMake target cube_programs); the tests are built by `make test` / `make check`.
programs: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS) --target cube_programs

run: deps
	$(MAKE) programs
	$(BUILD)/cube info
	$(BUILD)/cube demo

test: build
	ctest --test-dir $(BUILD) --output-on-failure --no-tests=error -j $(JOBS)

check: deps
	$(MAKE) test
	$(MAKE) test-asan
	$(MAKE) test-tsan
	$(MAKE) test-fuzz

# The fuzz targets (libFuzzer, clang) for FUZZ_SECONDS each: short in CI,
# longer with `make fuzz` (FUZZ_LONG_SECONDS, default 600).
FUZZ_SECONDS ?= 10
test-fuzz: deps
	cmake -S . -B $(BUILD)-fuzz $(GENERATOR) -DCMAKE_C_COMPILER=clang -DCUBE_BUILD_FUZZ=ON \
	  -DCUBE_BUILD_TESTS=OFF -DCUBE_BUILD_TOOLS=OFF -DCUBE_FUZZ_SECONDS=$(FUZZ_SECONDS)
	cmake --build $(BUILD)-fuzz -j $(JOBS)
	ctest --test-dir $(BUILD)-fuzz -L fuzz --output-on-failure --no-tests=error

FUZZ_LONG_SECONDS ?= 600
fuzz:
	$(MAKE) test-fuzz FUZZ_SECONDS=$(FUZZ_LONG_SECONDS)

# The unit, conformance, stress and example tests again, built with
# AddressSanitizer + UBSan, then with ThreadSanitizer (findings are fatal).
SAN_CMAKE = -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUBE_ASAN_TESTS=OFF -DCUBE_BUILD_TOOLS=OFF
test-asan: deps
	cmake -S . -B $(BUILD)-asan $(GENERATOR) $(SAN_CMAKE) -DCUBE_SANITIZE=address,undefined
	cmake --build $(BUILD)-asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  ctest --test-dir $(BUILD)-asan --output-on-failure --no-tests=error -j $(JOBS)

test-tsan: deps
	cmake -S . -B $(BUILD)-tsan $(GENERATOR) $(SAN_CMAKE) -DCUBE_SANITIZE=thread
	cmake --build $(BUILD)-tsan -j $(JOBS)
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  ctest --test-dir $(BUILD)-tsan --output-on-failure --no-tests=error -j $(JOBS)

# Soak: the stress test (8 threads x 2 CPU devices, random operations, every read
# compared) for SOAK_SECONDS (default 600), plain then under ASan+UBSan. Not in CI.
SOAK_SECONDS ?= 600
soak: build
	CUBE_SOAK_SECONDS=$(SOAK_SECONDS) ./$(BUILD)/tests/test_stress random_operations
	CUBE_SOAK_SECONDS=$(SOAK_SECONDS) ./$(BUILD)/tests/test_stress_asan random_operations

bench: build
	./$(BUILD)/bench_runtime && ./$(BUILD)/bench_dialect && ./$(BUILD)/bench_cuda && ./$(BUILD)/bench_collective && ./$(BUILD)/bench_nccl

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan $(BUILD)-fuzz
