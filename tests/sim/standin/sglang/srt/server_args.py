# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The server's arguments, parsed as the played release parses them.

The parser is rebuilt from the release's contract (every option string, dest, nargs, type,
choices, default and action of the real `prepare_server_args` parser: prog "sglang serve",
abbreviations allowed). `--config FILE.yaml` is merged as the release's ConfigArgumentMerger
does. Errors are argparse's: usage and message on stderr, SystemExit(2).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import re
from decimal import Decimal

from sglang.srt import contract

logger = logging.getLogger(__name__)

# Values the stand-in resolves where the real server derives them from the GPU and the model.
AUTO_MEM_FRACTION_STATIC = 0.88
AUTO_CUDA_GRAPH_MAX_BS = 256
AUTO_CHUNKED_PREFILL_SIZE = 8192
DEFAULT_CONTEXT_LENGTH = 8192


# -- argument types (same names as the release's, so argparse's "invalid NAME value" reads the same) --


def human_readable_int(value: str) -> int:
    """sglang/srt/utils/common.py human_readable_int: 25.6k, 1Mi, or a plain integer."""
    value = value.strip()
    si = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if match:
        number, suffix = match.groups()
        if suffix in iec:
            if "." in number:
                raise argparse.ArgumentTypeError(
                    "Decimals are not allowed with IEC suffixes like '%s'. Use an integer IEC value such as "
                    "'%d%s', or an SI value such as '%s%s'." % (suffix, int(Decimal(number)), suffix, number,
                                                                suffix[0]))
            return int(number) * iec[suffix]
        return int(Decimal(number) * si[suffix])
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            "Invalid integer value: '%s'. Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). "
            "Suffixes are case-sensitive." % value)


def json_list_type(value):
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        raise argparse.ArgumentTypeError("Invalid JSON list: %s. Please provide a valid JSON list." % value)


def nullable_str(val: str):
    if not val or val == "None":
        return None
    return val


def parse_cuda_graph_backend_arg(raw: str) -> str:
    if raw == "tc_piecewise":
        raise argparse.ArgumentTypeError("tc_piecewise was removed; select breakable, full, or disabled")
    return raw


def parse_cuda_graph_config_arg(raw: str) -> dict:
    """Only the JSON-object check of the real one (which also validates phases and keys)."""
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError("--cuda-graph-config must be JSON: %s" % e)
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError("--cuda-graph-config must be a JSON object, got %s" % type(parsed).__name__)
    return parsed


TYPES = {
    "str": str, "int": int, "float": float, "json.loads": json.loads,
    "sglang.srt.utils.common.human_readable_int": human_readable_int,
    "sglang.srt.utils.common.json_list_type": json_list_type,
    "sglang.srt.utils.common.nullable_str": nullable_str,
    "sglang.srt.model_executor.cuda_graph_config.parse_cuda_graph_backend_arg": parse_cuda_graph_backend_arg,
    "sglang.srt.model_executor.cuda_graph_config.parse_cuda_graph_config_arg": parse_cuda_graph_config_arg,
}


# -- the release's custom actions (sglang/srt/arg_groups/argparse_actions.py) --


def _deprecated_warning(message: str) -> None:
    logger.warning("\033[1;33m%s\033[0m", message)


def _replacement(new_flag) -> str:
    return " Use '%s' instead." % new_flag if new_flag else ""


class LoRAPathAction(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        paths = []
        for path in values or []:
            path = path.strip()
            paths.append(json.loads(path) if path.startswith("{") and path.endswith("}") else path)
        setattr(namespace, self.dest, paths)


class DeprecatedAction(argparse.Action):
    def __init__(self, option_strings, dest, error_message=None, nargs=0, **kwargs):
        self.error_message = error_message
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        if self.error_message is not None:
            parser.error(self.error_message)
        _deprecated_warning("The command line argument '%s' is deprecated and will be removed in future versions."
                            % option_string)


class DeprecatedStoreTrueAction(argparse.Action):
    def __init__(self, option_strings, dest, new_flag=None, nargs=0, const=True, default=False, **kwargs):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, nargs=nargs, const=const, default=default, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        _deprecated_warning("'%s' is deprecated and will be removed in a future release.%s"
                            % (option_string, _replacement(self.new_flag)))
        setattr(namespace, self.dest, True)


class DeprecatedStoreConstAction(argparse.Action):
    def __init__(self, option_strings, dest, new_flag=None, const_value=None, nargs=0, default=None, **kwargs):
        self.new_flag = new_flag
        self.const_value = const_value
        super().__init__(option_strings, dest, nargs=nargs, default=default, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        _deprecated_warning("'%s' is deprecated and will be removed in a future release.%s"
                            % (option_string, _replacement(self.new_flag)))
        setattr(namespace, self.dest, self.const_value)


class DeprecatedAliasStoreAction(argparse.Action):
    def __init__(self, option_strings, dest, new_flag=None, **kwargs):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        _deprecated_warning("'%s' is deprecated and will be removed in a future release.%s"
                            % (option_string, _replacement(self.new_flag)))
        setattr(namespace, self.dest, values)


ACTIONS = {"store": "store", "store_true": "store_true", "store_false": "store_false",
           "store_const": "store_const", "append": "append", "count": "count",
           "boolean_optional": argparse.BooleanOptionalAction, "LoRAPathAction": LoRAPathAction,
           "DeprecatedAction": DeprecatedAction, "DeprecatedStoreTrueAction": DeprecatedStoreTrueAction,
           "DeprecatedStoreConstAction": DeprecatedStoreConstAction,
           "DeprecatedAliasStoreAction": DeprecatedAliasStoreAction}


def _add_option(parser: argparse.ArgumentParser, opt: dict) -> None:
    kind = opt["action"]
    names = opt["option_strings"]
    kwargs = {"dest": opt["dest"], "help": argparse.SUPPRESS if opt["help_suppressed"] else opt["help"]}
    if kind == "boolean_optional":  # argparse adds the --no- spellings itself
        names = [n for n in names if not n.startswith("--no-")]
    if kind in ("store", "append", "DeprecatedAliasStoreAction", "LoRAPathAction") or (
            kind == "DeprecatedStoreConstAction" and opt["nargs"] is None):
        kwargs.update(nargs=opt["nargs"], type=TYPES[opt["type"]] if opt["type"] else None, choices=opt["choices"],
                      metavar=opt["metavar"])
    if kind in ("store_const", "append_const"):
        kwargs["const"] = opt["const"]
    elif kind == "store" and opt["const"] is not None:
        kwargs["const"] = opt["const"]
    for extra in ("new_flag", "const_value", "error_message"):
        if extra in opt:
            kwargs[extra] = opt[extra]
    if kind == "DeprecatedStoreConstAction" and opt["nargs"] is None:
        kwargs["nargs"] = None
    if kind != "DeprecatedAction" or opt["default"] is not None:
        kwargs["default"] = opt["default"]
    if opt["required"]:
        kwargs["required"] = True
    kwargs = {k: v for k, v in kwargs.items() if not (v is None and k in ("type", "choices", "metavar"))}
    parser.add_argument(*names, action=ACTIONS[kind], **kwargs)


def build_parser(release: str = None) -> argparse.ArgumentParser:
    """The release's `prepare_server_args` parser, rebuilt from its contract."""
    spec = contract.load(release)
    facts = spec["parser"]
    parser = argparse.ArgumentParser(prog=facts["prog"], allow_abbrev=facts["allow_abbrev"])
    for opt in spec["options"]:
        if opt["action"] != "help":
            _add_option(parser, opt)
    return parser


# -- --config (sglang/srt/utils/server_args_config_parser.py; 0.5.14: sglang/srt/server_args_config_parser.py) --


def _config_keys(action: argparse.Action, every_spelling: bool) -> set:
    keys = {action.dest}
    if every_spelling:
        keys |= {o[2:].replace("-", "_") for o in action.option_strings if o.startswith("--")}
    return keys


class ConfigArgumentMerger:
    """YAML keys become `--KEY` verbatim, placed before the command line (so the command line wins)."""

    def __init__(self, parser: argparse.ArgumentParser, variant: str):
        every = variant != "0.5.14"  # 0.5.23 accepts any long spelling of a flag as a key
        self.store_true_actions = {k for a in parser._actions if isinstance(a, argparse._StoreTrueAction)
                                   for k in _config_keys(a, every)}
        if every:
            supported = [a for a in parser._actions if isinstance(a, argparse._StoreTrueAction)
                         or isinstance(a, argparse._StoreAction) or a.nargs is None]
            supported_keys = {k for a in supported for k in _config_keys(a, True)}
        else:
            supported = [a for a in parser._actions if isinstance(a, (argparse._StoreTrueAction,
                                                                      argparse._StoreAction))]
            supported_keys = set()
        self.unsupported_actions = {
            k: a for a in parser._actions
            if a.option_strings and a not in supported
            and not {"--config", "--help", "-h"} & set(a.option_strings)
            for k in _config_keys(a, every) if k not in supported_keys}

    def merge_config_with_args(self, cli_args: list) -> list:
        indices = [i for i, arg in enumerate(cli_args) if arg == "--config"]
        if len(indices) > 1:
            raise ValueError("Multiple config files specified! Only one allowed.")
        if not indices:
            return cli_args
        index = indices[0]
        if index == len(cli_args) - 1:
            raise ValueError("No config file specified after --config flag!")
        config = self._parse_yaml_config(cli_args[index + 1])
        return self._convert_config_to_args(config) + cli_args[:index] + cli_args[index + 2:]

    @staticmethod
    def _parse_yaml_config(file_path: str) -> dict:
        suffix = os.path.splitext(file_path)[1]
        if suffix.lower() not in (".yaml", ".yml"):
            raise ValueError("Config file must be YAML format, got: %s" % suffix)
        if not os.path.exists(file_path):
            raise ValueError("Config file not found: %s" % file_path)
        import yaml  # only --config needs it

        with open(file_path) as f:
            data = yaml.safe_load(f)
        data = {} if data is None else data
        if not isinstance(data, dict):
            raise ValueError("Config file must contain a dictionary at root level")
        return data

    def _convert_config_to_args(self, config: dict) -> list:
        args = []
        for key, value in config.items():
            norm = key.replace("-", "_")
            if norm in self.unsupported_actions:
                raise ValueError("Unsupported config option '%s' with action '%s'"
                                 % (norm, self.unsupported_actions[norm].__class__.__name__))
            if isinstance(value, bool):
                if norm in self.store_true_actions:
                    args += ["--%s" % key] if value else []
                else:
                    args += ["--%s" % key, str(value).lower()]
            elif isinstance(value, list):
                args += (["--%s" % key] + [str(v) for v in value]) if value else []
            elif isinstance(value, dict):
                args += ["--%s" % key, json.dumps(value)]
            else:
                args += ["--%s" % key, str(value)]
        return args


# -- the arguments --


class ServerArgs:
    """Every dest of the release's parser as an attribute, plus the values the stand-in resolves."""

    def __init__(self, **fields):
        self.__dict__.update(fields)
        self.launch_command = None
        self.hf_config = None

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        """Every option of the release's parser, added to PARSER (0.5.23 and 0.5.14 server_args.py
        ServerArgs.add_cli_args, a staticmethod that the SGLang Model Gateway's co-launcher,
        sglang_router/launch_server.py main(), calls on a parser of its own)."""
        for opt in contract.load()["options"]:
            if opt["action"] != "help":
                _add_option(parser, opt)

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> "ServerArgs":
        return cls(**vars(args))

    def resolve(self) -> "ServerArgs":
        """Fill what the real server derives at start (0.5.23: resolution at launch; 0.5.14: __post_init__)."""
        if self.hf_config is not None:
            return self
        self.hf_config = load_hf_config(self.model_path)
        self.tokenizer_path = self.tokenizer_path or self.model_path
        self.served_model_name = self.served_model_name or self.model_path
        if self.random_seed is None:
            self.random_seed = random.randint(0, 1 << 30)
        if self.mem_fraction_static is None:
            self.mem_fraction_static = AUTO_MEM_FRACTION_STATIC
        if getattr(self, "cuda_graph_max_bs_decode", None) is None:
            self.cuda_graph_max_bs_decode = AUTO_CUDA_GRAPH_MAX_BS
        if self.chunked_prefill_size is None:
            self.chunked_prefill_size = AUTO_CHUNKED_PREFILL_SIZE
        if self.disable_cuda_graph:
            self.cuda_graph_backend_decode = self.cuda_graph_backend_prefill = "disabled"
        self.cuda_graph_backend_decode = self.cuda_graph_backend_decode or "full"
        self.cuda_graph_backend_prefill = self.cuda_graph_backend_prefill or "breakable"
        if self.context_length is None:
            self.context_length = self.hf_config.get("max_position_embeddings", DEFAULT_CONTEXT_LENGTH)
        return self

    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return "http://%s:%d" % (host, self.port)

    def field_values(self, keys) -> dict:
        """KEYS with this record's values; fields the stand-in has no value for are None."""
        return {key: _plain(getattr(self, key, None)) for key in keys}

    def __repr__(self) -> str:
        fields = ", ".join("%s=%r" % (k, v) for k, v in self.__dict__.items() if k != "hf_config")
        return "ServerArgs(%s)" % fields


def _plain(value):
    return value if isinstance(value, (type(None), bool, int, float, str, list, dict)) else str(value)


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


def prepare_server_args(argv: list) -> ServerArgs:
    """Parse ARGV as the played release's `sglang.srt.server_args.prepare_server_args` does."""
    spec = contract.load()
    parser = build_parser()
    if "--config" in argv:  # an exact element: "--config=FILE" is left to argparse, as in the release
        argv = ConfigArgumentMerger(parser, spec["config_file"]["variant"]).merge_config_with_args(argv)
    raw_args = parser.parse_args(argv)
    logging.basicConfig(level=getattr(logging, raw_args.log_level.upper()), format="[%(asctime)s] %(message)s",
                        datefmt="%Y-%m-%d %H:%M:%S", force=True)
    server_args = ServerArgs.from_cli_args(raw_args)
    server_args.launch_command = " ".join(argv)
    if not contract.at_least("0.5.23"):
        server_args.resolve()  # 0.5.14 resolves in ServerArgs.__post_init__ (it reads the model's config)
    return server_args
