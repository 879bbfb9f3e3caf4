# gpuops.host: build, test and demo entry points.
# `make test` bootstraps everything it needs on a bare Debian 12 machine. Every stage keeps
# its output in build/logs/<stage>.log (printed in part when the stage fails), and the run
# ends with the time each stage took.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# Debian's own interpreter: its optimised build runs ansible-playbook, the modules and the
# simulated nodes with about a tenth less CPU than a locally compiled one without
# --enable-optimizations (such as pyenv's default), and the tests are CPU-bound on 2 cores.
PYTHON ?= /usr/bin/python3
VENV := .venv
BIN := $(abspath $(VENV))/bin
PY := $(BIN)/python
BUILD := build
ANSIBLE_ROOT := $(abspath $(BUILD))
COLL := $(BUILD)/ansible_collections/gpuops/host
SIM_LIB := $(abspath $(BUILD))/sim/lib
GET_PIP := $(HOME)/.ansible/test/cache/get_pip_24_2.py
ANSIBLE_TEST := $(BIN)/ansible-test
TEST_PYTHON := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
APT_PACKAGES := python3 python3-venv gcc make rsync psmisc procps util-linux iproute2 shellcheck docker.io
LOGS := $(abspath $(BUILD))/logs
STAGE := mk/stage.sh $(LOGS)

export PATH := $(BIN):$(PATH)
# gpuops.host resolves to this working tree through COLLECTION_LINK (the one rule below).
export ANSIBLE_COLLECTIONS_PATH := $(ANSIBLE_ROOT)/collections
export ANSIBLE_NOCOLOR := 1
# Plain logs in build/logs (ansible-lint, rich, pytest honour it).
export NO_COLOR := 1

-include mk/*.mk

.PHONY: help
help:  ## List the targets
	@grep -hE '^[a-z][a-z.-]*:.*## ' $(MAKEFILE_LIST) | sort | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

# --- bootstrap -------------------------------------------------------------

.PHONY: deps venv
# dpkg -s first: apt-get runs only when a package is missing.
deps:  ## Install the Debian packages the tests need (idempotent)
	@mk/apt-deps.sh $(APT_PACKAGES)

venv: $(VENV)/.installed  ## Create .venv with the pinned toolchain

$(VENV)/.installed: requirements.txt requirements-dev.txt | deps
	@$(STAGE) venv bash -c 'test -x $(PY) || $(PYTHON) -m venv $(VENV); \
	  $(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt'
	touch $@

$(GET_PIP): tests/utils/offline_get_pip.py
	mkdir -p $(dir $@)
	cp $< $@

# ansible-test wants a copy of the collection at ansible_collections/<namespace>/<name>.
.PHONY: collection
collection: deps venv $(GET_PIP)
	mkdir -p $(COLL)
	rsync -a --delete --exclude=/.git --exclude=/build --exclude=/.venv \
	  --filter=':- .gitignore' ./ $(COLL)/
	test -d $(COLL)/.git || git -C $(COLL) init -q

# Everything else (ansible-playbook, ansible-lint, antsibull-docs, the simulated fleet in
# tests/sim/gpusim/fleet.py, demo, bench, playground) finds gpuops.host through this link to
# the working tree, so it always runs the current code.
COLLECTION_LINK := $(ANSIBLE_ROOT)/collections/ansible_collections/gpuops/host
$(COLLECTION_LINK):
	mkdir -p $(@D)
	ln -sfn $(CURDIR) $@

# --- tests -----------------------------------------------------------------

.PHONY: test test-begin sanity units lint yamllint ansible-lint changelog-lint simtest integration
# Two lanes run side by side: the container lane (the node image, the molecule scenarios:
# mostly waiting on podman and the servers' timers, then the stages that need no test
# sandbox: the real-GPU check's dry run, galaxy-importer, the execution environment) and,
# one after another, all the others. The container lane writes its stage lines to
# build/logs/container-lane.out, printed once both lanes are done. Each lane stops at its
# first failing stage; make test fails when either did.
TEST_STAGES := sanity units lint docs-lint simtest integration
CONTAINER_STAGES := molecule gpucheck galaxy-import ee
test: test-begin deps venv sim gateway $(COLLECTION_LINK)  ## Run every test stage (logs and times in build/logs)
	@status=0; \
	STAGE_QUIET=1 $(MAKE) --no-print-directory $(CONTAINER_STAGES) \
	  MOLECULE_SCENARIOS="$(filter-out $(MOLECULE_ALONE),$(MOLECULE_SCENARIOS))" >$(LOGS)/container-lane.out 2>&1 & lane=$$!; \
	echo "== container lane ($(CONTAINER_STAGES)) runs beside the others: $(LOGS)/container-lane.out"; \
	$(MAKE) --no-print-directory $(TEST_STAGES) || status=1; \
	wait $$lane || status=1; \
	echo "== container lane:"; sed 's/^/   /' $(LOGS)/container-lane.out; \
	$(MAKE) --no-print-directory molecule-alone || status=1; \
	$(STAGE) --summary; \
	if [ $$status -ne 0 ]; then echo "make test: a stage failed (logs in $(LOGS))"; exit 1; fi; \
	echo "make test: every stage passed"

test-begin:
	@mkdir -p $(LOGS)
	@rm -f $(LOGS)/times.tsv
	@date +%s >$(LOGS)/started

sanity: collection  ## ansible-test sanity, every test
	@$(STAGE) sanity env -C $(COLL) $(ANSIBLE_TEST) sanity --venv --python $(TEST_PYTHON) --color no

units: collection sim  ## ansible-test units
	@$(STAGE) units env -C $(COLL) LD_LIBRARY_PATH=$(SIM_LIB) $(ANSIBLE_TEST) units --venv --python $(TEST_PYTHON) --color no

lint: ansible-lint yamllint changelog-lint  ## ansible-lint (production profile), yamllint, changelog fragments

ansible-lint: venv $(COLLECTION_LINK)
	@$(STAGE) ansible-lint $(BIN)/ansible-lint --profile production --offline

yamllint: venv
	@$(STAGE) yamllint $(BIN)/yamllint --strict .

# Fragment names: lowercase words joined by hyphens (an issue number first where there is one).
changelog-lint: venv $(COLLECTION_LINK)
	@$(STAGE) changelog-lint bash -c 'set -e; $(BIN)/antsibull-changelog lint; \
	  bad=$$(find changelogs/fragments -type f ! -regex ".*/[a-z0-9][a-z0-9-]*\.yml" 2>/dev/null); \
	  if [ -n "$$bad" ]; then echo "fragment names must be lowercase-hyphen .yml: $$bad"; exit 1; fi'

# The tests wait far more than they compute (the servers' timers, readiness polls), so
# PYTEST_WORKERS pytest-xdist workers run them side by side, even on 2 cores.
PYTEST_WORKERS ?= 3

# Every test here has fixtures of its own: each is handed to the first free worker. The node
# image's test runs in the molecule stage, which builds the image.
simtest: venv sim gateway  ## Tests of the simulated GPU node itself
	@$(STAGE) simtest $(BIN)/pytest -n $(PYTEST_WORKERS) --durations=10 tests/sim --ignore=tests/sim/test_image.py

# --dist loadscope: a module's tests run on one worker, in order, so that a module-scoped
# simulated node (and its server) is set up once, as without xdist. --no-loadscope-reorder:
# the modules start in file order, not by their number of tests, so the two longest,
# test_failed_launch and test_fleet_safety (one node each through slow restarts), start first.
integration: venv sim gateway $(COLLECTION_LINK)  ## Modules, roles and playbooks against sandboxed simulated nodes
	@$(STAGE) integration $(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder \
	  --durations=25 tests/integration

# --- the ecosystem's own checks --------------------------------------------

.PHONY: docs-lint galaxy-import ee
docs-lint: venv $(COLLECTION_LINK)  ## antsibull-docs lint (plugin docs included), ansible-doc of every role
	@$(STAGE) docs-lint mk/docs-lint.sh $(COLLECTION_LINK)

# What Galaxy and Automation Hub run on upload, without the parts that need a container
# registry (ansible-test in a container): see mk/galaxy-importer.cfg.
galaxy-import: build  ## galaxy-importer on the built artifact: no warning, no error
	@$(STAGE) galaxy-import env GALAXY_IMPORTER_CONFIG=$(CURDIR)/mk/galaxy-importer.cfg \
	  mk/galaxy-import.sh $(BUILD)/dist $(BUILD)/galaxy-import

# Building the image needs a container registry for its base image: only the context is made.
ee: venv  ## Render the execution environment's build context offline (ansible-builder create)
	@$(STAGE) ee mk/ee.sh $(BUILD)/ee

# --- simulated node, demo, playground ----------------------------------------

.PHONY: sim demo bench playground playground-stop
sim: deps  ## Build the NVML test double and the decoy daemons
	$(MAKE) -s -C tests/sim BUILD=$(abspath $(BUILD))/sim

demo: venv sim $(COLLECTION_LINK)  ## Restart a simulated 8-GPU node into extraction mode
	$(PY) demo/run.py

PLAYGROUND := $(BUILD)/playground
playground: venv sim $(COLLECTION_LINK)  ## Leave a simulated 8-GPU node with an SGLang server running, to try playbooks by hand
	$(PY) demo/playground.py start --workdir $(PLAYGROUND)

playground-stop:  ## Stop what make playground started
	$(PY) demo/playground.py stop --workdir $(PLAYGROUND)

bench: venv sim gateway image $(COLLECTION_LINK)  ## Benchmarks against the hand procedures (bench/results/)
	$(PY) bench/run.py $(BENCH_ARGS)

# --- packaging -------------------------------------------------------------

.PHONY: build changelog clean
build: venv  ## Build the collection artifact (build/dist)
	rm -rf $(BUILD)/dist
	$(BIN)/ansible-galaxy collection build --force --output-path $(BUILD)/dist .

changelog: venv $(COLLECTION_LINK)  ## Release the changelog fragments into CHANGELOG.md
	$(BIN)/antsibull-changelog release

clean:  ## Remove build output (keeps .venv)
	rm -rf $(BUILD) tests/output
