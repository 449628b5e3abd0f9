# The commands users type. Each one installs what is missing, builds, and
# runs; the real build is CMake's (build/ for Release, build-asan/ for the
# AddressSanitizer + UBSan test build).
SHELL := /bin/bash
JOBS ?= 2
# Tests run four at a time on two cores (a multi-rank test counts for two,
# its PROCESSORS): one at a time per core left the cores idle 45% of the
# time (mpirun's launch, ranks waiting on each other, Python's start), and
# four cut the Release pass from 352 s to 228 s. Tests whose checks rest on
# timings they take run alone (RUN_SERIAL).
TEST_JOBS ?= 4
BUILD := build
ASAN_BUILD := build-asan

.PHONY: all build deps test test-fast test-asan fuzz demo bench clean

all: build

# Every time: installs what is missing (quick when nothing is), so that no
# test layer goes untested for a package that was removed or never came.
deps:
	@bash scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release > /dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# Release tests, then the sanitizer build of the unit tests (the long
# end-to-end tests carry the "slow" label, and multi-rank tests whose paths
# another sanitizer-pass test covers the "release_only" label: both run only
# in the Release pass),
# then scripts/test_summary.sh: every skipped test and unregistered layer
# with its reason; with CI=true a skip for a missing dependency fails.
test: build
	@rm -f $(BUILD)/ctest.log $(ASAN_BUILD)/ctest.log; rc=0; (cd $(BUILD) && ctest --output-on-failure -j $(TEST_JOBS)) 2>&1 | tee $(BUILD)/ctest.log; \
	rc=$${PIPESTATUS[0]}; \
	if [ $$rc -eq 0 ]; then $(MAKE) --no-print-directory test-asan-run || rc=$$?; fi; \
	bash scripts/test_summary.sh $(BUILD) $(ASAN_BUILD) || rc=1; exit $$rc

test-fast: build
	@rc=0; (cd $(BUILD) && ctest --output-on-failure -j $(TEST_JOBS) -LE slow) 2>&1 | tee $(BUILD)/ctest.log; \
	rc=$${PIPESTATUS[0]}; bash scripts/test_summary.sh $(BUILD) || rc=1; exit $$rc

test-asan: deps
	@rc=0; $(MAKE) --no-print-directory test-asan-run || rc=$$?; \
	bash scripts/test_summary.sh $(ASAN_BUILD) || rc=1; exit $$rc

.PHONY: test-asan-run
test-asan-run:
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DFIVEFOLD_SANITIZE=ON > /dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	@(cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure -j $(TEST_JOBS) -LE "slow|release_only") 2>&1 | tee $(ASAN_BUILD)/ctest.log; exit $${PIPESTATUS[0]}

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
