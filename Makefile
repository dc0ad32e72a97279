# The README's commands. Every target installs what it needs first.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir

# The sanitized second build (ASan + UBSan + libFuzzer coverage, clang-22):
# only the runtime, the importers, their tests and the fuzz harnesses.
SAN_BUILD ?= build-san
SAN_CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
  -DCMAKE_CXX_FLAGS_RELEASE=-O1 -DCMAKE_C_FLAGS_RELEASE=-O1 \
  -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 -DCLEAVE_SANITIZE=ON \
  -DCLEAVE_ENABLE_CUDA=OFF -DCLEAVE_HOST_BUILD=$(abspath $(BUILD))
SAN_TARGETS = cleave-fuzzers cleave-unit-tests cleave-mpi-tests cleave-thread-tests cleave-mpi-hello cleave-run
SAN_TESTS = ^(unit|mpi|threads|fuzz-.*|sanitized-e2e)$$
# make fuzz: seconds per harness, harnesses at a time.
FUZZ_TIME ?= 600
FUZZ_JOBS ?= 1

.PHONY: deps configure build build-sanitized test test-sanitized fuzz demo install clean

deps:
	bash scripts/setup.sh

$(BUILD)/build.ninja:
	cmake -G Ninja -S . -B $(BUILD) $(CMAKE_FLAGS)

configure: deps $(BUILD)/build.ninja

build: configure
	ninja -C $(BUILD) -j$(JOBS)

$(SAN_BUILD)/build.ninja:
	cmake -G Ninja -S . -B $(SAN_BUILD) $(SAN_CMAKE_FLAGS)

build-sanitized: deps $(SAN_BUILD)/build.ninja
	ninja -C $(SAN_BUILD) -j$(JOBS) $(SAN_TARGETS)

# When this make started: `make test` reports its whole time (setup and
# builds included) and its ten slowest entries (scripts/test_times.py).
TEST_START := $(shell date +%s)

# Everything, then the sanitized runs (they use the regular build's compiler);
# both run even if the first fails, and the exit status is the worse.
test: build build-sanitized
	@status=0; \
	(cd $(BUILD) && ctest --output-on-failure --output-junit ctest-results.xml) || status=1; \
	$(MAKE) --no-print-directory test-sanitized || status=1; \
	/usr/bin/python3 scripts/test_times.py --start $(TEST_START) \
	  $(BUILD)/ctest-results.xml $(BUILD)/test/lit-results.xml \
	  $(SAN_BUILD)/ctest-results.xml || true; \
	exit $$status

# The fuzz smoke runs are single-threaded and time-bound: two at a time.
test-sanitized: build build-sanitized
	cd $(SAN_BUILD) && ctest --output-on-failure --output-junit ctest-results.xml -j$(JOBS) -R '$(SAN_TESTS)'

fuzz: build build-sanitized
	test -d $(SAN_BUILD)/fuzz/seeds || (cd $(SAN_BUILD) && ctest -R '^fuzz-seeds$$')
	FUZZ_TIME=$(FUZZ_TIME) FUZZ_JOBS=$(FUZZ_JOBS) bash scripts/fuzz.sh $(SAN_BUILD)

demo: build
	bash examples/demo.sh $(BUILD)

# The Python package `cleave` (with the plugins it loads) where the system's
# /usr/bin/python3 finds it: /usr/local/lib/python3.X/dist-packages (root).
install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD) $(SAN_BUILD)
