# Two commands on a fresh Debian 12 / Ubuntu 22.04 machine (as root): `make scenario` and `make test`.
SHELL := /bin/bash
# Debian's python3: the venv sees the distribution's Mininet (--system-site-packages).
PYTHON ?= /usr/bin/python3
VENV ?= .venv
BIN := $(VENV)/bin
SCENARIO ?= scenarios/uav-smoke.yaml
APT_PACKAGES := mininet iproute2 iputils-ping ethtool gcc libc6-dev iperf3 tcpdump psmisc procps python3-venv \
                serf nats-server zookeeper default-jre-headless openssh-server openssh-client libnats-dev
# The live view's browser test (tests/test_view_browser.py): headless Chromium driven by Selenium.
BROWSER_PACKAGES := chromium chromium-driver
# The containernet backend: the Docker engine, the base image's bootstrap, brctl for Containernet's LinuxBridge.
IMAGE_PACKAGES := docker.io debootstrap bridge-utils
# The Containernet venv (docs/containernet.md): its own python, found by `testbed` the same way.
CN_PYTHON ?= $(or $(TESTBED_CONTAINERNET_PYTHON),/opt/cn-venv/bin/python)

.PHONY: setup apt browser bench-view venv scenario test test-long test-containernet containernet sanitize figures paper paper-check images clean lint docs bench-emulation bench-shaper bench-nc doctor containernet-deps bench-analysis bench-calibration bench-overload bench-client bench-soak bench-servers bench-mutants benches bench-cli

setup: apt venv  ## distribution packages that are missing, then the venv with pinned Python packages

# Each install step says one line; apt-get's and pip's own output go to a log, shown when they fail.
SETUP_LOG_DIR ?= results/logs
APT_LOG := $(SETUP_LOG_DIR)/apt.log
PIP_LOG := $(SETUP_LOG_DIR)/pip.log
# $(call apt_install,WHAT,PACKAGES): the missing PACKAGES installed with one line said
define apt_install
@missing=$$(for p in $(2); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done | xargs); \
if [ -z "$$missing" ]; then echo "setup: $(1): all present"; exit 0; fi; \
echo "setup: $(1): installing $$missing (apt-get's output: $(APT_LOG))"; mkdir -p $(SETUP_LOG_DIR); \
if ! { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; } \
     >>$(APT_LOG) 2>&1; then tail -n 25 $(APT_LOG); echo "setup: $(1): apt-get failed (the whole log: $(APT_LOG))"; exit 1; fi
endef

apt:  ## the distribution packages a run needs (APT_PACKAGES), those missing installed
	$(call apt_install,distribution packages,$(APT_PACKAGES))

browser:  ## Debian's Chromium and ChromeDriver, for the view's browser tests
	$(call apt_install,browser for the view's tests,$(BROWSER_PACKAGES))

venv: $(BIN)/testbed
	@echo "setup: python venv $(VENV): pinned packages of requirements.txt in place"

$(BIN)/testbed: requirements.txt pyproject.toml
	@echo "setup: python venv $(VENV): installing requirements.txt and this project (pip's output: $(PIP_LOG))"
	@mkdir -p $(SETUP_LOG_DIR)
	@{ test -x $(BIN)/python || $(PYTHON) -m venv --system-site-packages $(VENV); } >>$(PIP_LOG) 2>&1 && \
	 $(BIN)/python -m pip install -q --upgrade pip >>$(PIP_LOG) 2>&1 && \
	 $(BIN)/python -m pip install -q -r requirements.txt >>$(PIP_LOG) 2>&1 && \
	 $(BIN)/python -m pip install -q --no-deps -e . >>$(PIP_LOG) 2>&1 || \
	 { tail -n 25 $(PIP_LOG); echo "setup: python venv $(VENV): failed (the whole log: $(PIP_LOG))"; exit 1; }
	@touch $(BIN)/testbed

# What a run changes outside its own namespaces (docs/guide/install-and-backends.md#what-a-run-changes-on-the-machine).
HOST_CHANGES := "host settings: a run adds cubic to net.ipv4.tcp_allowed_congestion_control if missing (its nodes then \
use Linux's default congestion control, not this machine's: BBR's PROBE_RTT stalls would show as latency); \
on Containernet it also lets bridged frames past Docker's FORWARD DROP (an iptables rule in DOCKER-USER)"

scenario: setup  ## the default smoke scenario end to end, then its figures (SCENARIO=... picks another; VIEW=1 serves the live view; BACKEND=containernet runs it on Docker hosts)
	@echo $(HOST_CHANGES)
	$(BIN)/testbed validate $(SCENARIO)
	$(BIN)/testbed run $(SCENARIO) $(if $(VIEW),--view) $(if $(BACKEND),--backend $(BACKEND))
	$(BIN)/testbed figures $$(dirname $$(ls -td results/*/run.json | head -1))

# Two workers, whole files each (a file's shared live run stays shared; a live test has the machine
# to itself: tests/machine.py); TEST_ARGS adds pytest flags.
PYTEST_WORKERS ?= 2
test: setup browser  ## the test suite but its long live runs and the Containernet tests (namespace tests need root)
	$(BIN)/python -m pytest -q -ra --durations=25 -n $(PYTEST_WORKERS) --dist loadfile -m "not long and not containernet" $(TEST_ARGS)

test-long: setup browser  ## the long live runs: failover faults, durable topics, MMOG, runs over namespace-servers, two runs at once, a run past capacity
	$(BIN)/python -m pytest -q -ra --durations=25 -m long $(TEST_ARGS)

# The compiled parts under AddressSanitizer and UBSan: TESTBED_SANITIZE makes testbed.procs.build_c build
# each into sanitize/ beside its usual binary and hand that one out, so the parts' own tests (and the
# fuzz tests) run the sanitized code; the first error, or a leak at exit, ends the process with an error
# (halt_on_error), which fails its test. tests/test_dataplane.py is a whole live system (brokers,
# ZooKeeper, Serf) whose compiled engine and delay line run sanitized too (~1.5 min of the ~3);
# tests/test_dataplane_units.py runs no compiled part.
SANITIZE_TESTS ?= tests/test_engine.py tests/test_delayline.py tests/test_stallprobe.py tests/test_cparts_fuzz.py \
                  tests/test_dataplane.py
SANITIZE_ENV := TESTBED_SANITIZE=1 ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=1 \
                UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
sanitize: venv  ## the C parts built with -fsanitize=address,undefined, then their tests (SANITIZE_TESTS) run against them
	$(SANITIZE_ENV) $(BIN)/python -m pytest -q -ra -p no:cacheprovider $(SANITIZE_TESTS) $(TEST_ARGS)

figures: venv
	$(BIN)/testbed figures

paper: setup  ## every experiment at this machine's scale, every figure -> results/paper/index.md, index.html, index.json (PAPER_ARGS="--resume" goes on where an interrupted one stopped)
	$(BIN)/testbed paper $(PAPER_ARGS)

paper-check: venv  ## whether each entry of results/paper/index.json still describes the code checked out (exit 1: stale, missing or unknown)
	$(BIN)/testbed paper --check

images: venv  ## Docker images for the Containernet backend (bootstraps the base image locally)
	@missing=$$(for p in $(IMAGE_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; fi
	$(BIN)/python -m testbed.emulation.images build

# docs/containernet.md's install, steps 1-5 (images/install-containernet): packages, the source unpacked outside
# the project, /opt/cn-venv with the pins, the project's requirements there, the engine and the images.
containernet: venv  ## Containernet for the Docker backend (CONTAINERNET_SRC=<checkout of the pinned commit, or its tarball>)
	CONTAINERNET_SRC="$(CONTAINERNET_SRC)" images/install-containernet

containernet-deps:  ## the project's requirements into the Containernet venv (CN_PYTHON), its pins kept, selenium left out
	@test -x $(CN_PYTHON) || { echo "no Containernet venv at $(CN_PYTHON): make containernet CONTAINERNET_SRC=... (docs/containernet.md)"; exit 2; }
	mkdir -p build && $(PYTHON) testbed/emulation/installed.py requirements > build/containernet-requirements.txt
	$(CN_PYTHON) -m pip install -q -r build/containernet-requirements.txt -c images/containernet-constraints.txt

# The Containernet tests; TESTBED_REQUIRE_CONTAINERNET=1 (CI, after `make containernet`) turns their skips into failures.
test-containernet: venv  ## the Containernet backend's tests (make containernet first)
	$(BIN)/python -m pytest -q -ra --durations=10 -m containernet $(TEST_ARGS)

doctor: venv
	$(BIN)/testbed doctor

bench-cli: venv  ## how long `testbed` takes to answer: every command's --help and validating the shipped scenarios -> results/bench/cli.json (ARGS="--testbed OTHER/.venv/bin/testbed")
	$(BIN)/python -m testbed.bench.cli $(ARGS)

bench-emulation: setup  ## accuracy, shaper throughput, bring-up/teardown, relink -> results/bench/emulation.json
	$(BIN)/python -m testbed.bench.emulation

bench-servers: setup  ## relink on this machine and across three namespace-servers -> results/bench/relink-servers.json
	@up=$$($(BIN)/testbed servers up 3 >/dev/null 2>&1 && echo yes); \
	$(BIN)/python -m testbed.bench.emulation --servers tbs1,tbs2,tbs3; code=$$?; \
	if [ "$$up" = yes ]; then $(BIN)/testbed servers down >/dev/null; fi; exit $$code

bench-shaper: setup
	$(BIN)/python -m testbed.emulation.bench_shaper

clean:  ## remove what crashed runs left behind, and build artefacts
	-test -x $(BIN)/testbed && $(BIN)/testbed clean
	rm -rf testbed/emulation/_build .pytest_cache .ruff_cache

lint: venv
	$(BIN)/ruff check testbed tests analysis
	$(BIN)/lint-imports

docs: venv  ## the scenario reference, regenerated from the schema -> docs/guide/scenario-reference.md
	$(BIN)/python -m testbed.scenario.reference > docs/guide/scenario-reference.md

bench-nc: setup  ## Serf coordinate accuracy and overhead (paper 5.3) -> results/bench/nc.json, fig3b.png
	$(BIN)/python -m testbed.bench.nc

bench-calibration: setup  ## every pair of the 16 US cities pinged, constant and with cities.jitter: measured, against WonderProxy's pings -> results/bench/calibration.json, calibration.png (~3 min)
	$(BIN)/python -m testbed.bench.calibration $(CALIBRATION_ARGS)

bench-analysis: setup  ## PySpark reduction of 250k/500k/1M synthetic trace rows -> results/bench/analysis.json (ANALYSIS_ARGS="--sizes 1000000,10000000,30000000,100000000 --repeats 1 --cluster 2 --no-convert": scaling, local vs a 2-worker standalone cluster, ~15 min)
	$(BIN)/python -m analysis.bench $(ANALYSIS_ARGS)

bench-client: setup  ## client library CPU per message, one swarm against nats-server on loopback -> results/bench/client.json
	$(BIN)/python -m testbed.bench.client $(CLIENT_ARGS)

bench-overload: setup  ## nats-server output rate vs p95 latency, the Rth_out knee (paper 5.4) -> results/bench/overload.json, overload.png
	$(BIN)/python -m testbed.bench.overload $(OVERLOAD_ARGS)

bench-view: setup browser  ## what watching costs: uav-smoke with and without the live view (headless Chromium on it), alternating -> results/bench/view.json
	$(BIN)/python -m testbed.bench.view $(ARGS)

bench-soak: setup  ## 30 min of uav-smoke with a broker crashed and restarted every 5 min: memory and open files per process class must not grow past a bound -> results/bench/soak.json, soak.png (SOAK_ARGS=--minutes 10 ...)
	$(BIN)/python -m testbed.bench.soak $(SOAK_ARGS)

bench-mutants: setup  ## six named defects (random placement, a migration never completing, +20 ms on one link, 1 % of deliveries dropped, the handover trigger never firing, durable acks before storage), each on a copy of HEAD against the live test that must catch it -> results/bench/mutants.json (~12 min on a quiet machine; MUTANTS_ARGS="--only placement-random")
	$(BIN)/python -m testbed.bench.mutants $(MUTANTS_ARGS)

benches: venv  ## the benchmarks each system brings (testbed/systems/*/manifest.py): name, system, length, what it writes
	@$(BIN)/testbed bench

# A system's benchmark: `make bench-bad`, `make bench-tracking ARGS=--quick`, ... (`make benches` lists them).
bench-%: setup
	$(BIN)/testbed bench $* $(ARGS)
