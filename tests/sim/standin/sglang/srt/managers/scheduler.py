# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The scheduler process: one per tensor-parallel rank, each owning one GPU.

Rank r opens /dev/nvidia<minor> of its GPU and registers mem_fraction_static x total MiB with
the NVML test double; rank 0 runs the continuous-batching loop that produces tokens.
A ShutdownReq (here: the shared shutdown event) breaks every rank's loop; each then releases
its GPU memory in userspace and exits (sglang/srt/managers/scheduler.py Scheduler.handle_shutdown
and the finally of run_scheduler_process).
"""

from __future__ import annotations

import glob
import logging
import os
import signal
import subprocess
import sys
import time
import traceback

import setproctitle

from sglang.srt import tokenizer
from sglang.srt.distributed import parallel_state
from sglang.srt.entrypoints.engine import local_tp_ranks, scheduler_gpu_id
from sglang.srt.utils import configure_logger, env_float, faults, get_bool_env_var, kill_itself_when_parent_died

logger = logging.getLogger(__name__)

try:
    from sglang.srt.models import hs_dump
except ImportError:  # an unpatched install
    hs_dump = None

GIB = 1024.0
DECODE_LOG_INTERVAL = 40
# A process with no "sglang" in its name that holds the GPU open (fault "devholder").
DEVHOLDER_CODE = ("import os, sys, time, setproctitle\n"
                  "fd = os.open(sys.argv[1], os.O_RDWR)\n"
                  "setproctitle.setproctitle(sys.argv[2])\n"
                  "while True:\n    time.sleep(3600)\n")


def gpu_for_rank(server_args, tp_rank: int) -> int:
    """NVML index of the GPU a rank uses, through CUDA_VISIBLE_DEVICES: base_gpu_id + rank x step, the rank
    counted on its own node (entrypoints/engine.py Engine._launch_scheduler_processes)."""
    gpu_id = scheduler_gpu_id(server_args, tp_rank)
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if not visible:
        return gpu_id
    if gpu_id >= len(visible):
        raise RuntimeError("CUDA error: invalid device ordinal")
    return visible[gpu_id]


def free_mib(node, gpu: int) -> int:
    """Free memory on GPU as NVML reports it: total less reserved and what processes hold."""
    return node.gpus[gpu]["total_mib"] - node.gpus[gpu]["reserved_mib"] - node.used_mib(gpu)


class Scheduler:
    def __init__(self, server_args, tp_rank: int, barrier, out_writer, fault_set: set, shutdown=None,
                 dist_port: int = None):
        from gpusim.nvml import Node  # the NVML test double's state

        self.server_args = server_args
        self.tp_rank = tp_rank
        self.local_ranks = local_tp_ranks(server_args)  # this node's share of the TP ranks
        self.group = None  # the process group across nodes (--nnodes > 1 only)
        self.collective = None
        self.dist_port = dist_port
        self.out_writer = out_writer
        self.faults = fault_set
        self.shutdown = shutdown
        self.startup_time = time.time()
        self.node = Node(os.environ.get("GPUSIM_STATE", "/var/lib/gpusim"))
        self.gpu = self._resolve(gpu_for_rank(server_args, tp_rank))
        self.total_mib = self.node.gpus[self.gpu]["total_mib"]
        self.devices = []
        self.children = []
        self.load_seconds = env_float("GPUSIM_SGLANG_LOAD_SECONDS", 1.0)
        self.token_delay = env_float("GPUSIM_SGLANG_TOKEN_DELAY", 0.01)
        cfg = server_args.hf_config
        self.num_layers = int(cfg.get("num_hidden_layers", 32))
        self.hidden_size = int(cfg.get("hidden_size", 4096))
        heads = int(cfg.get("num_attention_heads", 32))
        kv_heads = int(cfg.get("num_key_value_heads", heads))
        head_dim = self.hidden_size // heads
        # K and V, every layer, bf16, this rank's share of the KV heads
        self.kv_bytes_per_token = 2 * self.num_layers * kv_heads * head_dim * 2 // server_args.tp_size
        self.max_total_num_tokens = 0

        self._init_distributed(barrier)
        self._load_model()

    def _resolve(self, gpu) -> int:
        if isinstance(gpu, str) and not gpu.isdigit():
            if gpu not in self.node.gpu_uuids:
                raise RuntimeError("CUDA error: invalid device ordinal")
            return self.node.gpu_uuids.index(gpu)
        gpu = int(gpu)
        if not 0 <= gpu < self.node.count:
            raise RuntimeError("CUDA error: invalid device ordinal")
        return gpu

    def _avail_gb(self) -> float:
        return free_mib(self.node, self.gpu) / GIB

    def _init_distributed(self, barrier) -> None:
        logger.info("Init torch distributed begin.")
        device = "/dev/nvidia%d" % self.node.gpus[self.gpu]["minor"]
        if not os.path.exists(device):
            raise RuntimeError("CUDA error: no CUDA-capable device is detected")
        for path in ("/dev/nvidiactl", "/dev/nvidia-uvm", device):
            if os.path.exists(path):
                self.devices.append(os.open(path, os.O_RDWR))
        if self.server_args.nnodes > 1:
            self._init_process_group()
        ranks = self.local_ranks
        gpus = [self._resolve(gpu_for_rank(self.server_args, r)) for r in ranks]
        free = [free_mib(self.node, g) / GIB for g in gpus]
        barrier.wait(timeout=120)  # nobody allocates before every rank has measured
        logger.info("Init torch distributed ends. mem usage=0.00 GB")
        local, lowest = free[ranks.index(self.tp_rank)], min(free)
        if self.server_args.tp_size > 1 and lowest < local * 0.9:
            message = ("The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
                       "min_per_gpu_memory=%s, local_gpu_memory=%s, local_gpu_memory * 0.9=%s"
                       % (lowest, local, local * 0.9))
            if not get_bool_env_var("SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK"):
                raise ValueError(message)
            logger.warning(message)

    def _init_process_group(self) -> None:
        """The rendezvous of every rank of every node at the init address (distributed/parallel_state.py
        init_distributed_environment, torch's tcp:// rendezvous); see sglang/srt/distributed/parallel_state.py."""
        args = self.server_args
        rank = parallel_state.world_rank(args, self.tp_rank)
        timeout = parallel_state.dist_timeout(args)
        self.collective = parallel_state.CollectiveTimeout(rank, parallel_state.peer_timeout(args))
        self.group = parallel_state.ProcessGroup(
            parallel_state.dist_init_address(args, self.dist_port), args.tp_size * args.pp_size, rank, timeout,
            on_peer_gone=self.collective.peer_gone, on_shutdown=self.shutdown.set).rendezvous()

    def _load_model(self) -> None:
        args = self.server_args
        budget = int(args.mem_fraction_static * self.total_mib)
        weights = budget * 2 // 5
        arch = (args.hf_config.get("architectures") or ["LlamaForCausalLM"])[0]
        dtype = args.hf_config.get("torch_dtype", "bfloat16") if args.dtype == "auto" else args.dtype
        logger.info("Load weight begin. avail mem=%.2f GB", self._avail_gb())
        tic = time.time()
        self._read_weights()
        time.sleep(self.load_seconds * 0.3)
        self.node.allocate(self.gpu, weights // 2)
        if "crash_on_load" in self.faults and self.tp_rank == 0:
            raise RuntimeError(
                "CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other "
                "API call, so the stacktrace below might be incorrect.\nFor debugging consider passing "
                "CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n")
        time.sleep(self.load_seconds * 0.3)
        self.node.allocate(self.gpu, weights - weights // 2)
        self.weights_mib = weights
        logger.info("Load weight end. elapsed=%.2f s, type=%s, dtype=torch.%s, avail mem=%.2f GB, "
                    "mem usage=%.2f GB.", time.time() - tic, arch, dtype, self._avail_gb(), weights / GIB)
        kv = budget - weights
        self.node.allocate(self.gpu, kv)
        self.max_total_num_tokens = args.max_total_tokens or int(kv * 2**20 // self.kv_bytes_per_token)
        logger.info("KV Cache is allocated. #tokens: %d, KV size: %.2f GB", self.max_total_num_tokens, kv / GIB)
        logger.info("Memory pool end. avail mem=%.2f GB", self._avail_gb())
        if args.cuda_graph_backend_decode != "disabled":
            logger.info("Capture cuda graph begin. This can take up to several minutes. avail mem=%.2f GB",
                        self._avail_gb())
            tic = time.time()
            time.sleep(self.load_seconds * 0.4)
            logger.info("Capture cuda graph end. Time elapsed: %.2f s. mem usage=0.00 GB. avail mem=%.2f GB.",
                        time.time() - tic, self._avail_gb())
        if "devholder" in self.faults and self.tp_rank == 0:
            title = "python3 -m torch._inductor.compile_worker --kind=fork --workers=4 --parent=%d" % os.getpid()
            device = "/dev/nvidia%d" % self.node.gpus[self.gpu]["minor"]
            self.children.append(subprocess.Popen([sys.executable, "-c", DEVHOLDER_CODE, device, title],
                                                  stdin=subprocess.DEVNULL))
        self.max_running_requests = args.max_running_requests or 2048
        logger.info("max_total_num_tokens=%d, chunked_prefill_size=%d, max_prefill_tokens=%d, "
                    "max_running_requests=%d, context_len=%d, available_gpu_mem=%.2f GB",
                    self.max_total_num_tokens, args.chunked_prefill_size, args.max_prefill_tokens,
                    self.max_running_requests, args.context_length, self._avail_gb())

    def _read_weights(self) -> int:
        """Read this rank's share of the model's *.safetensors shards from disk; return the bytes read.

        SGLang's loader reads the checkpoint's safetensors files at every start
        (model_loader/loader.py DefaultModelLoader, model_loader/weight_utils.py
        safetensors_weights_iterator), so the load is as fast as the disk, or the page cache.
        Here a node's ranks share the files (its i-th rank reads shards i, i + n, ... of its n ranks), as
        0.5.23's _prefetch_all_checkpoints splits them across local ranks: a node reads its checkpoint once.
        """
        shards = sorted(glob.glob(os.path.join(self.server_args.model_path, "*.safetensors")))
        buf = bytearray(8 << 20)
        total = 0
        for path in shards[self.local_ranks.index(self.tp_rank)::len(self.local_ranks)]:
            with open(path, "rb", buffering=0) as f:
                n = f.readinto(buf)
                while n:
                    total += n
                    n = f.readinto(buf)
        return total

    def info(self) -> dict:
        return {"status": "ready", "max_total_num_tokens": self.max_total_num_tokens,
                "max_req_input_len": self.server_args.context_length - 1, "startup_time": self.startup_time,
                "max_running_requests": self.max_running_requests,
                "hicache_object_layout": {"enabled": False, "backend": None, "page_size": 1,
                                          "hicache_object_layout": {"pools": []},
                                          "reason": "Hierarchical cache is disabled"}}

    def event_loop(self, req_reader) -> None:
        """Continuous batching: new requests join the running batch, one token per step each."""
        running, step, stats = [], 0, None
        while not self.shutdown_requested():
            if self.stuck():
                self.collective.sit()
            try:
                while req_reader.poll(0 if running else 0.2):
                    req = self._prefill(req_reader.recv(), len(running))
                    if req["max_new_tokens"] > 0:
                        running.append(req)
                    else:
                        self._send(("finished", req))
            except (EOFError, OSError):
                logger.debug("Request channel closed; idling.")
                self.idle()
                return
            if running:
                time.sleep(self.token_delay)
                step += 1
                for req in running:
                    req["output_ids"].append(tokenizer.next_token(req["input_ids"], req["output_ids"]))
                for req in [r for r in running if len(r["output_ids"]) >= r["max_new_tokens"]]:
                    running.remove(req)
                    self._send(("finished", req))
                if step % DECODE_LOG_INTERVAL == 0 and running:
                    logger.info("Decode batch, #running-req: %d, #token: %d, token usage: %.2f, cuda graph: %s, "
                                "gen throughput (token/s): %.2f, #queue-req: 0", len(running), self._tokens(running),
                                self._tokens(running) / self.max_total_num_tokens,
                                self.server_args.cuda_graph_backend_decode != "disabled",
                                len(running) / max(self.token_delay, 1e-3))
            current = {"num_running_reqs": len(running), "num_queue_reqs": 0, "num_used_tokens": self._tokens(running),
                       "token_usage": round(self._tokens(running) / self.max_total_num_tokens, 4),
                       "gen_throughput": len(running) / max(self.token_delay, 1e-3) if running else 0.0}
            if current != stats:
                stats = current
                self._send(("stats", stats))

    def _send(self, message) -> None:
        """Results go to the detokenizer; a dead one loses them, as with ZMQ."""
        try:
            self.out_writer.send(message)
        except OSError:
            pass

    def _prefill(self, req: dict, num_running: int) -> dict:
        logger.info("Prefill batch, #new-seq: 1, #new-token: %d, #cached-token: 0, full token usage: 0.00, "
                    "#running-req: %d, #queue-req: 0", len(req["input_ids"]), num_running)
        if hs_dump is not None:
            hs_dump.maybe_dump(req["rid"], req["input_ids"], self.hidden_size, self.num_layers)
        req["output_ids"] = []
        return req

    @staticmethod
    def _tokens(running: list) -> int:
        return sum(len(r["input_ids"]) + len(r["output_ids"]) for r in running)

    def shutdown_requested(self) -> bool:
        return self.shutdown is not None and self.shutdown.is_set()

    def stuck(self) -> bool:
        """Whether a peer node is gone: this rank then sits in its collective (parallel_state.CollectiveTimeout)."""
        return self.collective is not None and self.collective.stuck.is_set()

    def idle(self) -> None:
        """Wait for the ShutdownReq (ranks other than 0, and rank 0 once its request channel is gone).

        Across nodes a rank whose peer is gone never gets it: it sits until the collective timeout."""
        if self.group is None:
            while not (self.shutdown.wait(3600) if self.shutdown is not None else time.sleep(3600)):
                pass
            return
        while not self.shutdown.wait(0.2):
            if self.stuck():
                self.collective.sit()
        if self.stuck():
            self.collective.sit()
        self.group.leave()

    def release(self) -> None:
        """Free this rank's GPU memory in userspace, as the graceful path of run_scheduler_process does.

        It takes GPUSIM_SGLANG_MEMORY_RELEASE_SECONDS. With the fault hang_in_release the highest
        rank frees its KV cache, then hangs before it frees the weights: the main process SIGKILLs
        it at the end of its 15 s wait, and the NVML double then treats what it still held as a
        dead holder's memory (gpusim/nvml.py Node.used_mib: gone after the double's release lag).
        """
        seconds = env_float("GPUSIM_SGLANG_MEMORY_RELEASE_SECONDS", 1.0)
        if "hang_in_release" in self.faults and self.tp_rank == self.server_args.tp_size - 1:
            time.sleep(seconds / 2)
            self.node.free(self.gpu)
            self.node.allocate(self.gpu, self.weights_mib)
            while True:
                time.sleep(3600)
        time.sleep(seconds)
        self.node.free(self.gpu)
        for fd in self.devices:
            os.close(fd)
        self.devices = []


def run_scheduler_process(server_args, tp_rank: int, ready_writer, req_reader, out_writer, barrier,
                          shutdown=None, dist_port: int = None) -> None:
    fault_set = faults()
    if "orphan" not in fault_set:
        kill_itself_when_parent_died()
    prefix = " TP%d" % tp_rank if server_args.tp_size > 1 else ""
    configure_logger(server_args.log_level, prefix=prefix)
    setproctitle.setproctitle("sglang::scheduler" + prefix.replace(" ", "_"))
    if "ignore_sigterm" in fault_set and tp_rank == server_args.tp_size - 1:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    parent = os.getppid()
    try:
        scheduler = Scheduler(server_args, tp_rank, barrier, out_writer, fault_set, shutdown, dist_port)
        ready_writer.send(scheduler.info())
        if tp_rank == 0:
            scheduler.event_loop(req_reader)  # returns on ShutdownReq
        scheduler.idle()
    except Exception:
        logger.error("Scheduler hit an exception: %s", traceback.format_exc())
        os.kill(parent, signal.SIGQUIT)
        return
    scheduler.release()
