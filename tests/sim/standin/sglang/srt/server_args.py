# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The server's arguments: the subset of SGLang 0.5.x flags the simulated nodes use."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import random
from typing import List, Optional

from sglang.srt.utils import configure_logger

logger = logging.getLogger(__name__)

AUTO_MEM_FRACTION_STATIC = 0.88
AUTO_CUDA_GRAPH_MAX_BS = 256
AUTO_CHUNKED_PREFILL_SIZE = 8192
CUDA_GRAPH_BACKENDS = ["full", "breakable", "disabled"]


@dataclasses.dataclass
class ServerArgs:
    model_path: str
    tokenizer_path: Optional[str] = None
    trust_remote_code: bool = False
    context_length: Optional[int] = None
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    served_model_name: Optional[str] = None
    host: str = "127.0.0.1"
    port: int = 30000
    mem_fraction_static: Optional[float] = None
    max_running_requests: Optional[int] = None
    max_total_tokens: Optional[int] = None
    chunked_prefill_size: Optional[int] = None
    max_prefill_tokens: int = 16384
    tp_size: int = 1
    dp_size: int = 1
    base_gpu_id: int = 0
    gpu_id_step: int = 1
    random_seed: Optional[int] = None
    watchdog_timeout: float = 300
    log_level: str = "info"
    log_requests: bool = False
    enable_metrics: bool = False
    api_key: Optional[str] = None
    skip_server_warmup: bool = False
    disable_radix_cache: bool = False
    cuda_graph_max_bs: Optional[int] = None
    cuda_graph_bs: Optional[List[int]] = None
    cuda_graph_backend_prefill: Optional[str] = None
    cuda_graph_backend_decode: Optional[str] = None
    disable_cuda_graph: bool = False
    speculative_algorithm: Optional[str] = None
    speculative_draft_model_path: Optional[str] = None

    def __post_init__(self):
        self.tokenizer_path = self.tokenizer_path or self.model_path
        self.served_model_name = self.served_model_name or self.model_path
        if self.random_seed is None:
            self.random_seed = random.randint(0, 1 << 30)
        if self.mem_fraction_static is None:
            self.mem_fraction_static = AUTO_MEM_FRACTION_STATIC
        if self.cuda_graph_max_bs is None:
            self.cuda_graph_max_bs = AUTO_CUDA_GRAPH_MAX_BS
        if self.chunked_prefill_size is None:
            self.chunked_prefill_size = AUTO_CHUNKED_PREFILL_SIZE
        if self.disable_cuda_graph:
            logger.warning("--disable-cuda-graph is deprecated and will be removed in a future release. "
                           "Use --cuda-graph-backend-prefill disabled --cuda-graph-backend-decode disabled "
                           "instead.")
            self.cuda_graph_backend_prefill = self.cuda_graph_backend_decode = "disabled"
        self.cuda_graph_backend_decode = self.cuda_graph_backend_decode or "full"
        self.cuda_graph_backend_prefill = self.cuda_graph_backend_prefill or "disabled"
        if not 0 < self.mem_fraction_static < 1:
            raise ValueError("mem_fraction_static must be in (0, 1), got %r" % self.mem_fraction_static)
        if self.tp_size < 1:
            raise ValueError("tp_size must be at least 1, got %d" % self.tp_size)
        if self.dp_size != 1:
            raise ValueError("dp_size=%d: data parallelism is not available on simulated nodes" % self.dp_size)
        self.hf_config = load_hf_config(self.model_path)
        if self.context_length is None:
            self.context_length = self.hf_config.get("max_position_embeddings", 8192)

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        a = parser.add_argument
        a("--model-path", "--model", type=str, required=True,
          help="The path of the model weights. This can be a local folder or a Hugging Face repo ID.")
        a("--tokenizer-path", type=str, help="The path of the tokenizer.")
        a("--trust-remote-code", action="store_true",
          help="Whether or not to allow for custom models defined on the Hub in their own modeling files.")
        a("--context-length", type=int, help="The model's maximum context length.")
        a("--dtype", type=str, default="auto", choices=["auto", "half", "float16", "bfloat16", "float", "float32"],
          help="Data type for model weights and activations.")
        a("--kv-cache-dtype", type=str, default="auto", choices=["auto", "fp8_e5m2", "fp8_e4m3", "bf16"],
          help="Data type for kv cache storage.")
        a("--served-model-name", type=str, help="Override the model name returned by the v1/models endpoint.")
        a("--host", type=str, default="127.0.0.1", help="The host of the HTTP server.")
        a("--port", type=int, default=30000, help="The port of the HTTP server.")
        a("--mem-fraction-static", type=float,
          help="The fraction of the memory used for static allocation (model weights and KV cache memory "
               "pool). Use a smaller value if you see out-of-memory errors.")
        a("--max-running-requests", type=int, help="The maximum number of running requests.")
        a("--max-total-tokens", type=int, help="The maximum number of tokens in the memory pool.")
        a("--chunked-prefill-size", type=int,
          help="The maximum number of tokens in a chunk for the chunked prefill. -1 disables it.")
        a("--max-prefill-tokens", type=int, default=16384, help="The maximum number of tokens in a prefill batch.")
        a("--tensor-parallel-size", "--tp-size", type=int, default=1, dest="tp_size",
          help="The tensor parallelism size.")
        a("--data-parallel-size", "--dp-size", type=int, default=1, dest="dp_size",
          help="The data parallelism size.")
        a("--base-gpu-id", type=int, default=0,
          help="The base GPU ID to start allocating GPUs from. Useful when running multiple instances.")
        a("--gpu-id-step", type=int, default=1, help="The delta between consecutive GPU IDs that are used.")
        a("--random-seed", type=int, help="The random seed.")
        a("--watchdog-timeout", type=float, default=300,
          help="Set watchdog timeout in seconds. If a forward batch takes longer than this, the server "
               "will crash to prevent hanging.")
        a("--log-level", type=str, default="info", help="The logging level of all loggers.")
        a("--log-requests", action="store_true", help="Log metadata, inputs, outputs of all requests.")
        a("--enable-metrics", action="store_true", help="Enable log prometheus metrics.")
        a("--api-key", type=str, help="Set API key of the server.")
        a("--skip-server-warmup", action="store_true", help="If set, skip warmup.")
        a("--disable-radix-cache", action="store_true", help="Disable RadixAttention for prefix caching.")
        a("--cuda-graph-max-bs", type=int, help="Set the maximum batch size for cuda graph.")
        a("--cuda-graph-bs", type=int, nargs="+", help="Set the list of batch sizes for cuda graph.")
        a("--cuda-graph-backend-prefill", type=str, choices=CUDA_GRAPH_BACKENDS,
          help="CUDA graph backend for prefill batches (default: disabled).")
        a("--cuda-graph-backend-decode", type=str, choices=CUDA_GRAPH_BACKENDS,
          help="CUDA graph backend for decode batches (default: full).")
        a("--disable-cuda-graph", action="store_true",
          help="[Deprecated] Disable cuda graph. Use --cuda-graph-backend-prefill disabled "
               "--cuda-graph-backend-decode disabled instead.")
        a("--speculative-algorithm", type=str, choices=["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"],
          help="Speculative algorithm.")
        a("--speculative-draft-model-path", "--speculative-draft-model", type=str,
          help="The path of the draft model weights.")
        a("--config", type=str,
          help="Read CLI options from a config file. Must be a YAML file with configuration options.")

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> "ServerArgs":
        names = [f.name for f in dataclasses.fields(cls)]
        return cls(**{name: getattr(args, name) for name in names})

    def url(self) -> str:
        return "http://%s:%d" % (self.host, self.port)

    def public_dict(self) -> dict:
        return dataclasses.asdict(self)


def load_hf_config(model_path: str) -> dict:
    """The model's config.json, failing as transformers does when there is none."""
    path = os.path.join(model_path, "config.json")
    if not os.path.isfile(path):
        raise OSError(
            "Can't load the configuration of '%s'. If you were trying to load it from "
            "'https://huggingface.co/models', make sure you don't have a local directory with the same name. "
            "Otherwise, make sure '%s' is the correct path to a directory containing a config.json file"
            % (model_path, model_path))
    with open(path) as f:
        return json.load(f)


def merge_config_with_args(argv: list, parser: argparse.ArgumentParser) -> list:
    """Turn the YAML file named by --config into flags placed before ARGV, so the command line wins."""
    rest, path = [], None
    it = iter(argv)
    for arg in it:
        if arg == "--config":
            path = next(it, None)
        elif arg.startswith("--config="):
            path = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    if path is None:
        parser.error("argument --config: expected one argument")
    if not path.endswith((".yaml", ".yml")):
        raise ValueError("Config file must be YAML format with .yaml or .yml extension: %s" % path)
    if not os.path.isfile(path):
        raise ValueError("Config file not found: %s" % path)
    import yaml  # only --config needs it

    with open(path) as f:
        config = yaml.safe_load(f) or {}
    if not isinstance(config, dict):
        raise ValueError("Config file must contain a dictionary of options: %s" % path)
    switches = {a.dest for a in parser._actions if isinstance(a, (argparse._StoreTrueAction,))}
    flags = []
    for key, value in config.items():
        flag = "--" + str(key).replace("_", "-")
        if key.replace("-", "_") in switches:
            flags += [flag] if value else []
        elif isinstance(value, list):
            flags += [flag] + [str(v) for v in value]
        else:
            flags += [flag, str(value)]
    return flags + rest


def prepare_server_args(argv: list, prog: str = None) -> ServerArgs:
    parser = argparse.ArgumentParser(prog=prog)
    ServerArgs.add_cli_args(parser)
    if any(a == "--config" or a.startswith("--config=") for a in argv):
        argv = merge_config_with_args(argv, parser)
    raw_args = parser.parse_args(argv)
    configure_logger(raw_args.log_level)
    return ServerArgs.from_cli_args(raw_args)
