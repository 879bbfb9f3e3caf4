# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The main process: launcher of the schedulers and the detokenizer, tokenizer manager, HTTP server.

Lifecycle as in SGLang 0.5.x: the port opens only once every scheduler has loaded its model;
/health answers 503 until the warmup request has gone through, and again once SIGTERM has
arrived. SIGTERM starts a watchdog that drains in-flight requests with no time limit, then
SIGKILLs the whole tree, this process included.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sglang import __version__
from sglang.srt import tokenizer
from sglang.srt.managers.detokenizer_manager import run_detokenizer_process
from sglang.srt.managers.scheduler import run_scheduler_process
from sglang.srt.server_args import ServerArgs, prepare_server_args
from sglang.srt.utils import env_float, faults, get_bool_env_var, kill_process_tree

logger = logging.getLogger(__name__)

WARMUP_PROMPT = "The capital city of France is"
DEFAULT_MAX_NEW_TOKENS = 128


class TokenizerManager:
    """Holds the in-flight requests (rid_to_state) and the server's status."""

    def __init__(self, server_args: ServerArgs, req_writer, out_reader, scheduler_info: dict):
        self.server_args = server_args
        self.scheduler_info = scheduler_info
        self.req_writer = req_writer
        self.out_reader = out_reader
        self.send_lock = threading.Lock()
        self.state_lock = threading.Lock()
        self.rid_to_state = {}
        self.server_status = "Starting"
        self.gracefully_exit = False
        self.health_check_failed = False
        self.last_receive_tstamp = 0.0
        self.stats = {"num_running_reqs": 0, "num_queue_reqs": 0, "token_usage": 0.0, "gen_throughput": 0.0}
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

    def submit(self, input_ids: list, max_new_tokens: int, rid: str = None) -> dict:
        rid = rid or uuid.uuid4().hex
        state = {"rid": rid, "event": threading.Event(), "out": None, "created": time.time()}
        with self.state_lock:
            if rid in self.rid_to_state:
                raise ValueError("Duplicate request ID: %s" % rid)
            self.rid_to_state[rid] = state
        try:
            with self.send_lock:
                self.req_writer.send({"rid": rid, "input_ids": input_ids, "max_new_tokens": max_new_tokens})
        except OSError:
            pass  # a dead scheduler never answers; the request stays in flight, as with ZMQ
        return state

    def generate(self, text=None, input_ids=None, max_new_tokens=DEFAULT_MAX_NEW_TOKENS, rid=None) -> dict:
        ids = list(input_ids) if input_ids is not None else tokenizer.encode(text or "")
        if self.server_args.log_requests:
            logger.info("Receive: obj=GenerateReqInput(rid=%r, text=%r, max_new_tokens=%d)", rid, text, max_new_tokens)
        state = self.submit(ids, int(max_new_tokens), rid)
        state["event"].wait()
        out = state["out"]
        n = len(out["output_ids"])
        return {"text": out["text"], "output_ids": out["output_ids"],
                "meta_info": {"id": out["rid"], "finish_reason": {"type": "length", "length": n},
                              "prompt_tokens": len(ids), "completion_tokens": n, "cached_tokens": 0,
                              "e2e_latency": round(time.time() - state["created"], 6)}}

    def health_generate(self, timeout: float) -> bool:
        """One-token generation; healthy when the scheduler answers anything within TIMEOUT."""
        tic = time.time()
        state = self.submit([0], 1, "HEALTH_CHECK_%s" % uuid.uuid4().hex)
        while time.time() < tic + timeout:
            if state["event"].wait(0.1) or self.last_receive_tstamp > tic:
                return True
        with self.state_lock:
            self.rid_to_state.pop(state["rid"], None)
        self.health_check_failed = True
        return False


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    GET_ROUTES = ("/health", "/health_generate", "/ready", "/v1/models", "/model_info", "/get_model_info",
                  "/server_info", "/get_server_info", "/metrics")
    POST_ROUTES = ("/generate", "/v1/completions", "/v1/chat/completions")

    @property
    def tm(self) -> TokenizerManager:
        return self.server.tokenizer_manager

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

    def _route(self, routes: tuple, other: tuple) -> str:
        path = self.path.split("?", 1)[0]
        if path in routes:
            return path
        self._send(405 if path in other else 404,
                   {"detail": "Method Not Allowed" if path in other else "Not Found"})
        return None

    def do_GET(self):
        path = self._route(self.GET_ROUTES, self.POST_ROUTES)
        if path == "/metrics":
            if self.tm.server_args.enable_metrics:
                self._send(200, self.metrics().encode(), "text/plain; version=0.0.4; charset=utf-8")
            else:
                self._send(404, {"detail": "Not Found"})
        elif path in ("/health", "/ready"):
            self._send(503 if self._unavailable() else 200)
        elif path == "/health_generate":
            if self._unavailable():
                self._send(503)
            else:
                timeout = env_float("SGLANG_HEALTH_CHECK_TIMEOUT", 20)
                self._send(200 if self.tm.health_generate(timeout) else 503)
        elif path == "/v1/models":
            args = self.tm.server_args
            self._send(200, {"object": "list", "data": [
                {"id": args.served_model_name, "object": "model", "created": int(time.time()),
                 "owned_by": "sglang", "root": args.served_model_name, "parent": None,
                 "max_model_len": args.context_length}]})
        elif path in ("/model_info", "/get_model_info"):
            args = self.tm.server_args
            self._send(200, {"model_path": args.model_path, "tokenizer_path": args.tokenizer_path,
                             "is_generation": True, "preferred_sampling_params": None, "weight_version": "default",
                             "has_image_understanding": False, "has_audio_understanding": False,
                             "model_type": args.hf_config.get("model_type"),
                             "architectures": args.hf_config.get("architectures")})
        elif path in ("/server_info", "/get_server_info"):
            info = dict(self.tm.server_args.public_dict(), **self.tm.scheduler_info)
            info.pop("status", None)
            info["internal_states"] = [{"last_gen_throughput": self.tm.stats["gen_throughput"],
                                        "num_running_reqs": self.tm.stats["num_running_reqs"]}]
            info["version"] = __version__
            self._send(200, info)

    def do_POST(self):
        path = self._route(self.POST_ROUTES, self.GET_ROUTES)
        if path is None:
            return
        try:
            body = self._body()
        except ValueError as e:
            self._send(400, {"object": "error", "message": "Invalid request body: %s" % e, "code": 400})
            return
        try:
            if path == "/generate":
                self._send(200, self.generate(body))
            else:
                self._send(200, self.openai(path, body))
        except (ValueError, TypeError) as e:
            self._send(400, {"object": "error", "message": str(e), "type": "BadRequestError", "code": 400})

    def _unavailable(self) -> bool:
        if self.tm.gracefully_exit:
            logger.info("Health check request received during shutdown. Returning 503.")
            return True
        return self.tm.server_status != "Up"

    def generate(self, body: dict):
        params = body.get("sampling_params") or {}
        max_new = params.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
        text, input_ids, rid = body.get("text"), body.get("input_ids"), body.get("rid")
        if isinstance(text, list) or (input_ids and isinstance(input_ids[0], list)):
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
        if text is None and input_ids is None:
            raise ValueError("Either text or input_ids should be provided.")
        return self.tm.generate(text, input_ids, max_new, rid)

    def openai(self, path: str, body: dict) -> dict:
        args = self.tm.server_args
        if path == "/v1/completions":
            prompt = body.get("prompt", "")
            prompt = prompt[0] if isinstance(prompt, list) and prompt else prompt
            max_tokens = body.get("max_tokens") or 16
        else:
            messages = body.get("messages") or []
            prompt = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
            max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_MAX_NEW_TOKENS
        out = self.tm.generate(text=str(prompt), max_new_tokens=max_tokens)
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
        return {"id": meta["id"], "object": kind, "created": int(time.time()),
                "model": body.get("model") or args.served_model_name, "choices": [choice], "usage": usage}

    def metrics(self) -> str:
        name = self.tm.server_args.served_model_name.replace("\\", "\\\\").replace('"', '\\"')
        sched = 'engine_type="unified",model_name="%s",pp_rank="0",tp_rank="0"' % name
        lines = []
        for metric, kind, help_text, labels, value in (
                ("num_running_reqs", "gauge", "The number of running requests.", sched,
                 self.tm.stats["num_running_reqs"]),
                ("num_queue_reqs", "gauge", "The number of requests in the waiting queue.", sched,
                 self.tm.stats["num_queue_reqs"]),
                ("token_usage", "gauge", "The token usage.", sched, self.tm.stats["token_usage"]),
                ("gen_throughput", "gauge", "The generation throughput (token/s).", sched,
                 self.tm.stats["gen_throughput"]),
                ("prompt_tokens_total", "counter", "Number of prefill tokens processed.",
                 'model_name="%s"' % name, self.tm.totals["prompt_tokens"]),
                ("generation_tokens_total", "counter", "Number of generation tokens processed.",
                 'model_name="%s"' % name, self.tm.totals["generation_tokens"]),
                ("num_requests_total", "counter", "Number of requests processed.",
                 'model_name="%s"' % name, self.tm.totals["num_requests"])):
            lines += ["# HELP sglang:%s %s" % (metric, help_text), "# TYPE sglang:%s %s" % (metric, kind),
                      "sglang:%s{%s} %s" % (metric, labels, float(value))]
        return "\n".join(lines) + "\n"


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, tokenizer_manager: TokenizerManager):
        self.tokenizer_manager = tokenizer_manager
        super().__init__(address, Handler)


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


def _sigterm_watchdog(tm: TokenizerManager, interval: float, slow_exit: float) -> None:
    while not tm.gracefully_exit:
        time.sleep(interval)
    while True:
        remain = len(tm.rid_to_state)
        if tm.health_check_failed:
            logger.error("Signal SIGTERM received while health check failed. Exiting... "
                         "remaining number of requests: %d", remain)
            break
        if get_bool_env_var("SGL_FORCE_SHUTDOWN"):
            logger.error("Signal SIGTERM received while force shutdown flag set. Force exiting... "
                         "remaining number of requests: %d", remain)
            break
        logger.info("Gracefully exiting... remaining number of requests %d", remain)
        if remain == 0:
            break
        time.sleep(interval)
    time.sleep(slow_exit)
    kill_process_tree(os.getpid(), include_parent=True)


def _wait_and_warmup(server_args: ServerArgs, tm: TokenizerManager) -> None:
    url = "http://%s:%d" % ("127.0.0.1" if server_args.host in ("0.0.0.0", "") else server_args.host,
                            server_args.port)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        delay = env_float("GPUSIM_SGLANG_WARMUP_SECONDS", 1.0)
        for attempt in range(120):
            time.sleep(delay)
            try:
                with opener.open(url + "/model_info", timeout=5) as res:
                    if res.status == 200:
                        break
            except OSError:
                if attempt == 119:
                    raise
        if not server_args.skip_server_warmup:
            body = {"text": WARMUP_PROMPT, "sampling_params": {"temperature": 0, "max_new_tokens": 8}}
            req = urllib.request.Request(url + "/generate", json.dumps(body).encode(),
                                         {"content-type": "application/json"})
            with opener.open(req, timeout=600) as res:
                res.read()
    except Exception as e:
        logger.error("Initialization failed. warmup error: %s", e)
        kill_process_tree(os.getpid())
        return
    tm.server_status = "Up"
    logger.info("The server is fired up and ready to roll!")


def launch_server(server_args: ServerArgs) -> None:
    fault_set = faults()
    logger.info("server_args=%r", server_args)
    if "defunct" not in fault_set:
        signal.signal(signal.SIGCHLD, _sigchld_handler)
    signal.signal(signal.SIGQUIT, _sigquit_handler)

    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(server_args.tp_size)
    req_reader, req_writer = ctx.Pipe(duplex=False)
    det_reader, det_writer = ctx.Pipe(duplex=False)
    out_reader, out_writer = ctx.Pipe(duplex=False)
    procs, ready_readers = [], []
    for rank in range(server_args.tp_size):
        reader, writer = ctx.Pipe(duplex=False)
        first = rank == 0
        proc = ctx.Process(target=run_scheduler_process,
                           args=(server_args, rank, writer, req_reader if first else None,
                                 det_writer if first else None, barrier))
        proc.start()
        writer.close()
        procs.append(proc)
        ready_readers.append(reader)
    detokenizer = ctx.Process(target=run_detokenizer_process, args=(server_args, det_reader, out_writer))
    detokenizer.start()
    for conn in (req_reader, det_reader, det_writer, out_writer):
        conn.close()

    scheduler_info = {}
    for rank, reader in enumerate(ready_readers):
        try:
            data = reader.recv()
        except EOFError:
            logger.error("Rank %d scheduler is dead. Please check if there are relevant logs.", rank)
            procs[rank].join()
            logger.error("Exit code: %s", procs[rank].exitcode)
            raise
        scheduler_info = scheduler_info or data

    tm = TokenizerManager(server_args, req_writer, out_reader, scheduler_info)
    if "defunct" in fault_set:
        ctx.Process(target=_exit_at_once).start()
    try:
        httpd = Server((server_args.host, server_args.port), tm)
    except OSError as e:
        logger.error("ERROR:    [Errno %s] error while attempting to bind on address %r: %s",
                     e.errno, (server_args.host, server_args.port), (e.strerror or str(e)).lower())
        raise SystemExit(1)

    def sigterm_handler(signum, frame):
        logger.warning("SIGTERM received. signum=%d frame=%r. Draining requests and shutting down...",
                       signum, frame)
        if "orphan" in fault_set:
            os._exit(0)
        tm.gracefully_exit = True

    signal.signal(signal.SIGTERM, sigterm_handler)
    slow_exit = env_float("GPUSIM_SGLANG_SLOW_EXIT_SECONDS", 3.0) if "slow_exit" in fault_set else 0.0
    threading.Thread(target=_sigterm_watchdog, name="sigterm-watchdog", daemon=True,
                     args=(tm, env_float("GPUSIM_SGLANG_WATCHDOG_INTERVAL", 5.0), slow_exit)).start()
    threading.Thread(target=_wait_and_warmup, name="warmup", daemon=True, args=(server_args, tm)).start()
    logger.info("INFO:     Started server process [%d]", os.getpid())
    logger.info("INFO:     Waiting for application startup.")
    logger.info("INFO:     Application startup complete.")
    logger.info("INFO:     Uvicorn running on http://%s:%d (Press CTRL+C to quit)", server_args.host, server_args.port)
    httpd.serve_forever()


def run_server(argv: list, prog: str = None) -> None:
    """Parse ARGV as the server's flags and run until shut down."""
    server_args = prepare_server_args(argv, prog=prog)
    try:
        launch_server(server_args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)
