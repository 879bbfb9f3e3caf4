# Molecule scenarios on simulated GPU nodes: Podman containers of a locally built Debian
# image (tests/sim/image) with the NVML test double, the SGLang stand-in and decoy daemons.
# Included from the top Makefile, which provides VENV, PY, BUILD, STAGE, COLLECTION_LINK and the
# targets venv and sim.
#
#   make image                          build or reuse localhost/gpuops-node:<hash of inputs>
#   make molecule                       run every scenario (molecule test), MOLECULE_JOBS at a time,
#                                       then remove the containers; each scenario logs to
#                                       build/logs/molecule-<scenario>.log
#   make molecule MOLECULE_SCENARIOS=faults
#   make molecule-clean                 remove containers the scenarios left behind
#
# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# The longest first, so that the last to start is a short one.
MOLECULE_SCENARIOS ?= faults default systemd tuning multinode limit
# Scenarios run side by side: most of their time is waiting (podman exec, the servers' timers).
MOLECULE_JOBS ?= 2
# The newest ansible release built on ansible-core 2.19; only containers.podman is taken from it.
ANSIBLE_PACKAGE_VERSION ?= 12.3.0
# catatonit by name: podman's --init runs /usr/libexec/podman/catatonit, and podman only recommends "catatonit | tini |
# dumb-init", which the tini that docker.io depends on (make deps) already satisfies.
PODMAN_DEPS := podman catatonit runc debootstrap uidmap slirp4netns rsync
COLLECTIONS := $(abspath $(BUILD))/collections
PODMAN_COLLECTION := $(COLLECTIONS)/ansible_collections/containers/podman
NODE_IMAGE_REF := $(BUILD)/sim/image/ref
# Every container a scenario creates carries this label (molecule/*/molecule.yml).
MOLECULE_LABEL := gpuops.molecule=node
MOLECULE_CLEAN := podman ps -aq --filter label=$(MOLECULE_LABEL) | xargs -r podman rm -f -t 0 >/dev/null
# What a run of `make molecule` leaves behind when interrupted: only the containers of the scenarios it ran (each
# platform is named gpuops-<scenario> or gpuops-<scenario>-<node>), so that runs of other scenarios beside it, from
# other checkouts on the same machine, keep theirs.
MOLECULE_CLEAN_RUN = for s in $(MOLECULE_SCENARIOS); do \
	podman ps -aq --filter label=$(MOLECULE_LABEL) --filter "name=^gpuops-$$s(-[a-z0-9]+)?$$"; done \
	| xargs -r podman rm -f -t 0 >/dev/null

podman-deps:  ## Install Podman and debootstrap for the simulated node image (idempotent)
	@mk/apt-deps.sh $(PODMAN_DEPS)

image: sim podman-deps | venv  ## Build or reuse the simulated GPU node image
	@$(STAGE) image env PYTHON=$(PY) tests/sim/image/build.sh $(BUILD)

$(PODMAN_COLLECTION)/MANIFEST.json: | venv
	$(PY) -m pip download --quiet --no-deps --dest $(BUILD)/wheels ansible==$(ANSIBLE_PACKAGE_VERSION)
	rm -rf $(PODMAN_COLLECTION)
	$(PY) -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
	    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith(sys.argv[3])])' \
	    $(BUILD)/wheels/ansible-$(ANSIBLE_PACKAGE_VERSION)-py3-none-any.whl $(COLLECTIONS) \
	    ansible_collections/containers/podman/

# gpuops.host resolves to this working tree (COLLECTION_LINK, made by the top Makefile),
# so scenarios always test the current code.
molecule-collections: $(PODMAN_COLLECTION)/MANIFEST.json $(COLLECTION_LINK)

MOLECULE_ENV = PATH="$(abspath $(VENV))/bin:$$PATH" ANSIBLE_COLLECTIONS_PATH=$(COLLECTIONS) \
	MOLECULE_GLOB="molecule/*/molecule.yml" GPUOPS_NODE_IMAGE="$$(cat $(NODE_IMAGE_REF))"

molecule: image molecule-collections  ## Molecule scenarios on simulated GPU nodes (containers)
	@$(STAGE) molecule bash -c 'set -eu; $(VENV)/bin/pytest -q -p no:cacheprovider tests/sim/test_image.py; \
	trap '\''$(MOLECULE_CLEAN_RUN)'\'' EXIT; \
	$(MOLECULE_ENV) mk/molecule.sh $(LOGS) $(MOLECULE_JOBS) $(MOLECULE_SCENARIOS)'

# make test runs these after both lanes, on a machine no other stage loads: the systemd scenario times its stops against
# the units' TimeoutStopSec, and twice, beside the integration lane, a stop that takes about 1.3 s alone took past its
# 60 s (molecule/README.md).
MOLECULE_ALONE ?= systemd
molecule-alone: MOLECULE_SCENARIOS = $(MOLECULE_ALONE)
molecule-alone: image molecule-collections  ## The scenarios that make test runs on their own, after the other stages
	@$(STAGE) molecule-alone bash -c 'set -eu; trap '\''$(MOLECULE_CLEAN_RUN)'\'' EXIT; \
	$(MOLECULE_ENV) mk/molecule.sh $(LOGS) 1 $(MOLECULE_SCENARIOS)'

molecule-clean:  ## Remove containers left by the molecule scenarios
	@$(MOLECULE_CLEAN)

.PHONY: podman-deps image molecule molecule-alone molecule-collections molecule-clean
