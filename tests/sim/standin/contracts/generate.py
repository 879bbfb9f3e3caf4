#!/usr/bin/env python
# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Write the contract of one SGLang release, read from its wheel, for the stand-in to play.

    python3 generate.py sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl -o sglang-0.5.23.json
    python3 generate.py SRC_DIR --wheel-file WHEEL -o sglang-0.5.23.json   # an unpacked wheel

Run by hand when a release is added, in a Python 3.11 with msgspec, pyyaml and dill (the
argument layer's own light dependencies). The command-line parser is SGLang's own: the
script imports `sglang.srt.server_args`, builds the parser the way `prepare_server_args`
does, and records every action. Heavy modules it does not need (torch, transformers, ...)
are replaced by inert stubs while importing; the script fails if a stub leaks into a
recorded value. Everything else (endpoints, /server_info keys, metric names, shutdown
timings) is read from the source and checked against it: when a pattern is no longer
found the script stops, so a new release gets read again instead of copied forward.
"""

from __future__ import annotations

import abc
import argparse
import ast
import hashlib
import importlib
import importlib.abc
import importlib.machinery
import json
import os
import re
import sys
import tempfile
import types
import zipfile

GENERATOR_VERSION = 3

# Third-party modules replaced by stubs while the argument layer is imported.
STUBBED = ("torch", "torchvision", "triton", "transformers", "numpy", "psutil", "orjson", "pybase64", "requests",
           "packaging", "PIL", "starlette", "typing_extensions", "pydantic", "pydantic_core", "zmq", "IPython",
           "tqdm", "safetensors", "openai", "partial_json_parser", "huggingface_hub", "sentencepiece")
# Accelerator probes answer as a CUDA machine (the platform the roles target) would.
FIXED = {
    "torch.cuda.is_available": lambda: True,
    "torch.version.hip": None,
    "torch.version.cuda": "12.8",
    "torch.cuda.get_device_name": lambda *a: "NVIDIA H200",
    "torch.cuda.get_device_capability": lambda *a: (9, 0),
    "torch.cuda.device_count": lambda: 8,
    "triton.runtime.driver.active.get_current_target":
        lambda: types.SimpleNamespace(backend="cuda", arch=90, warp_size=32),
}
ABSENT = ("npu", "mlu", "musa", "hpu")  # torch.npu etc.: vendor builds only


# ---------------------------------------------------------------- stubs


class _StubType(abc.ABCMeta):
    """Any attribute, call, index or arithmetic on a stub gives another stub."""

    def __new__(mcls, name, bases, ns, **kwargs):
        return super().__new__(mcls, name, bases, ns)

    def __init__(cls, name, bases, ns, **kwargs):
        super().__init__(name, bases, ns)

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        qual = cls.__qualname__ + "." + name
        return FIXED[qual] if qual in FIXED else _stub(qual)

    def __call__(cls, *args, **kwargs):
        if not cls.__dict__.get("_is_stub"):
            return super().__call__(*args, **kwargs)
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator
        return _stub(cls.__qualname__ + "()")

    def register(cls, *args, **kwargs):
        return args[-1] if args else cls

    def __getitem__(cls, key):
        return cls

    def __setitem__(cls, key, value):
        pass

    def __iter__(cls):
        return iter(())

    def __contains__(cls, item):
        return False

    def __bool__(cls):
        return False

    def __neg__(cls):
        return cls

    def __add__(cls, other):
        return cls

    __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = __floordiv__ = __pow__ = __add__
    __or__ = __ror__ = __add__

    def __lt__(cls, other):
        return False

    __le__ = __gt__ = __ge__ = __lt__

    def __eq__(cls, other):
        return cls is other

    def __hash__(cls):
        return id(cls)

    def __int__(cls):
        return 0

    __index__ = __int__

    def __float__(cls):
        return 0.0


def _stub(qual: str) -> type:
    module = qual.rsplit(".", 1)[0]
    return _StubType(qual, (), {"_is_stub": True, "__qualname__": qual, "__module__": module,
                                "__getattr__": lambda self, n: _stub(qual + "." + n),
                                "__iter__": lambda self: iter(()),
                                "__call__": lambda self, *a, **k: _stub(qual + "()")})


def _is_stub(value) -> bool:
    return isinstance(value, _StubType) or isinstance(type(value), _StubType) or isinstance(value, _StubModule)


class _StubModule(types.ModuleType):
    __path__ = []

    def __getattr__(self, name):
        if name == "__version__":
            return "2.9.0"
        if name in ABSENT:
            raise AttributeError(name)
        qual = self.__name__ + "." + name
        if qual in FIXED:
            return FIXED[qual]
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _stub(qual)
        setattr(self, name, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] not in STUBBED:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        return _StubModule(spec.name)

    def exec_module(self, module):
        pass


def import_argument_layer(src: str):
    """Import sglang.srt.server_args from SRC without running sglang/__init__.py (it loads the runtime)."""
    sys.path.insert(0, src)
    sys.meta_path.insert(0, _StubFinder())
    package = types.ModuleType("sglang")
    package.__path__ = [os.path.join(src, "sglang")]
    package.__spec__ = importlib.machinery.ModuleSpec("sglang", None, is_package=True)
    package.__spec__.submodule_search_locations = package.__path__
    sys.modules["sglang"] = package

    return importlib.import_module("sglang.srt.server_args")


# ---------------------------------------------------------------- the parser

BUILTIN_ACTIONS = {"_StoreAction": "store", "_StoreTrueAction": "store_true", "_StoreFalseAction": "store_false",
                   "_StoreConstAction": "store_const", "_AppendAction": "append", "_AppendConstAction": "append_const",
                   "_CountAction": "count", "_HelpAction": "help", "_VersionAction": "version",
                   "BooleanOptionalAction": "boolean_optional"}


def _jsonable(value):
    if _is_stub(value):
        raise RuntimeError("a stub leaked into the contract: %r" % (value,))
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(_jsonable(v) for v in value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if hasattr(value, "value") and isinstance(getattr(value, "value"), (str, int)):  # Enum
        return value.value
    raise RuntimeError("cannot record %r (%s) in the contract" % (value, type(value).__name__))


def _type_name(func) -> str:
    if func is None:
        return None
    if _is_stub(func):
        raise RuntimeError("a stub leaked into the contract as an argument type: %r" % (func,))
    name = getattr(func, "__name__", None) or type(func).__name__
    module = getattr(func, "__module__", "")
    return name if module == "builtins" else "%s.%s" % (module, name)


def describe_action(action: argparse.Action) -> dict:
    kind = BUILTIN_ACTIONS.get(type(action).__name__, type(action).__name__)
    entry = {
        "option_strings": list(action.option_strings),
        "dest": action.dest,
        "action": kind,
        "nargs": action.nargs,
        "const": _jsonable(action.const),
        "default": _jsonable(action.default),
        "type": _type_name(action.type),
        "choices": None if action.choices is None else _jsonable(list(action.choices)
                                                                 if not isinstance(action.choices, (set, frozenset))
                                                                 else action.choices),
        "required": bool(action.required),
        "metavar": _jsonable(action.metavar),
        "help": None if action.help == argparse.SUPPRESS else action.help,
        "help_suppressed": action.help == argparse.SUPPRESS,
        "deprecated": kind.startswith("Deprecated"),
    }
    for extra in ("new_flag", "const_value", "error_message"):
        if hasattr(action, extra):
            entry[extra] = _jsonable(getattr(action, extra))
    return entry


def read_parser(server_args_module) -> tuple:
    """Build the parser as prepare_server_args does; return (parser facts, option list, ServerArgs field names)."""
    source = _function_source(server_args_module.__file__, "prepare_server_args")
    match = re.search(r"argparse\.ArgumentParser\(([^)]*)\)", source)
    if not match:
        raise RuntimeError("prepare_server_args no longer builds an argparse.ArgumentParser")
    ctor_args = match.group(1)
    prog = re.search(r'prog="([^"]*)"', ctor_args).group(1)
    parser = argparse.ArgumentParser(prog=prog)
    server_args_module.ServerArgs.add_cli_args(parser)
    facts = {
        "prog": prog,
        "allow_abbrev": parser.allow_abbrev and "allow_abbrev" not in ctor_args,
        "constructor": "argparse.ArgumentParser(%s)" % ctor_args,
        "config_trigger": "exact argv element '--config'" if '"--config" in argv' in source else None,
        "errors": "argparse: usage and 'PROG: error: MESSAGE' on stderr, SystemExit(2)",
        "source": "sglang/srt/server_args.py prepare_server_args",
    }
    if facts["config_trigger"] is None:
        raise RuntimeError("prepare_server_args no longer tests '\"--config\" in argv'")
    options = [describe_action(a) for a in parser._actions]
    facts["examples"] = parse_examples(parser)
    facts["config_examples"] = config_examples(parser)
    cls = server_args_module.ServerArgs
    try:
        import msgspec

        fields = [f.name for f in msgspec.structs.fields(cls)]
    except TypeError:
        import dataclasses

        fields = [f.name for f in dataclasses.fields(cls)]
    return facts, options, fields


# ---------------------------------------------------------------- answers of the real code
# Command lines and --config files run through the release's own parser and ConfigArgumentMerger;
# the contract keeps what they answered, and the stand-in's tests replay them.

PARSE_EXAMPLES = (
    ["--model-path", "/m"],
    ["--model", "/m", "--tp", "2", "--port", "31000", "--host", "0.0.0.0"],
    ["--model-path", "/m", "--cuda-graph-max-bs", "160"],
    ["--model-path", "/m", "--cuda-graph-max-bs-decode", "160"],
    ["--model-path", "/m", "--cuda-graph-max-bs-dec", "160"],
    ["--model-path", "/m", "--cuda-graph-bs", "1", "2", "4"],
    ["--model-path", "/m", "--disable-cuda-graph"],
    ["--model-path", "/m", "--enable-cuda-graph"],
    ["--model-path", "/m", "--cuda-graph-backend-decode", "tc_piecewise"],
    ["--model-path", "/m", "--cuda-graph-backend-prefill", "sometimes"],
    ["--model-path", "/m", "--mem-fraction-static", "1.5"],
    ["--model-path", "/m", "--mem-fraction-static", "high"],
    ["--model-path", "/m", "--max-prefill-tokens", "16k"],
    ["--model-path", "/m", "--context-length", "1.5Ki"],
    ["--model-path", "/m", "--enable-metrics", "--api-key", "k", "--log-level", "warning"],
    ["--model-path", "/m", "--served-model-name", "s", "--speculative-algorithm", "EAGLE3"],
    ["--model-path", "/m", "--config=/etc/sglang.yaml"],
    ["--model_path", "/m"],
    ["--tp-size", "2"],
)

CONFIG_EXAMPLES = (
    {"model-path": "/m", "cuda-graph-max-bs-decode": 160},
    {"model-path": "/m", "cuda-graph-max-bs": 160},
    {"model_path": "/m", "tp_size": 2},
    {"model-path": "/m", "tensor-parallel-size": 2, "enable-metrics": True, "skip-server-warmup": False},
    {"model-path": "/m", "cuda-graph-bs-decode": [1, 2, 4]},
    {"model-path": "/m", "disable-cuda-graph": True},
    {"model-path": "/m", "mem-fraction-static": 0.9, "api-key": "k", "json-model-override-args": {"a": 1}},
    {"model-path": "/m", "lora-paths": ["a", "b"]},
)
CONFIG_CLI = ["--port", "31000"]


def _changed(parser: argparse.ArgumentParser, namespace: argparse.Namespace) -> dict:
    defaults = {}
    for action in parser._actions:  # argparse takes a shared dest's default from its first action
        defaults.setdefault(action.dest, action.default)
    return {k: _jsonable(v) for k, v in sorted(vars(namespace).items())
            if k in defaults and v != defaults[k]}


def _parse(parser: argparse.ArgumentParser, argv: list) -> dict:
    import contextlib
    import io

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            namespace = parser.parse_args(argv)
    except SystemExit as e:
        lines = [line for line in err.getvalue().splitlines() if line.startswith(parser.prog + ": error:")]
        return {"exit": e.code, "error": lines[-1] if lines else err.getvalue().strip()[-300:]}
    return {"exit": None, "changed": _changed(parser, namespace)}


def parse_examples(parser: argparse.ArgumentParser) -> list:
    return [dict(argv=list(argv), **_parse(parser, list(argv))) for argv in PARSE_EXAMPLES]


def config_examples(parser: argparse.ArgumentParser) -> list:
    import yaml

    try:
        from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger
    except ImportError:
        from sglang.srt.server_args_config_parser import ConfigArgumentMerger
    result = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "server.yaml")
        for doc in CONFIG_EXAMPLES:
            with open(path, "w") as f:
                yaml.safe_dump(doc, f, sort_keys=False)
            entry = {"yaml": doc, "cli": ["--config", "FILE"] + CONFIG_CLI}
            try:
                entry["argv"] = ConfigArgumentMerger(parser).merge_config_with_args(["--config", path] + CONFIG_CLI)
            except ValueError as e:
                entry["error"] = "ValueError: %s" % e
            result.append(entry)
    return result


# ---------------------------------------------------------------- source reading


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _find_def(tree, name: str):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    return None


def _function_source(path: str, name: str) -> str:
    text = _read(path)
    node = _find_def(ast.parse(text), name)
    if node is None:
        raise RuntimeError("%s: no function %s" % (path, name))
    return ast.get_source_segment(text, node)


def emitted_keys(path: str, name: str) -> dict:
    """String keys a function puts into dicts: {key: 'always' | 'conditional'} (a key set under an if/for)."""
    text = _read(path)
    func = _find_def(ast.parse(text), name)
    if func is None:
        raise RuntimeError("%s: no function %s" % (path, name))
    keys = {}

    def visit(node, conditional):
        for child in ast.iter_child_nodes(node):
            branch = isinstance(node, (ast.If, ast.For, ast.While, ast.IfExp)) and child not in (
                getattr(node, "test", None), getattr(node, "iter", None))
            cond = conditional or branch
            if isinstance(child, ast.Dict):
                for key in child.keys:
                    if isinstance(key, ast.Constant) and isinstance(key.value, str):
                        keys.setdefault(key.value, "conditional" if cond else "always")
            if isinstance(child, (ast.Assign, ast.AugAssign)):
                targets = child.targets if isinstance(child, ast.Assign) else [child.target]
                for target in targets:
                    if (isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant)
                            and isinstance(target.slice.value, str)):
                        keys.setdefault(target.slice.value, "conditional" if cond else "always")
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, cond)

    visit(func, False)
    return keys


def require(path: str, pattern: str, where: str = None) -> re.Match:
    """The first match of PATTERN in PATH (or in function WHERE of it); stop when it is gone."""
    text = _function_source(path, where) if where else _read(path)
    match = re.search(pattern, text, re.S)
    if not match:
        raise RuntimeError("%s%s: pattern %r not found; read the release again"
                           % (path, (" " + where) if where else "", pattern))
    return match


def routes(path: str) -> dict:
    """Every route of a FastAPI module: {path: {'methods': [...], 'function': name}}."""
    tree = ast.parse(_read(path))
    found = {}
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for deco in node.decorator_list:
            if not (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute)):
                continue
            kind = deco.func.attr
            if kind not in ("get", "post", "put", "delete", "api_route") or not deco.args:
                continue
            first = deco.args[0]
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                continue
            if kind == "api_route":
                methods = next((ast.literal_eval(k.value) for k in deco.keywords if k.arg == "methods"), ["GET"])
            else:
                methods = [kind.upper()]
            entry = found.setdefault(first.value, {"methods": [], "function": node.name})
            entry["methods"] = sorted(set(entry["methods"]) | set(methods))
    return found


# ---------------------------------------------------------------- the release's behaviour


def first_existing(src: str, *candidates) -> str:
    for rel in candidates:
        if os.path.exists(os.path.join(src, rel)):
            return rel
    raise RuntimeError("none of %s in %s" % (", ".join(candidates), src))


def read_config_merge(src: str) -> dict:
    rel = first_existing(src, "sglang/srt/utils/server_args_config_parser.py", "sglang/srt/server_args_config_parser.py")
    path = os.path.join(src, rel)
    require(path, r'return config_args \+ before_config \+ after_config', "merge_config_with_args")
    require(path, r'args\.append\(f"--\{key\}"\)', "_add_boolean_arg")
    require(path, r'args\.extend\(\[f"--\{key\}", str\(value\)\]\)', "_add_scalar_arg")
    multi_spelling = "_config_keys" in _read(path)
    return {
        "source": "%s ConfigArgumentMerger" % rel,
        "key_to_flag": "verbatim: '--' + KEY (model_path -> --model_path, which argparse refuses)",
        "precedence": "config flags are placed before the command line, so the command line wins",
        "booleans": "store_true: true -> --KEY, false -> nothing; other booleans -> --KEY true|false",
        "lists": "--KEY ITEM ... (an empty list adds nothing)",
        "dicts": "--KEY JSON",
        "file_checks": ["suffix .yaml or .yml (ValueError)", "file exists (ValueError)",
                        "root must be a mapping (ValueError)", "one --config only (ValueError)",
                        "a path must follow --config (ValueError)"],
        "unsupported_keys": ("keys of actions other than store/store_true and other single-value actions "
                             "(any long spelling)" if multi_spelling else
                             "dests of actions other than store and store_true") + " raise ValueError",
        "variant": "0.5.23" if multi_spelling else "0.5.14",
    }


def read_server_info(src: str, fields: list) -> dict:
    http = os.path.join(src, "sglang/srt/entrypoints/http_server.py")
    sched = os.path.join(src, "sglang/srt/managers/scheduler.py")
    handler = _function_source(http, "server_info")
    keys, sources = {}, {}

    def add(found: dict, source: str):
        for key, when in found.items():
            if when == "always" and key not in keys:
                keys[key] = source
            elif when != "always":
                sources.setdefault("conditional", {})[key] = source

    if "build_server_info(" in handler:  # 0.5.23 and later
        common = os.path.join(src, "sglang/srt/utils/common.py")
        require(common, r"server_args\.resolved_dict\(\)", "build_server_info")
        require(common, r"result\.update\(scheduler_info\)", "build_server_info")
        args_source = "sglang/srt/server_args.py ServerArgs.resolved_dict (every field)"
        for name in fields:
            keys[name] = args_source
        add(emitted_keys(os.path.join(src, "sglang/srt/server_args.py"), "resolved_dict"),
            "sglang/srt/server_args.py ServerArgs.resolved_dict")
        add(emitted_keys(common, "build_server_info"), "sglang/srt/utils/common.py build_server_info")
    else:  # 0.5.14: dataclasses.asdict(server_args)
        require(http, r"\*\*dataclasses\.asdict\(server_args\)", "server_info")
        for name in fields:
            keys[name] = "sglang/srt/server_args.py ServerArgs (dataclasses.asdict)"
    require(http, r"\*\*(?:_global_state\.scheduler_info|build_server_info\(server_args, _global_state\.scheduler_info\))",
            "server_info")
    add(emitted_keys(sched, "get_init_info"), "sglang/srt/managers/scheduler.py Scheduler.get_init_info")
    add(emitted_keys(http, "server_info"), "sglang/srt/entrypoints/http_server.py server_info")
    return {"keys": sorted(keys), "key_sources": {k: v for k, v in sorted(keys.items()) if k not in fields},
            "conditional_keys": sources.get("conditional", {}),
            "server_args_fields": len(fields),
            "source": "sglang/srt/entrypoints/http_server.py server_info"}


def read_internal_state(src: str) -> dict:
    component = os.path.join(src, "sglang/srt/managers/scheduler_components/internal_state.py")
    if os.path.exists(component):  # 0.5.23
        path, rel = component, "sglang/srt/managers/scheduler_components/internal_state.py"
        require(path, r"resolved_server_args_dict\(\)", "get_internal_state")
        found = {}
        for func in ("_add_topology", "_add_memory_usage"):
            found.update({k: rel + " " + func for k, w in emitted_keys(path, func).items() if w == "always"})
        base = "every /server_info server-args key (get_context().resolved_server_args_dict())"
    else:
        path, rel = os.path.join(src, "sglang/srt/managers/scheduler.py"), "sglang/srt/managers/scheduler.py"
        require(path, r"dict\(vars\(get_global_server_args\(\)\)\)", "get_internal_state")
        found = {k: rel + " get_internal_state" for k, w in emitted_keys(path, "get_internal_state").items()
                 if w == "always" and k not in ("weight", "kvcache", "token_capacity", "graph")}
        base = "vars(server_args): every server-args field"
    found.pop("model_config", None)
    return {"base": base, "added_keys": found, "per": "one entry per DP rank",
            "carries_request_counts": any(k in found for k in ("num_running_reqs", "num_waiting_reqs")),
            "source": rel + " get_internal_state"}


def read_loads(src: str) -> dict:
    path = os.path.join(src, "sglang/srt/entrypoints/v1_loads.py")
    func = _find_def(ast.parse(_read(path)), "get_loads")
    params = [a.arg for a in func.args.args if a.arg != "tokenizer_manager"]
    top = emitted_keys(path, "get_loads")
    snapshot = importlib.import_module("sglang.srt.managers.load_snapshot")
    core = list(snapshot.LoadSnapshot().to_dict({"core"}))  # the release's own to_dict
    if hasattr(snapshot, "_SECTION_FIELDS"):
        sections = sorted(snapshot._SECTION_FIELDS)
    else:
        sections = sorted(entry[1] for entry in snapshot.SECTION_FIELDS)
    return {
        "path": "/v1/loads", "method": "GET", "query": params,
        "top_keys": sorted(top), "load_keys": core, "section_keys": sections,
        "include_values": sorted(snapshot.LoadSnapshot.VALID_SECTIONS),
        "default_include": "all (every section the scheduler reports)",
        "bad_include": "400 {'detail': 'Invalid include sections: ...'}",
        "per": "one entry per DP rank",
        "source": "sglang/srt/entrypoints/v1_loads.py get_loads; sglang/srt/managers/load_snapshot.py "
                  "LoadSnapshot.to_dict",
    }


def read_metrics(src: str) -> dict:
    path = os.path.join(src, "sglang/srt/observability/metrics_collector.py")
    names = {}
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs"):
        require(path, r'name="%s"' % re.escape(name))
        names[name] = "gauge"
    labels_match = require(path, r'labels = \{\s*"model_name":[^}]*"engine_type":[^}]*"tp_rank":[^}]*"pp_rank":'
                                 r'[^}]*"moe_ep_rank":[^}]*\}')
    labels = re.findall(r'"(\w+)":', labels_match.group(0))
    http = os.path.join(src, "sglang/srt/entrypoints/http_server.py")
    require(http, r"if (?:get_observability\(\)|server_args)\.enable_metrics:\s*add_prometheus_middleware\(app\)")
    return {"gauges": names, "labels": labels,
            "optional_labels": ["priority (with priority scheduling)", "dp_rank (with data parallelism)"],
            "mounted": "only with --enable-metrics (add_prometheus_middleware mounts /metrics); "
                       "otherwise the app has no /metrics route: 404",
            "source": "sglang/srt/observability/metrics_collector.py SchedulerMetricsCollector"}


def read_endpoints(src: str) -> dict:
    http = os.path.join(src, "sglang/srt/entrypoints/http_server.py")
    found = routes(http)
    require(http, r"app\.include_router\(v1_loads_router\)")
    found.update(routes(os.path.join(src, "sglang/srt/entrypoints/v1_loads.py")))
    wanted = ("/health", "/health_generate", "/ready", "/model_info", "/get_model_info", "/server_info",
              "/get_server_info", "/v1/loads", "/get_load", "/generate", "/v1/completions", "/v1/chat/completions",
              "/v1/models", "/abort_request", "/pause_generation", "/flush_cache", "/release_memory_occupation")
    result = {}
    for path in wanted:
        if path in found:
            result[path] = dict(found[path], deprecated=path.startswith("/get_"))
    generate = require(http, r'@app\.api_route\(\s*"/generate",\s*methods=(\[[^\]]*\])').group(1)
    result["/generate"] = {"methods": sorted(ast.literal_eval(generate)), "function": "generate_request",
                           "deprecated": False}
    result["/metrics"] = {"methods": ["GET"], "function": "add_prometheus_middleware (mount)", "deprecated": False,
                          "only_with": "--enable-metrics"}
    return {"routes": result, "source": "sglang/srt/entrypoints/http_server.py (route decorators)"}


def read_health(src: str) -> dict:
    http = os.path.join(src, "sglang/srt/entrypoints/http_server.py")
    timeout = require(http, r'HEALTH_CHECK_TIMEOUT = int\(os\.getenv\("SGLANG_HEALTH_CHECK_TIMEOUT", (\d+)\)\)')
    require(http, r'@app\.get\("/health"\)\s*@app\.get\("/health_generate"\)')
    require(http, r"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "health_generate")
    require(http, r"await asyncio\.sleep\(1\)", "health_generate")
    require(http, r'max_new_tokens": 1', "health_generate")
    prefix = require(os.path.join(src, "sglang/srt/constants.py"), r'HEALTH_CHECK_RID_PREFIX = "([^"]+)"').group(1)
    env = require(os.path.join(src, "sglang/srt/environ.py"), r"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION = EnvBool\((\w+)\)")
    return {"shared_handler": ["/health", "/health_generate"], "generates": "one token (input_ids [0])",
            "generation_env": "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "generation_default": env.group(1) == "True",
            "rid": prefix + "_<uuid4 hex>", "poll_s": 1, "timeout_env": "SGLANG_HEALTH_CHECK_TIMEOUT",
            "timeout_default_s": int(timeout.group(1)),
            "unavailable": "503 while server_status is Starting or gracefully_exit is set",
            "source": "sglang/srt/entrypoints/http_server.py health_generate"}


def read_auth(src: str) -> dict:
    path = os.path.join(src, "sglang/srt/utils/auth.py")
    block = require(path, r"if \(?\s*path\.startswith\(\"/health\"\)[^:]*:\s*return AuthDecision\(allowed=True\)",
                    "decide_request_auth").group(0)
    open_prefixes = re.findall(r'path\.startswith\("([^"]+)"\)', block)
    require(path, r'"Unauthorized"\s*if decision\.error_status_code == 401', "add_api_key_middleware")
    require(path, r'parts\[0\]\.lower\(\) != "bearer"', "decide_request_auth")
    return {"open_prefixes": open_prefixes, "header": "Authorization: Bearer <api-key> (scheme case-insensitive)",
            "status": 401, "body": {"error": "Unauthorized"},
            "applies_to": "every other path, any method but OPTIONS, when --api-key is set",
            "source": "sglang/srt/utils/auth.py decide_request_auth, add_api_key_middleware"}


def read_shutdown(src: str) -> dict:
    tm = os.path.join(src, "sglang/srt/managers/tokenizer_manager.py")
    where = "sigterm_watchdog"
    wake = int(require(tm, r"while not self\.gracefully_exit:\s*await asyncio\.sleep\((\d+)\)", where).group(1))
    poll = int(require(tm, r"if remain_num_req > 0:\s*await asyncio\.sleep\((\d+)\)", where).group(1))
    require(tm, r'get_bool_env_var\("SGL_FORCE_SHUTDOWN"\)', where)
    require(tm, r"ShutdownReq\(\)", where)
    cap = require(tm, r"deadline = time\.monotonic\(\) \+ (\w+)", where).group(1)
    if not cap.isdigit():
        cap_name = cap
        cap = require(tm, r"(?m)^%s = (\d+)" % cap_name).group(1)
    else:
        cap_name = None
    kill = require(tm, r"kill_process_tree\(os\.getpid\(\), include_parent=(True|False)", where).group(1)
    straggler = re.search(r"Schedulers still alive", _function_source(tm, where))
    handler = require(tm, r'f"SIGTERM received\. \{signum=\} \{frame=\}\. Draining requests and shutting down\.\.\."')
    require(tm, r"loop\.add_signal_handler\(signal\.SIGTERM", "auto_create_handle_loop")
    return {
        "handler": {"installed": "lazily, by TokenizerManager.auto_create_handle_loop (first request or warmup); "
                                 "before that SIGTERM has its default action",
                    "log": handler.group(0)[2:-1], "sets": "gracefully_exit"},
        "watchdog_wake_s": wake,
        "drain": {"limit": None, "poll_s": poll, "counts": "len(rid_to_state)",
                  "log": "Gracefully exiting... Remaining number of requests {n}. Remaining requests remaining_rids=[...].",
                  "force_env": "SGL_FORCE_SHUTDOWN", "force": "skips the drain only (breaks out of the drain loop)",
                  "unhealthy": "server_status UnHealthy also ends the drain"},
        "release": {"message": "ShutdownReq to the schedulers; each breaks its event loop and releases in the "
                               "finally of run_scheduler_process", "cap_s": int(cap), "cap_name": cap_name,
                    "poll_s": 0.1, "straggler_warning": bool(straggler)},
        "after_release": ("kill_process_tree(os.getpid(), include_parent=False), then sys.exit(0): exit status 0"
                          if kill == "False" else
                          "kill_process_tree(os.getpid(), include_parent=True): the main process SIGKILLs itself"),
        "main_exit": 0 if kill == "False" else -9,
        "source": "sglang/srt/managers/tokenizer_manager.py TokenizerManager.sigterm_watchdog, SignalHandler",
    }


_TITLE_CALL = re.compile(r"""setproctitle(?:\.setproctitle)?\(\s*(f?)(?:"(sglang::[^"]*)"|'(sglang::[^']*)')""")


def read_titles(src: str) -> list:
    """Every ``sglang::`` process title the release sets with setproctitle: the literal part, whether an
    f-string adds to it (``{...}``), and the file and function that set it."""
    found = []
    root = os.path.join(src, "sglang")
    for dirpath, dirnames, files in os.walk(root):
        dirnames.sort()
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(dirpath, name)
            text = _read(path)
            tree = ast.parse(text) if "sglang::" in text else None
            for m in _TITLE_CALL.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                funcs = [n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                         and n.lineno <= line <= n.end_lineno]
                title = m.group(2) or m.group(3)
                literal = title.split("{", 1)[0] if m.group(1) else title
                found.append({"title": title, "literal": literal, "formatted": "{" in title and bool(m.group(1)),
                              "file": os.path.relpath(path, src), "function": funcs[-1] if funcs else None})
    if not any(t["literal"] == "sglang::scheduler" for t in found):
        raise RuntimeError("%s: no setproctitle(\"sglang::scheduler...\") found; the title pattern changed" % src)
    return found


def wheel_facts(path: str) -> dict:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return {"file": os.path.basename(path), "sha256": digest.hexdigest()}


def release_of(src: str) -> str:
    infos = [d for d in os.listdir(src) if d.startswith("sglang-") and d.endswith(".dist-info")]
    if len(infos) != 1:
        raise RuntimeError("%s: expected one sglang-*.dist-info, found %s" % (src, infos))
    return infos[0][len("sglang-"):-len(".dist-info")]


def generate(src: str, wheel: str) -> dict:
    release = release_of(src)
    module = import_argument_layer(src)
    parser, options, fields = read_parser(module)
    return {
        "release": release,
        "wheel": wheel_facts(wheel),
        "generator": {"version": GENERATOR_VERSION, "script": "tests/sim/standin/contracts/generate.py",
                      "parser": "imported sglang.srt.server_args (stubbed: %s)" % ", ".join(STUBBED)},
        "parser": parser,
        "config_file": read_config_merge(src),
        "options": options,
        "server_info": read_server_info(src, fields),
        "internal_state": read_internal_state(src),
        "v1_loads": read_loads(src),
        "endpoints": read_endpoints(src),
        "health": read_health(src),
        "metrics": read_metrics(src),
        "auth": read_auth(src),
        "shutdown": read_shutdown(src),
        "titles": read_titles(src),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("source", help="an SGLang wheel, or the directory it was unpacked into")
    ap.add_argument("--wheel-file", help="the wheel SOURCE was unpacked from (for its sha256)")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        if os.path.isfile(args.source):
            wheel, src = args.source, tmp
            with zipfile.ZipFile(wheel) as zf:
                zf.extractall(src)
        else:
            if not args.wheel_file:
                ap.error("--wheel-file is needed with an unpacked directory")
            wheel, src = args.wheel_file, args.source
        contract = generate(os.path.abspath(src), wheel)
    with open(args.output + ".tmp", "w") as f:
        json.dump(contract, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(args.output + ".tmp", args.output)
    print("%s: release %s, %d options, %d /server_info keys"
          % (args.output, contract["release"], len(contract["options"]), len(contract["server_info"]["keys"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
