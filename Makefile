# The README's commands. Every target installs what it needs first.
BUILD ?= build
JOBS ?= $(shell nproc)
# The configure settings live in CMakePresets.json (presets default and
# sanitized, as an IDE or `cmake --preset` uses them); CMAKE_FLAGS and
# SAN_CMAKE_FLAGS add to them.
CMAKE_FLAGS ?=
PRESET = /usr/bin/python3 scripts/preset.py

# The sanitized second build (ASan + UBSan + libFuzzer coverage, clang-22):
# only the runtime, the importers, their tests and the fuzz harnesses (the
# targets and tests of the presets named sanitized).
SAN_BUILD ?= build-san
SAN_CMAKE_FLAGS ?=
SAN_TARGETS = $(shell $(PRESET) build sanitized targets)
SAN_TESTS = $(shell $(PRESET) test sanitized filter.include.name)
# make fuzz: seconds per harness, harnesses at a time.
FUZZ_TIME ?= 600
FUZZ_JOBS ?= 1

.PHONY: deps configure build build-sanitized test test-sanitized lint fuzz demo install clean

deps:
	bash scripts/setup.sh

$(BUILD)/build.ninja:
	cmake --preset default -S . -B $(BUILD) $(CMAKE_FLAGS)

configure: deps $(BUILD)/build.ninja

build: configure
	ninja -C $(BUILD) -j$(JOBS)

$(SAN_BUILD)/build.ninja:
	cmake --preset sanitized -S . -B $(SAN_BUILD) \
	  -DCLEAVE_HOST_BUILD=$(abspath $(BUILD)) $(SAN_CMAKE_FLAGS)

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
	$(MAKE) --no-print-directory lint || status=1; \
	/usr/bin/python3 scripts/test_times.py --start $(TEST_START) \
	  $(BUILD)/ctest-results.xml $(BUILD)/test/lit-results.xml \
	  $(SAN_BUILD)/ctest-results.xml || true; \
	exit $$status

# The fuzz smoke runs are single-threaded and time-bound: two at a time.
test-sanitized: build build-sanitized
	cd $(SAN_BUILD) && ctest --output-on-failure --output-junit ctest-results.xml -j$(JOBS) -R '$(SAN_TESTS)'

# The pre-commit hooks over every file (.pre-commit-config.yaml): LLVM
# clang-format, flake8, the function-length and listed-sources contracts.
lint: deps
	pre-commit run --all-files --show-diff-on-failure

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
