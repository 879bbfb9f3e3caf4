# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sglang command: sglang serve [flags], sglang version."""

from __future__ import annotations

import argparse
import sys

from sglang import __version__

COMMANDS = {"serve": "Launch the SGLang server.", "version": "Show the version information."}


def main(argv: list = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "serve":
        from sglang.srt.entrypoints.http_server import run_server

        run_server(argv[1:], prog="sglang serve")
        return 0
    if argv and argv[0] == "version":
        print("sglang version: %s" % __version__)
        return 0
    parser = argparse.ArgumentParser(prog="sglang", description="SGLang command line interface.")
    sub = parser.add_subparsers(dest="command", metavar="{%s}" % ",".join(COMMANDS), required=True)
    for name, help_text in COMMANDS.items():
        sub.add_parser(name, help=help_text)
    parser.parse_args(argv)
    return 2
