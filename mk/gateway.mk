# The SGLang Model Gateway (PyPI sglang-router), real, in a venv of its own: build/gateway.
# Included from the top Makefile, which provides PYTHON, BUILD and STAGE.
#
#   make gateway      install or reuse build/gateway (tests/sim/gateway/requirements.txt)
#
# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

GATEWAY_VENV := $(BUILD)/gateway
GATEWAY_REQUIREMENTS := tests/sim/gateway/requirements.txt

gateway: $(GATEWAY_VENV)/.installed  ## Install the SGLang Model Gateway into build/gateway

$(GATEWAY_VENV)/.installed: $(GATEWAY_REQUIREMENTS) | deps
	@$(STAGE) gateway bash -c 'test -x $(GATEWAY_VENV)/bin/python || $(PYTHON) -m venv $(GATEWAY_VENV); \
	  $(GATEWAY_VENV)/bin/python -m pip install -q --disable-pip-version-check -r $(GATEWAY_REQUIREMENTS)'
	touch $@

.PHONY: gateway
