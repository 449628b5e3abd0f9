# The commands users type. Each one installs what is missing, builds, and
# runs; the real build is CMake's (build/ for Release, build-asan/ for the
# AddressSanitizer + UBSan test build).
JOBS ?= 2
BUILD := build
ASAN_BUILD := build-asan
DEPS_STAMP := $(BUILD)/.deps-ok

.PHONY: all build deps test test-fast test-asan fuzz demo bench clean

all: build

deps: $(DEPS_STAMP)
$(DEPS_STAMP): scripts/install-deps.sh
	@bash scripts/install-deps.sh
	@mkdir -p $(BUILD) && touch $@

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release > /dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# Release tests, then the sanitizer build of the unit tests (the long
# end-to-end tests carry the "slow" label and run only in the Release pass).
test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@$(MAKE) --no-print-directory test-asan

test-fast: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE slow

test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DFIVEFOLD_SANITIZE=ON > /dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	@cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure -j $(JOBS) -LE slow

# Time-bounded fuzzing of every file reader (FIVEFOLD_FUZZ_SECONDS per
# harness, 60 by default): a search for new bugs, so not part of `make test`,
# whose fuzz tests replay the seeds plus a fixed number of inputs.
fuzz: build
	@cmake --build $(BUILD) --target fuzz

demo: build
	@bash scripts/demo.sh

bench: build
	@bash scripts/bench.sh

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
