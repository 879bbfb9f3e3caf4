# The real-GPU check (tests/gpu, docs/real-gpu.md): its offline bundle and its dry runs.
#
# Copyright: (c) 2026, gpuops maintainers
# SPDX-License-Identifier: GPL-3.0-or-later

.PHONY: gpu-bundle gpucheck
gpu-bundle: venv  ## Wheels and collection tarball for tests/gpu/run.sh on a GPU machine (build/gpu-wheels)
	VENV=$(VENV) tests/gpu/bundle.sh $(BUILD)/gpu-wheels

gpucheck: gpu-bundle sim  ## The real-GPU check: its skip, and its sequence on the simulated node
	@$(STAGE) gpucheck $(BIN)/pytest tests/gpu
