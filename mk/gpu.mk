# The real-GPU check (tests/gpu, docs/real-gpu.md): its offline bundle and its dry runs.
#
# Copyright: (c) 2026, gpuops maintainers
# SPDX-License-Identifier: GPL-3.0-or-later

.PHONY: gpu-bundle gpucheck
gpu-bundle: venv  ## Wheels and collection tarball for tests/gpu/run.sh on a GPU machine (build/gpu-wheels)
	VENV=$(VENV) tests/gpu/bundle.sh $(BUILD)/gpu-wheels
	touch $(GPU_BUNDLED)

# The dry runs need the wheels, downloaded again only when what they come from changes: run.sh
# builds the collection from the tree itself when the tree is newer than the bundled tarball.
GPU_BUNDLED := $(BUILD)/gpu-wheels/.bundled
$(GPU_BUNDLED): tests/gpu/requirements.txt tests/gpu/bundle.sh | venv
	VENV=$(VENV) tests/gpu/bundle.sh $(BUILD)/gpu-wheels
	touch $@

gpucheck: $(GPU_BUNDLED) sim  ## The real-GPU check: its skip, and its sequence on the simulated node
	@$(STAGE) gpucheck $(BIN)/pytest tests/gpu
