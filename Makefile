# Kestrel: the two commands of the README quick start, and the developer targets.
#   make demo    install what is missing, build, run a real Keras job on a local kestreld
#   make check   install what is missing, build, run every test (also under ASan+UBSan)
BUILD ?= build
ASAN_BUILD ?= build-asan
VENV ?= .venv
JOBS ?= $(shell nproc)
PY := $(abspath $(VENV))/bin/python
CMAKE_FLAGS ?= -DKESTREL_WERROR=ON -DKESTREL_PYTHON=$(PY)

.PHONY: all deps build check test test-asan demo install bench bench-submit bench-sched bench-devices bench-keras-callback bench-repo bench-slurm bench-load bench-inputs bench-logs bench-console bench-gang fuzz abi-baseline clean

all: build

deps:
	@scripts/deps.sh $(VENV)

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

# The C unit and integration tests again with AddressSanitizer + UndefinedBehaviorSanitizer
# (kestreld included), and the Python tests that drive those binaries (no ASan in the interpreter).
test-asan:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DKESTREL_SANITIZE=address,undefined $(CMAKE_FLAGS)
	cmake --build $(ASAN_BUILD) -j$(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -L 'unit|integration|python'

check: deps
	$(MAKE) test
	$(MAKE) test-asan

demo: deps build
	scripts/demo.sh $(BUILD) $(PY)

install: build
	cmake --install $(BUILD) $(if $(PREFIX),--prefix $(PREFIX),)

bench: bench-submit bench-sched bench-devices bench-keras-callback bench-repo bench-slurm bench-load bench-inputs bench-logs bench-console bench-gang

bench-submit: build
	$(BUILD)/bench/bench_submit

# Refresh the committed ABI baseline (release commits only; review the diff).
abi-baseline: build
	tests/abi/abicheck.sh --refresh $(BUILD)/lib/libkestrel.so.1 include tests/abi/libkestrel-1.abi

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)

bench-sched: build
	$(BUILD)/bench/bench_sched

bench-devices: build
	$(BUILD)/bench/bench_devices $(BUILD)/stubs/new/libnvidia-ml.so.1

bench-keras-callback: build
	cd $(BUILD) && ctest -R python.binding_build >/dev/null
	PYTHONPATH=$(BUILD)/python KERAS_BACKEND=torch $(PY) bench/keras_callback.py $(BUILD)/server/kestreld

# the repository vs dd, docker-registry, curl and OpenSSL (KESTREL_BENCH_MIB=1024 by default)
bench-repo: build
	@command -v docker-registry >/dev/null || apt-get install -y -q docker-registry >/dev/null || true
	KERAS_BACKEND=torch $(PY) bench/repo.py $(BUILD)/server/kestreld $(BUILD)/cli/kestrel

# kestreld on a private Slurm cluster vs raw sbatch vs kestreld's local executor
bench-slurm: build
	$(PY) bench/slurm.py $(BUILD)/server/kestreld

# 200 concurrent clients for 60 s against kestreld on loopback, beside a /healthz floor of the same run
bench-load: build
	$(PY) bench/load.py $(BUILD)/server/kestreld $(BUILD)/cli/kestrel

bench-inputs: build
	$(PY) bench/inputs.py $(BUILD)/server/kestreld $(BUILD)/cli/kestrel

# gangs: submit -> every rank running beside a one-process job; then bench-sched's trace with 10 % gangs
bench-gang: build
	$(PY) bench/gang.py $(BUILD)/server/kestreld
	$(BUILD)/bench/bench_sched

bench-logs: build
	$(PY) bench/logs.py $(BUILD)/server/kestreld

# the web console: its pages' API calls with 10,000 jobs and 100,000 points beside /healthz, first
# paint and a 100,000-point chart in headless Chromium
bench-console: build
	$(PY) bench/console.py $(BUILD)/server/kestreld

# libFuzzer (clang) on every parser of outside input, FUZZ_SECONDS each (default 180), ASan+UBSan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 180
fuzz:
	@command -v clang >/dev/null && [ -e /usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a ] || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang libclang-rt-14-dev >/dev/null; }
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DKESTREL_FUZZ=ON -DKESTREL_SANITIZE=address,undefined -DKESTREL_WERROR=OFF \
	  -DKESTREL_PYTHON= -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(FUZZ_BUILD) -j$(JOBS) --target wire_fuzzer tree_fuzzer index_fuzzer slurm_fuzzer pack_fuzzer config_fuzzer route_fuzzer batch_fuzzer
	scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)
