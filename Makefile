# cube: the two commands of the README, plus a few helpers.
#   make run     install missing Debian packages, build, then `cube info` and `cube demo` (CPU)
#   make check   install what the tests need (Debian, as root) if missing, build, run CTest
#   make bench   build and run the benchmarks (never part of the tests)
#   make install install into $(PREFIX) (default /usr/local)

BUILD ?= build
PREFIX ?= /usr/local
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")

.PHONY: all build run check deps test bench install clean

all: build

# Debian packages the build and the tests need (installed only if missing).
PACKAGES := cmake gcc make pkg-config libxxhash-dev pocl-opencl-icd ocl-icd-opencl-dev opencl-headers

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

run: deps
	$(MAKE) build
	./$(BUILD)/cube info
	./$(BUILD)/cube demo

test: build
	ctest --test-dir $(BUILD) --output-on-failure --no-tests=error -j $(JOBS)

check: deps
	$(MAKE) test

bench: build
	./$(BUILD)/bench_runtime && ./$(BUILD)/bench_dialect

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD)
