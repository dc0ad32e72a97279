# The README's commands. Every target installs what it needs first.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir

.PHONY: deps configure build test demo clean

deps:
	bash scripts/setup.sh

$(BUILD)/build.ninja:
	cmake -G Ninja -S . -B $(BUILD) $(CMAKE_FLAGS)

configure: deps $(BUILD)/build.ninja

build: configure
	ninja -C $(BUILD) -j$(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure

demo: build
	bash examples/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD)
