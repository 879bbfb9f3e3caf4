# gpuops.host: build, test and demo entry points.
# `make test` bootstraps everything it needs on a bare Debian 12 machine.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
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
APT_PACKAGES := gcc make rsync psmisc procps util-linux iproute2 shellcheck

export PATH := $(BIN):$(PATH)
# build/collections/ansible_collections/gpuops/host links to this working tree (mk/molecule.mk).
export ANSIBLE_COLLECTIONS_PATH := $(ANSIBLE_ROOT)/collections
export ANSIBLE_NOCOLOR := 1

-include mk/*.mk

.PHONY: help
help:  ## List the targets
	@grep -hE '^[a-z][a-z.-]*:.*## ' $(MAKEFILE_LIST) | sort | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

# --- bootstrap -------------------------------------------------------------

.PHONY: deps venv
deps:  ## Install the Debian packages the tests need (idempotent)
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "apt-get install$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

venv: $(VENV)/.installed  ## Create .venv with the pinned toolchain

$(VENV)/.installed: requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	touch $@

$(GET_PIP): tests/utils/offline_get_pip.py
	mkdir -p $(dir $@)
	cp $< $@

# ansible-test wants the collection at ansible_collections/<namespace>/<name>.
.PHONY: collection
collection: deps venv $(GET_PIP)
	mkdir -p $(COLL)
	rsync -a --delete --exclude=/.git --exclude=/build --exclude=/.venv \
	  --filter=':- .gitignore' ./ $(COLL)/
	test -d $(COLL)/.git || git -C $(COLL) init -q

# ansible-playbook and ansible-lint resolve gpuops.host through a link to this working tree,
# so they always run the current code.
GPUOPS_LINK := $(ANSIBLE_ROOT)/collections/ansible_collections/gpuops/host
$(GPUOPS_LINK):
	mkdir -p $(@D)
	ln -sfn $(CURDIR) $@

# --- tests -----------------------------------------------------------------

.PHONY: test sanity units lint yamllint ansible-lint simtest integration
test: deps sanity units lint simtest integration gpucheck molecule  ## Run every test stage
	@echo "make test: every stage passed"

sanity: collection  ## ansible-test sanity, every test
	cd $(COLL) && $(ANSIBLE_TEST) sanity --venv --python $(TEST_PYTHON) --color no

units: collection sim  ## ansible-test units
	cd $(COLL) && LD_LIBRARY_PATH=$(SIM_LIB) $(ANSIBLE_TEST) units --venv --python $(TEST_PYTHON) --color no

lint: ansible-lint yamllint  ## ansible-lint (production profile) and yamllint

ansible-lint: venv $(GPUOPS_LINK)
	$(BIN)/ansible-lint --profile production --offline

yamllint: venv
	$(BIN)/yamllint --strict .

simtest: venv sim  ## Tests of the simulated GPU node itself
	$(BIN)/pytest tests/sim

integration: venv sim $(GPUOPS_LINK)  ## Modules, roles and playbooks against sandboxed simulated nodes
	$(BIN)/pytest tests/integration

# --- simulated node, demo --------------------------------------------------

.PHONY: sim demo bench
sim: deps  ## Build the NVML test double and the decoy daemons
	$(MAKE) -C tests/sim BUILD=$(abspath $(BUILD))/sim

demo: venv sim  ## Restart a simulated 8-GPU node into extraction mode
	$(PY) demo/run.py

bench: venv sim $(GPUOPS_LINK)  ## Benchmarks against the hand procedures (bench/results/)
	$(PY) bench/run.py $(BENCH_ARGS)

# --- packaging -------------------------------------------------------------

.PHONY: build changelog clean
build: venv  ## Build the collection artifact
	$(BIN)/ansible-galaxy collection build --force --output-path $(BUILD)/dist .

changelog: venv $(GPUOPS_LINK)  ## Release the changelog fragments into CHANGELOG.md
	$(BIN)/antsibull-changelog release

clean:  ## Remove build output (keeps .venv)
	rm -rf $(BUILD) tests/output
