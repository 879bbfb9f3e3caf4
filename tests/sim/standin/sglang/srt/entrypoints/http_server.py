# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The main process: launcher of the schedulers and the detokenizer, tokenizer manager, HTTP server.

Lifecycle of the played release (its contract, and the source named in each place below):
the port opens once every scheduler has loaded its model; /health and /health_generate answer
503 until the warmup request has gone through, then run a one-token generation. SIGTERM is
handled once the first request has arrived; it starts the drain of
TokenizerManager.sigterm_watchdog: wake-up, unbounded drain, ShutdownReq, 15 s for the
schedulers to release their memory, SIGKILL of what is left, exit.
"""

from __future__ import annotations

import datetime
import hmac
import json
import logging
import multiprocessing as mp
import os
import signal
import socket
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sglang.srt import contract, tokenizer
from sglang.srt.entrypoints.engine import local_tp_ranks
from sglang.srt.managers.detokenizer_manager import run_detokenizer_process
from sglang.srt.managers.scheduler import run_scheduler_process
from sglang.srt.server_args import ServerArgs, prepare_server_args
from sglang.srt.utils import (descendants, env_float, faults, get_bool_env_var, is_scheduler_process,
                              kill_process_tree)
from sglang.version import __version__

logger = logging.getLogger(__name__)

WARMUP_PROMPT = "The capital city of France is"
DEFAULT_MAX_NEW_TOKENS = 128
HEALTH_CHECK_RID_PREFIX = "HEALTH_CHECK"  # sglang/srt/constants.py


class TokenizerManager:
    """Holds the in-flight requests (rid_to_state), the server's status and the shutdown flag."""

    def __init__(self, server_args: ServerArgs, req_writer, out_reader, scheduler_info: dict):
        self.server_args = server_args
        self.scheduler_info = scheduler_info
        self.req_writer = req_writer
        self.out_reader = out_reader
        self.send_lock = threading.Lock()
        self.state_lock = threading.Lock()
        self.rid_to_state = {}
        self.server_status = "Starting"  # Starting, Up, UnHealthy
        self.gracefully_exit = False
        self.handlers_installed = False  # the SIGTERM handler comes with the first request
        self.last_receive_tstamp = 0.0
        self.stats = {"num_running_reqs": 0, "num_queue_reqs": 0, "num_used_tokens": 0, "token_usage": 0.0,
                      "gen_throughput": 0.0}
        self.totals = {"prompt_tokens": 0, "generation_tokens": 0, "num_requests": 0}
        threading.Thread(target=self.handle_loop, name="detokenizer-results", daemon=True).start()

    def handle_loop(self) -> None:
        while True:
            try:
                kind, payload = self.out_reader.recv()
            except (EOFError, OSError):
                return
            self.last_receive_tstamp = time.time()
            if kind == "stats":
                self.stats = payload
                continue
            with self.state_lock:
                state = self.rid_to_state.pop(payload["rid"], None)
                self.totals["prompt_tokens"] += len(payload["input_ids"])
                self.totals["generation_tokens"] += len(payload["output_ids"])
                self.totals["num_requests"] += 1
            if state is not None:
                state["out"] = payload
                state["event"].set()

    def auto_create_handle_loop(self) -> None:
        """managers/tokenizer_manager.py auto_create_handle_loop: SIGTERM is handled from the first request on."""
        self.handlers_installed = True

    def submit(self, input_ids: list, max_new_tokens: int, rid: str = None) -> dict:
        self.auto_create_handle_loop()
        rid = rid or uuid.uuid4().hex
        state = {"rid": rid, "event": threading.Event(), "out": None, "created": time.time()}
        with self.state_lock:
            if rid in self.rid_to_state:
                raise ValueError("Duplicate request ID detected: %s" % rid)
            self.rid_to_state[rid] = state
        try:
            with self.send_lock:
                self.req_writer.send({"rid": rid, "input_ids": input_ids, "max_new_tokens": max_new_tokens})
        except OSError:
            pass  # a dead scheduler never answers; the request stays in flight, as with ZMQ
        return state

    def generate(self, text=None, input_ids=None, max_new_tokens=DEFAULT_MAX_NEW_TOKENS, rid=None) -> dict:
        ids = list(input_ids) if input_ids is not None else tokenizer.encode(text or "")
        if getattr(self.server_args, "log_requests", False):
            logger.info("Receive: obj=GenerateReqInput(rid=%r, text=%r, max_new_tokens=%d)", rid, text, max_new_tokens)
        state = self.submit(ids, int(max_new_tokens), rid)
        state["event"].wait()
        out = state["out"]
        n = len(out["output_ids"])
        return {"text": out["text"], "output_ids": out["output_ids"],
                "meta_info": {"id": out["rid"], "finish_reason": {"type": "length", "length": n},
                              "prompt_tokens": len(ids), "completion_tokens": n, "cached_tokens": 0,
                              "e2e_latency": round(time.time() - state["created"], 6)}}

    def health_generate(self) -> bool:
        """entrypoints/http_server.py health_generate: a one-token request; healthy once anything comes back."""
        poll = env_float("GPUSIM_SGLANG_HEALTH_POLL_SECONDS", float(contract.load()["health"]["poll_s"]))
        timeout = env_float("SGLANG_HEALTH_CHECK_TIMEOUT", float(contract.load()["health"]["timeout_default_s"]))
        rid = "%s_%s" % (HEALTH_CHECK_RID_PREFIX, uuid.uuid4().hex)
        tic = time.time()
        self.submit([0], 1, rid)
        while time.time() < tic + timeout:
            time.sleep(poll)
            if self.last_receive_tstamp > tic:
                with self.state_lock:
                    self.rid_to_state.pop(rid, None)
                self.server_status = "Up"
                return True
        logger.error("Health check failed. Server couldn't get a response from detokenizer for last %d seconds. "
                     "tic start time: %s. last_heartbeat time: %s", timeout,
                     time.strftime("%H:%M:%S", time.localtime(tic)),
                     time.strftime("%H:%M:%S", time.localtime(self.last_receive_tstamp)))
        with self.state_lock:
            self.rid_to_state.pop(rid, None)
        self.server_status = "UnHealthy"
        return False


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    @property
    def tm(self) -> TokenizerManager:
        return self.server.tokenizer_manager

    @property
    def spec(self) -> dict:
        return self.server.spec

    def log_request(self, code="-", size="-"):
        code = int(code) if str(code).isdigit() else code
        phrase = self.responses.get(code, ("",))[0] if isinstance(code, int) else ""
        sys.stdout.write('[%s] INFO:     %s:%d - "%s" %s %s\n' % (
            time.strftime("%Y-%m-%d %H:%M:%S"), self.client_address[0], self.client_address[1],
            self.requestline, code, phrase))
        sys.stdout.flush()

    def log_message(self, format, *args):
        pass

    def _send(self, code: int, body=None, content_type="application/json") -> None:
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        self.send_response(code)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict:
        length = int(self.headers.get("content-length") or 0)
        data = json.loads(self.rfile.read(length) or b"{}")
        if not isinstance(data, dict):
            raise ValueError("request body must be a JSON object")
        return data

    # -- routing: only the routes the played release has (its contract) --

    def _routes(self) -> dict:
        routes = dict(self.spec["endpoints"]["routes"])
        if not self.tm.server_args.enable_metrics:
            routes.pop("/metrics", None)  # mounted only with --enable-metrics
        return routes

    def _authorized(self, path: str) -> bool:
        """utils/auth.py decide_request_auth (endpoints of level NORMAL): with --api-key every path but the
        open prefixes needs "Authorization: Bearer KEY"; otherwise 401 {"error": "Unauthorized"}."""
        key = self.tm.server_args.api_key
        if not key or self.command == "OPTIONS":
            return True
        if any(path.startswith(prefix) for prefix in self.spec["auth"]["open_prefixes"]):
            return True
        parts = (self.headers.get("Authorization") or "").split(" ", 1)
        if len(parts) == 2 and parts[0].lower() == "bearer" and hmac.compare_digest(parts[1], key):
            return True
        self._send(self.spec["auth"]["status"], self.spec["auth"]["body"])
        return False

    def _dispatch(self, method: str):
        url = urllib.parse.urlsplit(self.path)
        path = url.path
        if not self._authorized(path):
            return
        routes = self._routes()
        if path not in routes or path not in self.IMPLEMENTED:
            self._send(404, {"detail": "Not Found"})
            return
        if method not in routes[path]["methods"]:
            self._send(405, {"detail": "Method Not Allowed"})
            return
        getattr(self, self.IMPLEMENTED[path])(path, urllib.parse.parse_qs(url.query))

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    IMPLEMENTED = {"/health": "health", "/health_generate": "health", "/ready": "ready", "/model_info": "model_info",
                   "/get_model_info": "model_info", "/server_info": "server_info", "/get_server_info": "server_info",
                   "/v1/loads": "loads", "/get_load": "get_load", "/metrics": "metrics", "/v1/models": "models",
                   "/generate": "generate", "/v1/completions": "openai", "/v1/chat/completions": "openai"}

    # -- endpoints --

    def health(self, path: str, query: dict) -> None:
        if self.tm.gracefully_exit:
            logger.info("Health check request received during shutdown. Returning 503.")
            self._send(503)
        elif self.tm.server_status == "Starting":
            self._send(503)
        elif path == "/health" and not get_bool_env_var("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true"):
            self._send(200)
        else:
            self._send(200 if self.tm.health_generate() else 503)

    def ready(self, path: str, query: dict) -> None:
        ok = self.tm.server_status == "Up" and not self.tm.gracefully_exit
        self._send(200 if ok else 503)

    def model_info(self, path: str, query: dict) -> None:
        if path.startswith("/get_"):
            logger.warning("Endpoint '%s' is deprecated and will be removed in a future version. Please use '%s' "
                           "instead.", path, path.replace("/get_", "/"))
        args = self.tm.server_args
        self._send(200, {"model_path": args.model_path, "tokenizer_path": args.tokenizer_path,
                         "is_generation": True, "preferred_sampling_params": None, "weight_version": "default",
                         "has_image_understanding": False, "has_audio_understanding": False,
                         "model_type": args.hf_config.get("model_type"),
                         "architectures": args.hf_config.get("architectures")})

    def models(self, path: str, query: dict) -> None:
        args = self.tm.server_args
        self._send(200, {"object": "list", "data": [
            {"id": args.served_model_name, "object": "model", "created": int(time.time()), "owned_by": "sglang",
             "root": args.served_model_name, "parent": None, "max_model_len": args.context_length}]})

    def server_info(self, path: str, query: dict) -> None:
        if path.startswith("/get_"):
            logger.warning("Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
                           "Please use '/server_info' instead.")
        self._send(200, self.server.server_info())

    def loads(self, path: str, query: dict) -> None:
        """entrypoints/v1_loads.py get_loads: one load per DP rank (the stand-in has one)."""
        spec = self.spec["v1_loads"]
        include = [s.strip() for s in query.get("include", [""])[0].split(",") if s.strip()] or None
        if include is not None and not set(include) <= set(spec["include_values"]):
            self._send(400, {"detail": "Invalid include sections: %s. Valid options: %s"
                                       % (set(include) - set(spec["include_values"]), spec["include_values"])})
            return
        loads = [self.server.load()]
        dp_rank = query.get("dp_rank", [None])[0]
        if dp_rank is not None:
            loads = [load for load in loads if str(load["dp_rank"]) == dp_rank]
        if query.get("format", [None])[0] == "prometheus":
            lines = []
            for key in spec["load_keys"]:
                if key == "dp_rank" or not all(isinstance(load[key], (int, float)) for load in loads):
                    continue
                lines.append("# TYPE sglang_%s gauge" % key)
                lines += ['sglang_%s{dp_rank="%d"} %s' % (key, load["dp_rank"], load[key]) for load in loads]
            self._send(200, ("\n".join(lines) + "\n").encode(), "text/plain; version=0.0.4; charset=utf-8")
            return
        top = {"timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(), "version": __version__,
               "accelerator": self.server.accelerator, "num_accelerators": self.tm.server_args.tp_size,
               "loads": loads}
        self._send(200, {key: top[key] for key in spec["top_keys"]})

    def get_load(self, path: str, query: dict) -> None:
        """entrypoints/http_server.py get_load (0.5.14): the deprecated shim over /v1/loads."""
        logger.warning("Endpoint '/get_load' is deprecated and will be removed in a future version. "
                       "Please use '/v1/loads' instead.")
        load = self.server.load()
        self._send(200, [{"dp_rank": load["dp_rank"], "num_reqs": load["num_running_reqs"] + load["num_waiting_reqs"],
                          "num_waiting_reqs": load["num_waiting_reqs"], "num_tokens": load["num_total_tokens"],
                          "num_pending_tokens": load["num_total_tokens"] - load["num_used_tokens"],
                          "ts_tic": time.perf_counter()}])

    def metrics(self, path: str, query: dict) -> None:
        self._send(200, self.server.metrics().encode(), "text/plain; version=0.0.4; charset=utf-8")

    def generate(self, path: str, query: dict) -> None:
        body = self._parsed_body()
        if body is None:
            return
        params = body.get("sampling_params") or {}
        max_new = params.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
        text, input_ids, rid = body.get("text"), body.get("input_ids"), body.get("rid")
        try:
            if isinstance(text, list) or (input_ids and isinstance(input_ids[0], list)):
                self._send(200, self._generate_batch(text, input_ids, rid, max_new))
                return
            if text is None and input_ids is None:
                raise ValueError("Either text or input_ids should be provided.")
            self._send(200, self.tm.generate(text, input_ids, max_new, rid))
        except (ValueError, TypeError) as e:
            self._send(400, {"object": "error", "message": str(e), "type": "BadRequestError", "code": 400})

    def _generate_batch(self, text, input_ids, rid, max_new) -> list:
        prompts = text if isinstance(text, list) else [None] * len(input_ids)
        ids = input_ids if input_ids else [None] * len(prompts)
        rids = rid if isinstance(rid, list) else [None] * len(prompts)
        results = [None] * len(prompts)

        def one(i):
            results[i] = self.tm.generate(prompts[i], ids[i], max_new, rids[i])

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results

    def openai(self, path: str, query: dict) -> None:
        body = self._parsed_body()
        if body is None:
            return
        args = self.tm.server_args
        if path == "/v1/completions":
            prompt = body.get("prompt", "")
            prompt = prompt[0] if isinstance(prompt, list) and prompt else prompt
            max_tokens = body.get("max_tokens") or 16
        else:
            messages = body.get("messages") or []
            prompt = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
            max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_MAX_NEW_TOKENS
        out = self.tm.generate(text=str(prompt), max_new_tokens=max_tokens, rid=body.get("rid"))
        meta = out["meta_info"]
        usage = {"prompt_tokens": meta["prompt_tokens"], "completion_tokens": meta["completion_tokens"],
                 "total_tokens": meta["prompt_tokens"] + meta["completion_tokens"], "prompt_tokens_details": None}
        if path == "/v1/completions":
            choice = {"index": 0, "text": out["text"], "logprobs": None, "finish_reason": "length",
                      "matched_stop": None}
            kind = "text_completion"
        else:
            choice = {"index": 0, "message": {"role": "assistant", "content": out["text"], "tool_calls": None},
                      "logprobs": None, "finish_reason": "length", "matched_stop": None}
            kind = "chat.completion"
        self._send(200, {"id": meta["id"], "object": kind, "created": int(time.time()),
                         "model": body.get("model") or args.served_model_name, "choices": [choice], "usage": usage})

    def _parsed_body(self):
        try:
            return self._body()
        except ValueError as e:
            self._send(400, {"object": "error", "message": "Invalid request body: %s" % e, "code": 400})
            return None


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, tokenizer_manager: TokenizerManager, accelerator: str = None):
        self.tokenizer_manager = tokenizer_manager
        self.spec = contract.load()
        self.accelerator = accelerator
        super().__init__(address, Handler)

    def server_info(self) -> dict:
        """entrypoints/http_server.py server_info: exactly the keys the played release sends."""
        tm = self.tokenizer_manager
        args = tm.server_args
        info = self.spec["server_info"]
        arg_keys = [k for k in info["keys"] if k not in info["key_sources"]]
        fields = args.field_values(arg_keys)
        internal = dict(fields, **self._internal_state())
        extra = dict(tm.scheduler_info, internal_states=[internal], version=__version__, frontend="python",
                     kv_events=None, launch_command=args.launch_command, enable_dp_attention=False)
        return {key: (extra[key] if key in extra else fields.get(key)) for key in info["keys"]}

    def _internal_state(self) -> dict:
        tm = self.tokenizer_manager
        args = tm.server_args
        values = {"world_size": args.tp_size, "startup_time": tm.scheduler_info.get("startup_time"),
                  "effective_max_running_requests_per_dp": tm.scheduler_info.get("max_running_requests"),
                  "last_gen_throughput": tm.stats["gen_throughput"],
                  "memory_usage": {"weight": 0.0, "kvcache": 0.0, "token_capacity":
                                   tm.scheduler_info.get("max_total_num_tokens"), "graph": 0.0}}
        return {key: values.get(key) for key in self.spec["internal_state"]["added_keys"]}

    def load(self) -> dict:
        """One DP rank's load snapshot (managers/load_snapshot.py LoadSnapshot core keys)."""
        tm = self.tokenizer_manager
        capacity = tm.scheduler_info.get("max_total_num_tokens") or 0
        used = tm.stats.get("num_used_tokens", 0)
        values = {"timestamp": time.time(), "dp_rank": 0, "num_running_reqs": tm.stats["num_running_reqs"],
                  "num_waiting_reqs": tm.stats["num_queue_reqs"], "num_waiting_uncached_tokens": 0,
                  "num_used_tokens": used, "num_total_tokens": used, "num_active_tokens": used,
                  "num_prealloc_ready_tokens": 0, "max_total_num_tokens": capacity,
                  "max_running_requests": tm.scheduler_info.get("max_running_requests"),
                  "token_usage": tm.stats["token_usage"], "gen_throughput": tm.stats["gen_throughput"],
                  "cache_hit_rate": 0.0, "utilization": tm.stats["token_usage"],
                  "total_prefill_uncached_tokens": tm.totals["prompt_tokens"], "total_prefill_busy_us": 0,
                  "decode_moments": None}
        return {key: values.get(key) for key in self.spec["v1_loads"]["load_keys"]}

    def metrics(self) -> str:
        tm = self.tokenizer_manager
        name = tm.server_args.served_model_name.replace("\\", "\\\\").replace('"', '\\"')
        values = {"model_name": name, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
        sched = ",".join('%s="%s"' % (label, values[label]) for label in self.spec["metrics"]["labels"])
        lines = []
        for metric, kind, help_text, labels, value in (
                ("num_running_reqs", "gauge", "The number of running requests.", sched,
                 tm.stats["num_running_reqs"]),
                ("num_queue_reqs", "gauge", "The number of requests in the waiting queue.", sched,
                 tm.stats["num_queue_reqs"]),
                ("token_usage", "gauge", "The token usage.", sched, tm.stats["token_usage"]),
                ("gen_throughput", "gauge", "The generation throughput (token/s).", sched,
                 tm.stats["gen_throughput"]),
                ("prompt_tokens_total", "counter", "Number of prefill tokens processed.",
                 'model_name="%s"' % name, tm.totals["prompt_tokens"]),
                ("generation_tokens_total", "counter", "Number of generation tokens processed.",
                 'model_name="%s"' % name, tm.totals["generation_tokens"]),
                ("num_requests_total", "counter", "Number of requests processed.",
                 'model_name="%s"' % name, tm.totals["num_requests"])):
            lines += ["# HELP sglang:%s %s" % (metric, help_text), "# TYPE sglang:%s %s" % (metric, kind),
                      "sglang:%s{%s} %s" % (metric, labels, float(value))]
        return "\n".join(lines) + "\n"


def _sigchld_handler(signum, frame):
    try:
        pid, status = os.waitpid(0, os.WNOHANG)
    except ChildProcessError:
        return
    if pid and status != 0:
        logger.warning("Child process unexpectedly failed with exitcode=%d. pid=%d", status, pid)


def _sigquit_handler(signum, frame):
    logger.error("Received sigquit from a child process. It usually means the child failed.")
    kill_process_tree(os.getpid())


def _exit_at_once() -> None:
    """A child that exits straight away (fault "defunct": the launcher never waits for it)."""


def _schedulers_alive() -> list:
    """utils/cudacore_pyspy_dump_utils.py collect_scheduler_processes: live sglang::scheduler* descendants."""
    return [pid for pid in descendants(os.getpid()) if is_scheduler_process(pid)]


def _sigterm_watchdog(tm: TokenizerManager, shutdown, interval: float, slow_exit: float) -> None:
    """managers/tokenizer_manager.py TokenizerManager.sigterm_watchdog of the played release."""
    spec = contract.load()["shutdown"]
    while not tm.gracefully_exit:
        time.sleep(interval)
    while True:  # the drain: no time limit
        remain = len(tm.rid_to_state)
        rids = list(tm.rid_to_state)
        if tm.server_status == "UnHealthy":
            logger.error("Signal SIGTERM received while health check failed. Force exiting.")
            break
        if get_bool_env_var("SGL_FORCE_SHUTDOWN"):
            logger.error("Signal SIGTERM received while force shutdown flag set. Force exiting.")
            break
        logger.info("Gracefully exiting... Remaining number of requests %d. Remaining requests remaining_rids=%r.",
                    remain, rids)
        if remain == 0:
            break
        time.sleep(interval)
    shutdown.set()  # ShutdownReq to every scheduler
    deadline = time.monotonic() + spec["release"]["cap_s"]
    while time.monotonic() < deadline and _schedulers_alive():
        time.sleep(spec["release"]["poll_s"])
    stragglers = _schedulers_alive()
    if stragglers and spec["release"]["straggler_warning"]:
        logger.warning("Schedulers still alive %ds after ShutdownReq, killing them before they released: %s",
                       spec["release"]["cap_s"], stragglers)
    time.sleep(slow_exit)
    include_parent = spec["main_exit"] != 0
    kill_process_tree(os.getpid(), include_parent=include_parent)
    logging.shutdown()
    os._exit(0)  # sys.exit(0) from the event loop in the real server


def _wait_and_warmup(server_args: ServerArgs, tm: TokenizerManager) -> None:
    url = server_args.url()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    headers = {"content-type": "application/json"}
    if server_args.api_key:
        headers["Authorization"] = "Bearer %s" % server_args.api_key
    try:
        delay = env_float("GPUSIM_SGLANG_WARMUP_SECONDS", 1.0)
        for attempt in range(120):
            time.sleep(delay)
            try:
                with opener.open(urllib.request.Request(url + "/model_info", headers=headers), timeout=5) as res:
                    if res.status == 200:
                        break
            except OSError:
                if attempt == 119:
                    raise
        if not server_args.skip_server_warmup:
            body = {"text": WARMUP_PROMPT, "sampling_params": {"temperature": 0, "max_new_tokens": 8}}
            req = urllib.request.Request(url + "/generate", json.dumps(body).encode(), headers)
            with opener.open(req, timeout=600) as res:
                res.read()
    except Exception as e:
        logger.error("Initialization failed. warmup error: %s", e)
        kill_process_tree(os.getpid())
        return
    tm.server_status = "Up"
    logger.info("The server is fired up and ready to roll!")


def _check_supported(server_args: ServerArgs, multinode: bool = False) -> None:
    """Refuse what the stand-in does not run: data or pipeline parallelism; several nodes unless
    MULTINODE (the process launcher, on 0.5.23: the release whose multi-node source it follows)."""
    names = ("dp_size", "pp_size") if multinode and contract.at_least("0.5.23") else ("dp_size", "pp_size", "nnodes")
    for name in names:
        if (getattr(server_args, name, 1) or 1) > 1:
            raise ValueError("%s=%s: the SGLang stand-in runs one node, tensor parallelism only"
                             % (name, getattr(server_args, name)))


def check_server_args(server_args: ServerArgs) -> None:
    """The multi-node checks of 0.5.23's arg_groups/validation_hook.py check_server_args (called by
    entrypoints/engine.py Engine._launch_subprocesses before anything is spawned)."""
    assert (server_args.tp_size * server_args.pp_size) % server_args.nnodes == 0, (
        "tp_size must be divisible by number of nodes")
    assert not (server_args.dp_size > 1 and server_args.nnodes != 1), (
        "multi-node data-parallel replicas are not supported; use attention DP (--attn-dp-size) across nodes")


def launch_server(server_args: ServerArgs) -> None:
    fault_set = faults()
    server_args.resolve()
    _check_supported(server_args, multinode=True)
    check_server_args(server_args)
    logger.info("server_args=%r", server_args)
    # Only node 0 serves requests (engine.py Engine._launch_subprocesses: "Non-zero-rank nodes do not run
    # tokenizer processes"). 0.5.23 installs no SIGCHLD handler; the stand-in's stays on node 0 only.
    follower = server_args.node_rank >= 1
    if "defunct" not in fault_set and not follower:
        signal.signal(signal.SIGCHLD, _sigchld_handler)
    signal.signal(signal.SIGQUIT, _sigquit_handler)

    ctx = mp.get_context("spawn")
    local_ranks = local_tp_ranks(server_args)  # engine.py _calculate_rank_ranges: this node's TP ranks
    # Without --dist-init-addr the group meets at HOST:NCCL_PORT (bootstrap.py _resolve_dist_init_method;
    # a free port when --nccl-port is unset, as server_args.py PortArgs.init_new picks one).
    dist_port = (server_args.nccl_port or _free_port()) if server_args.nnodes > 1 else None
    barrier = ctx.Barrier(len(local_ranks))
    shutdown = ctx.Event()
    req_reader, req_writer = ctx.Pipe(duplex=False)
    det_reader, det_writer = ctx.Pipe(duplex=False)
    out_reader, out_writer = ctx.Pipe(duplex=False)
    procs, ready_readers = [], []
    for rank in local_ranks:
        reader, writer = ctx.Pipe(duplex=False)
        first = rank == 0
        proc = ctx.Process(target=run_scheduler_process,
                           args=(server_args, rank, writer, req_reader if first else None,
                                 det_writer if first else None, barrier, shutdown, dist_port))
        proc.start()
        writer.close()
        procs.append(proc)
        ready_readers.append(reader)
    if not follower:
        detokenizer = ctx.Process(target=run_detokenizer_process, args=(server_args, det_reader, out_writer))
        detokenizer.start()
    for conn in (req_reader, det_reader, det_writer, out_writer):
        conn.close()

    scheduler_info = {}
    for rank, proc, reader in zip(local_ranks, procs, ready_readers):
        try:
            data = reader.recv()
        except EOFError:
            logger.error("Rank %d scheduler is dead. Please check if there are relevant logs.", rank)
            proc.join()
            logger.error("Exit code: %s", proc.exitcode)
            raise
        scheduler_info = scheduler_info or data

    if follower:
        _serve_follower(server_args, procs)
        return
    tm = TokenizerManager(server_args, req_writer, out_reader, scheduler_info)
    if "defunct" in fault_set:
        ctx.Process(target=_exit_at_once).start()
    serve(server_args, tm, shutdown, fault_set)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def _serve_follower(server_args: ServerArgs, procs: list) -> None:
    """A node of rank >= 1 once its schedulers are ready (0.5.23 entrypoints/engine.py
    Engine._launch_subprocesses, `if get_parallel().node_rank >= 1`): SIGTERM only logs (rank 0 stops
    every rank through its ShutdownReq broadcast), the dummy health server answers, and the main process
    waits for its schedulers (block_until_scheduler_exits), then returns (http_server.py launch_server:
    "_launch_subprocesses already blocked until the schedulers exited"), which ends the process."""
    node_rank = server_args.node_rank

    def sigterm_handler(signum, frame):
        logger.warning("SIGTERM received on node_rank %d; waiting for the rank-0 ShutdownReq broadcast to stop "
                       "the schedulers.", node_rank)

    signal.signal(signal.SIGTERM, sigterm_handler)
    launch_dummy_health_check_server(server_args.host, server_args.port, server_args.enable_metrics)
    for proc in procs:
        proc.join()
        logger.error("Scheduler or DataParallelController %d terminated with %s", proc.pid, proc.exitcode)


class DummyHandler(BaseHTTPRequestHandler):
    """utils/common.py launch_dummy_health_check_server's FastAPI app: GET /ping, /health and /health_generate
    answer 200 with an empty body, whatever the schedulers do; /metrics with --enable-metrics; no auth."""
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    ROUTES = ("/ping", "/health", "/health_generate")

    def log_message(self, format, *args):
        pass  # uvicorn runs it with log_level="warning": no access log

    def _send(self, code: int, body: bytes = b"", content_type: str = None) -> None:
        self.send_response(code)
        if content_type:
            self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _route(self, method: str) -> None:
        path = urllib.parse.urlsplit(self.path).path
        routes = self.ROUTES + (("/metrics",) if self.server.enable_metrics else ())
        if path not in routes:
            self._send(404, b'{"detail":"Not Found"}', "application/json")
        elif method != "GET":
            self._send(405, b'{"detail":"Method Not Allowed"}', "application/json")
        elif path == "/metrics":
            self._send(200, b"", "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._send(200)

    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")

    def do_PUT(self):
        self._route("PUT")


def launch_dummy_health_check_server(host: str, port: int, enable_metrics: bool) -> None:
    """utils/common.py launch_dummy_health_check_server: the dummy app, served by a daemon thread."""
    address = ("[%s]:%d" if ":" in host else "%s:%d") % (host, port)

    def run():
        try:
            httpd = ThreadingHTTPServer((host, port), DummyHandler)
        except OSError as e:
            logger.error("ERROR:    [Errno %s] error while attempting to bind on address %r: %s",
                         e.errno, (host, port), (e.strerror or str(e)).lower())
            logger.info("Dummy health check server stopped at %s", address)
            return
        httpd.daemon_threads = True
        httpd.enable_metrics = enable_metrics
        try:
            httpd.serve_forever()
        finally:
            logger.info("Dummy health check server stopped at %s", address)

    threading.Thread(target=run, daemon=True, name="health-check-server").start()
    logger.info("Dummy health check server started in background thread at %s", address)


def serve(server_args: ServerArgs, tm: TokenizerManager, shutdown, fault_set=frozenset()) -> None:
    """The end of launch_server, once the schedulers are ready: bind the HTTP server, install the
    tokenizer manager's SIGTERM handler, start the shutdown watchdog and the warm-up, and serve until
    the watchdog ends the process. SHUTDOWN is what the watchdog sets to release the schedulers."""
    try:
        httpd = Server((server_args.host, server_args.port), tm, accelerator=_accelerator_name())
    except OSError as e:
        logger.error("ERROR:    [Errno %s] error while attempting to bind on address %r: %s",
                     e.errno, (server_args.host, server_args.port), (e.strerror or str(e)).lower())
        raise SystemExit(1)

    def sigterm_handler(signum, frame):
        if not tm.handlers_installed:  # no request yet: SIGTERM keeps its default action
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        # loop.add_signal_handler calls SignalHandler.sigterm_handler without arguments
        logger.warning("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
        if "orphan" in fault_set:
            os._exit(0)
        tm.gracefully_exit = True

    signal.signal(signal.SIGTERM, sigterm_handler)
    slow_exit = env_float("GPUSIM_SGLANG_SLOW_EXIT_SECONDS", 3.0) if "slow_exit" in fault_set else 0.0
    interval = env_float("GPUSIM_SGLANG_WATCHDOG_INTERVAL", float(contract.load()["shutdown"]["watchdog_wake_s"]))
    threading.Thread(target=_sigterm_watchdog, name="sigterm-watchdog", daemon=True,
                     args=(tm, shutdown, interval, slow_exit)).start()
    threading.Thread(target=_wait_and_warmup, name="warmup", daemon=True, args=(server_args, tm)).start()
    logger.info("INFO:     Started server process [%d]", os.getpid())
    logger.info("INFO:     Waiting for application startup.")
    logger.info("INFO:     Application startup complete.")
    logger.info("INFO:     Uvicorn running on http://%s:%d (Press CTRL+C to quit)", server_args.host, server_args.port)
    httpd.serve_forever()


def _accelerator_name():
    """v1_loads.py _accelerator_name: the GPU's marketing name (here: the NVML double's)."""
    try:
        from gpusim.nvml import Node

        return Node(os.environ.get("GPUSIM_STATE", "/var/lib/gpusim")).gpus[0]["name"]
    except (OSError, IndexError, ImportError):
        return None


def run_server(argv: list, prog: str = None) -> None:
    """Parse ARGV as the server's flags and run until shut down."""
    server_args = prepare_server_args(argv)
    try:
        launch_server(server_args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)
