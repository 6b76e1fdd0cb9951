# pare: the two commands of the README.
#   make demo   install what is missing, build, run the main pipeline on Fashion-MNIST
#   make test   install what is missing, build, run the whole test suite
#   make fuzz   the parsers' libFuzzer targets, FUZZ_SECONDS each (tests/fuzz/run)
#   make sanitize  the parsers', dist/, launcher and bad-input tests built with ASan + UBSan (tests/fuzz/sanitize)
BUILD ?= build
JOBS ?= $(shell nproc)
STAMP := .deps-stamp

.PHONY: all build demo test deps clean bench fuzz sanitize

all: build

# Re-run the installer when it or the Python pins changed (it is quick when all is present).
$(STAMP): scripts/install-deps scripts/python-requirements.txt
	scripts/install-deps
	@touch $@

deps:
	scripts/install-deps
	@touch $(STAMP)

$(BUILD)/build.ninja: $(STAMP) CMakeLists.txt
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

build: $(STAMP) $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	scripts/demo $(BUILD)

# A peer test whose peer is missing fails here (PARE_REQUIRE_PEERS=1, tests/peers.sh) instead of skipping.
test: build
	cd $(BUILD) && PARE_REQUIRE_PEERS=1 ctest --output-on-failure -j $(JOBS) --timeout 1500

# libFuzzer targets (tests/fuzz, clang-16, ASan + UBSan) for FUZZ_SECONDS each (default 60).
fuzz: $(STAMP)
	tests/fuzz/run

# The sanitizer job: tests/core's parser tests, tests/dist, tests/cli/launch_test.sh, bad_input_test.sh, federate_test.sh and
# federate_tls_test.sh with clang-16, AddressSanitizer and UndefinedBehaviorSanitizer (tests/fuzz); any report fails it.
sanitize: $(STAMP)
	tests/fuzz/sanitize

bench: build
	PARE=$(BUILD)/cli/pare bench/train_throughput.sh

clean:
	rm -rf $(BUILD) $(STAMP)
