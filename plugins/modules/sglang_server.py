#!/usr/bin/python
# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_server
short_description: Run an SGLang server on a node, or stop every one, in one call
version_added: 0.2.0
description:
  - O(state=started) makes the new server run - the server's directories (O(directories)), the run directory of its
    dumps (O(dump_dir)) and this run's directory of secret files (O(run_dir)), then the stop of
    what runs (O(stop)), the start of the server under its supervisor (O(start) - a process in its own session, a
    systemd unit, a Docker or Podman container), the wait until O(path) answers 200, the checks of O(checks) and the
    record O(record), in this order and in one call - nothing else runs between the old server's exit and the new
    server's start. What the node runs, and whether it must restart, is the plan of M(gpuops.host.sglang_server_info),
    which reads and compares only.
  - O(state=stopped) stops every SGLang server of the node (O(stop)) - find, drain, stop through the supervisors,
    stop what is left with M(gpuops.host.gpu_reap)'s escalation, verify the GPUs, watch for a server started again.
  - Every result has RV(actions) - the steps taken, with their seconds; O(state=started) also RV(diff), the recorded
    server's identity before and the new one after. In check mode O(state=started) reads what its stop would stop,
    signals and writes nothing, and returns the steps it would take with C(changed) true.
  - The wait stops at once, with the end of the server's log (secrets masked), when the server's main process exits,
    and ready also means that the listener on the port of O(url) belongs to the server's tree - a port held by
    another process (one that bound it while the server loaded) fails the call, naming that process by PID, user and
    command line.
  - A process is its real user's throughout (O(stop.owners), RV(servers), RV(others)) - the UID of
    C(/proc/PID/status), not the owner of C(/proc/PID), which is the effective UID.
  - For each server the stop finds, what runs it (RV(servers[].supervisor)) - a systemd unit, read from the
    C(name=systemd) line (cgroup v1) or the C(0::) line (cgroup v2) of C(/proc/PID/cgroup) and then from
    C(systemctl show); a Docker container (C(/docker/ID), C(docker-ID.scope)) or a Podman one (C(libpod-ID)), then
    from C(docker|podman inspect); or nobody, a process in its own session, with the parent that may start it again. A
    unit is only taken for the supervisor where systemd is PID 1 of the module's PID namespace.
  - Secrets - O(stop.api_key), O(checks.api_key), O(secrets), O(secret_server_args) and O(environment_file) - never
    appear on a command line, in messages, in results or in the module's invocation log
    (syslog, or the journal) - those options are declared C(no_log).
author:
  - gpuops maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.host.attributes
attributes:
  check_mode:
    support: full
    details:
      - O(state=started) runs its stop's reading (what would be drained and stopped) and signals, starts and writes
        nothing; RV(actions) lists the steps it would take.
  diff_mode:
    support: full
    details:
      - O(state=started) returns RV(diff) - the recorded server's identity and the new one's.
  idempotent:
    support: none
    details:
      - O(state=started) restarts the server each time it runs - the plan of M(gpuops.host.sglang_server_info) says
        whether the node needs that; O(state=stopped) changes nothing where no server runs, O(state=absent) nothing
        where nothing is left to remove either.
options:
  state:
    description:
      - V(started) - the new server runs - O(directories), O(dump_dir) and O(run_dir) made (with its secret files),
        what runs stopped (O(stop)), the server
        started under its supervisor (O(start)), its answer awaited (O(path)), its checks passed (O(checks)) and its
        record written (O(record)), in this order and in one call. Whether the node needs that is the plan of
        M(gpuops.host.sglang_server_info), which compares the running server with the desired one.
      - V(stopped) - no SGLang server of the node runs (O(stop)).
      - V(absent) - no SGLang server of the node runs (O(stop)), and what the collection made to run the recorded one
        (the record of O(record.path), else of O(stop.record_path)) is gone - its systemd unit file where gpuops.host
        wrote it (disabled and removed, systemd reloaded; a unit file of the team's own, a link or a file that is not
        root's is left, and said in RV(kept)), the exited containers
        the collection started with the record's engine (by their label C(gpuops.host.role=sglang_launch)), the run
        directories of secret files (C(runs/) beside the record), the PID file and the record itself. Never a dump
        directory, a log or the run history (C(runs.jsonl)).
    type: str
    choices: [started, stopped, absent]
    default: started
  command:
    description:
      - With O(state=started), the server's command line whose argument files go into O(run_dir) - the C(--config) file
        of every argument (O(command.config_file)) or of the secret ones (O(command.secrets_path)) - as
        M(gpuops.host.sglang_server_info) checked it with the installed SGLang's parser
        (RV(gpuops.host.sglang_server_info#module:command.config_keys)).
      - O(command.server_args) is logged as given (syslog, or the journal), so a secret value there (a name with C(key),
        C(token), C(secret) or C(password), or listed in O(command.secret_args)) is refused before anything is done.
    type: dict
    suboptions:
      server_args:
        description: The server's arguments by SGLang's own names (C(model_path), C(tp_size)), secrets apart.
        type: dict
        default: {}
      secret_args:
        description: More argument names whose values are secrets.
        type: list
        elements: str
        default: []
      config_file:
        description: Every argument in the C(--config) file O(command.config_path), none on the command line.
        type: bool
        default: false
      config_path:
        description: The C(--config) file of O(command.config_file), in O(run_dir).
        type: path
      secrets_path:
        description: The C(--config) file of the secret arguments, in O(run_dir).
        type: path
      config_keys:
        description: The file keys the installed release accepts, by argument name, as the parser's check returned them.
        type: dict
        default: {}
  secret_server_args:
    description:
      - With O(command), the server's secret arguments (C(api_key)) - never logged, never on a command line; they go into
        the C(--config) file O(command.secrets_path) (or O(command.config_path)); with O(launch), its secret arguments.
    type: dict
    default: {}
  secret_environment:
    description:
      - With O(launch), the server's secret environment variables (C(HF_TOKEN)) - never logged; they go into the run
        directory's environment file (mode 0600), and count in the configuration's identity by a digest only.
    type: dict
    default: {}
  directories:
    description:
      - With O(state=started), directories the server needs (the state directory, its C(runs), the log directory), made
        first where they are missing, with their parents - root's, mode 0750, of O(directories[].group) where it is
        given. A link, or a directory that is not root's, is refused before anything is stopped.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The directory.
        type: path
        required: true
      group:
        description: Its group (GID); unset, it keeps its own.
        type: int
  dump_dir:
    description:
      - With O(state=started), the run directory of the new server's hidden-state dumps, made before anything is
        stopped as M(gpuops.host.dump_dir) makes it - under the checked dump root (no link, no directory on its way that
        another user can change), with the free space asked, by C(mkdir) of a name where nothing is yet; mode 0750, of
        the server's user and the dump group. RV(dump_made) says, in a failure too, that it was made, so that the caller
        can remove it while it stays empty.
    type: dict
    suboptions:
      root:
        description: The dump root.
        type: path
        required: true
      name:
        description: The run directory's name, a plain name.
        type: str
        required: true
      owner:
        description: The server's user (UID).
        type: int
        default: 0
      group:
        description: The dump group (GID), which reads the dumps.
        type: int
        default: 0
      min_free_gb:
        description: The free space the dump root must have, in GB.
        type: float
        default: 0
  run_dir:
    description:
      - With O(state=started), this run's directory of secret files, made before anything is stopped - root's and
        writable by root alone (mode 0750, its group O(run_dir.group)), with the argument files of O(command) (mode
        0600, O(run_dir.owner)'s) and the environment file C(server.env) (O(environment_file), mode 0600). Each file is
        written beside its
        name and renamed over it, never through a link; a directory that is a link or not root's is refused.
    type: dict
    suboptions:
      path:
        description: The directory.
        type: path
        required: true
      group:
        description: Its group (GID), the server's, which passes through it to its argument files.
        type: int
        default: 0
      owner:
        description: The owner of the argument files, the server's user.
        type: dict
        suboptions:
          uid:
            description: Its UID.
            type: int
            required: true
          gid:
            description: Its GID.
            type: int
            required: true
      environment_owner:
        description: The owner of C(server.env); unset, root (a container's shell reads it as the server's user).
        type: dict
        suboptions:
          uid:
            description: Its UID.
            type: int
            required: true
          gid:
            description: Its GID.
            type: int
            required: true
  environment_file:
    description: The content of O(run_dir)'s C(server.env), the server's environment; never logged. Unset, none is written.
    type: str
  url:
    description:
      - Base URL of the new server, where it answers once ready (RV(listener) checks that it is its own).
      - Required with O(state=started), with O(start), unless O(relaunch) is set.
    type: str
  path:
    description: The path that answers 200 once the server is ready (C(/health_generate) runs a generation).
    type: str
    default: /health_generate
  timeout:
    description: Seconds the new server may take, from its start, to answer O(path) with 200.
    type: float
    default: 600
  interval:
    description: Seconds between two readiness requests; the ready answer is noticed at most this late.
    type: float
    default: 0.5
  request_timeout:
    description: Seconds one readiness request may take, cut to the time left of O(timeout).
    type: float
    default: 10
  log_path:
    description:
      - The server's log, quoted (secrets masked) when it fails to become ready.
      - With O(start.kind=systemd), made first where it is missing, mode 0600 (SGLang logs its arguments, API key
        included) - the unit appends to it; a link there is refused.
    type: path
  log_lines:
    description: Lines of O(log_path) to quote.
    type: int
    default: 50
  secrets:
    description: More values to mask in messages, results and log tails (those of 4 characters or more).
    type: list
    elements: str
    default: []
  checks:
    description:
      - The checks that a server which answers ready must pass before it counts as ready, in this
        order, each sent only to the server's own listener; the first that fails fails the call, with RV(check)
        naming it and RV(pid) the server (which the caller stops).
      - With O(checks.dump_dir), the dump directory in the environment of the main process and of every scheduler
        (one per GPU of O(checks.gpus)), then a probe request whose own hidden-state dump must appear there.
      - Else, with O(checks.schedulers), that many titled schedulers alive in the server's tree.
      - With O(checks.expected_info), C(/server_info) against those values.
      - Then NVML must show every GPU of O(checks.gpus) with at least O(checks.min_used_mib) in use (a server that
        came up on other GPUs answers ready all the same).
      - Unset, the call only waits.
    type: dict
    suboptions:
      dump_dir:
        description: The run directory the server dumps into; unset, nothing is checked of dumps.
        type: path
      prompt:
        description: The probe's prompt; unset, a sentence of the collection's.
        type: str
      probe:
        description:
          - With O(checks.dump_dir), send the probe; V(false) for a node of rank 1 or more of a multi-node server, which
            takes no request (its schedulers' environment is still checked).
        type: bool
        default: true
      probe_timeout:
        description: Seconds to wait for the probe's answer and its dump.
        type: float
        default: 60
      expected_info:
        description: The values C(/server_info) must report, by name (RV(gpuops.host.sglang_server_info#module:command.expected_info)); unset, not checked.
        type: dict
      api_key:
        description: The server's API key; unset, the key of the server's own command line or C(--config) file, if any.
        type: str
      gpus:
        description: The GPUs (indices) the server should occupy.
        type: list
        elements: int
        default: []
      min_used_mib:
        description: Memory in use (MiB) below which a GPU counts as one the server does not occupy.
        type: int
        default: 1024
      schedulers:
        description:
          - Without O(checks.dump_dir) (whose check counts them too), the fewest titled schedulers (C(sglang::scheduler*))
            the server's tree must have, alive - one per GPU of the node. A node of rank 1 or more of a multi-node
            server answers its readiness path with 200 whatever its schedulers do; this check is what proves it ready.
            V(0) checks nothing.
        type: int
        default: 0
      expected_count:
        description: The number of GPUs NVML must show, as O(gpuops.host.gpu_verify#module:expected_count).
        type: int
      v1_reserved_mib:
        description: As O(gpuops.host.gpu_verify#module:v1_reserved_mib), for a driver without the v2 memory call.
        type: int
  stop:
    description:
      - The stop of every SGLang server of the node - find the servers (the one the record O(stop.record_path) names by
        its run marker, those of O(stop.presets), O(stop.patterns) and O(stop.pids), of the users O(stop.owners)), drain
        each of them at the address where its own tree listens, stop those of a unit or a container through their
        supervisor, stop what is left with M(gpuops.host.gpu_reap)'s escalation (SIGTERM to the main processes, SIGKILL
        after O(stop.stop_timeout)), wait until every GPU is clean (O(stop.verify)), and where a server had a parent that
        may start it again, watch for that for O(stop.settle) seconds. Every option is checked, and NVML opened, before
        anything is drained or signalled.
      - With O(state=stopped), what the call does. With O(state=started), what it does first, in the same call, so that
        nothing else runs between the old server's exit and the new server's start; the result has the stop's as
        RV(stopped), and a failure of the stop itself says so with RV(stop_failed). Unset with O(state=started), nothing
        is stopped first.
      - A server is drained with the API key it was started with, where its command line or its own C(--config) file
        says, else with O(stop.api_key) - but only a server that the record names by PID and start time, one that root
        itself runs, or one whose real user is the recorded server's or in O(stop.api_key_users). The listener is checked
        again before every request that carries the key; no key goes with C(/metrics) or C(/health*), and no redirect is
        followed. A server whose listener cannot be tied to its tree, or that is not trusted with the key, is sent
        nothing - it is listed in RV(undrained), and cannot hold up the stop.
    type: dict
    suboptions:
      record_path:
        description:
          - The record (C(server.json)) that P(gpuops.host.sglang_launch#role) keeps of its server. The process
            whose environment carries the record's run marker (C(GPUOPS_RUN)) is that server, with the URL recorded there.
            A missing record finds nothing by marker.
        type: path
      presets:
        description: M(gpuops.host.gpu_reap) presets whose command line patterns find servers started by hand.
        type: list
        elements: str
        default:
          - sglang
      patterns:
        description: More regular expressions matched against the full command line of a main process.
        type: list
        elements: str
        default: []
      pids:
        description:
          - Main processes to take for servers whatever their command line - needed only for a server that the
            SGLang Model Gateway's co-launcher started (C(sglang::server)), which is otherwise reported in RV(gateways) and
            refused by the stop.
        type: list
        elements: int
        default: []
      owners:
        description:
          - The users whose servers the stop finds (names, or UIDs where a user has no name), by the real
            UID of each process. Another user's server is listed in RV(others), with its user, PID and ports, and is never
            drained (it is sent no API key) nor stopped, unless O(stop.pids) names it. Empty, the servers of every user are found.
          - Only gateways of root itself and of these users (without them, of the found servers' users) can refuse a stop
            for the servers they co-launched, and only their new servers fail the settle watch; another user's neither blocks
            nor fails it.
        type: list
        elements: str
        default: []
      default_url:
        description: The URL of a server whose command line names no C(--port) (it may use C(--config)).
        type: str
        default: http://127.0.0.1:30000
      api_key:
        description:
          - The server's C(--api-key), sent as a bearer token. Without it a server started with an API key answers C(/v1/loads)
            and C(/server_info) with 401; C(/metrics) and C(/health*) need none.
          - The stop drains each server with the key it was started with where its command line
            (C(--api-key)) or its C(--config) file (C(api-key), read as the server names it, only when the file belongs to
            the server's user or the server runs as root) says, and with this key otherwise; so a restart that changes the
            key drains the old server with its own. The checks of O(checks) do the same for the new server.
        type: str
      api_key_users:
        description:
          - The users, beside root itself and the user of the recorded server, whose servers are drained and sent
            O(stop.api_key), by their real UID. Servers of other users are listed in RV(undrained).
        type: list
        elements: str
        default: []
      timeout:
        description:
          - Seconds each server's drain may take.
          - For a node of rank 1 or more of a multi-node server (C(--node-rank)), which has no requests of its own and
            ends with its rank 0's shutdown, the seconds its stop waits while its rank 0 still runs - while its tree
            holds its connection to rank 0's store at C(--dist-init-addr). Rank 0 gone, it is stopped at once.
        type: float
        default: 600
      interval:
        description:
          - Seconds between two readings while waiting; no request in flight is noticed at most this late.
          - A reading is one HTTP request (C(/metrics) or C(/v1/loads), the ready path) or one directory listing, cheap enough
            to repeat twice a second.
        type: float
        default: 0.5
      request_timeout:
        description: Seconds one HTTP request may take, cut to the time left of O(stop.timeout).
        type: float
        default: 10
      force:
        description:
          - When requests are still in flight after O(stop.timeout), abort them and succeed
            with a warning and C(lost), instead of failing; a node of rank 1 or more whose rank 0 still runs after
            O(stop.timeout) is stopped all the same.
        type: bool
        default: false
      stop_timeout:
        description:
          - The seconds a container engine waits after SIGTERM before its SIGKILL.
          - Also the seconds M(gpuops.host.gpu_reap)'s escalation waits after SIGTERM (its C(term_timeout)).
        type: float
        default: 60
      disable_supervisors:
        description:
          - Also keep each supervisor from starting its server again - C(systemctl disable UNIT) for
            an enabled unit that P(gpuops.host.sglang_launch#role) did not write, C(docker|podman update --restart=no) for
            a container (Podman 5.1 and later; an older Podman has no C(podman update --restart), and the stop fails there
            after the container stopped). Without it such a server comes back at the next boot, and the result warns.
        type: bool
        default: false
      reap:
        description:
          - The options of M(gpuops.host.gpu_reap) for what is left after the supervised stops, as that module
            documents them. The stop sets the others - the selectors, C(term_timeout) (O(stop.stop_timeout)) and C(verify) (O(stop.verify)).
        type: dict
        default: {}
        suboptions:
          descendants:
            description: gpu_reap's O(gpuops.host.gpu_reap#module:descendants).
            type: bool
            default: true
          sessions:
            description: gpu_reap's O(gpuops.host.gpu_reap#module:sessions).
            type: bool
            default: true
          other_namespaces:
            description: gpu_reap's O(gpuops.host.gpu_reap#module:other_namespaces).
            type: bool
            default: false
          nvml_processes:
            description: gpu_reap's O(gpuops.host.gpu_reap#module:nvml_processes).
            type: bool
            default: false
          device_holders:
            description: gpu_reap's O(gpuops.host.gpu_reap#module:device_holders).
            type: bool
            default: false
          devices:
            description: gpu_reap's O(gpuops.host.gpu_reap#module:devices).
            type: list
            elements: str
          max_processes:
            description: gpu_reap's O(gpuops.host.gpu_reap#module:max_processes).
            type: int
            default: 512
          protect:
            description: gpu_reap's O(gpuops.host.gpu_reap#module:protect).
            type: list
            elements: str
          protect_defaults:
            description: gpu_reap's O(gpuops.host.gpu_reap#module:protect_defaults).
            type: bool
            default: true
          protect_gateways:
            description: gpu_reap's O(gpuops.host.gpu_reap#module:protect_gateways).
            type: bool
            default: true
          kill_mode:
            description: gpu_reap's O(gpuops.host.gpu_reap#module:kill_mode).
            type: str
            default: mixed
            choices:
              - mixed
              - control-group
          term_signal:
            description: gpu_reap's O(gpuops.host.gpu_reap#module:term_signal).
            type: str
            default: SIGTERM
          kill_timeout:
            description: gpu_reap's O(gpuops.host.gpu_reap#module:kill_timeout).
            type: float
            default: 10
      verify:
        description:
          - After the stop, wait until every GPU (or those in O(stop.verify.gpus)) is clean, and fail the run when they are not
            within O(stop.verify.timeout); the suboptions are those of M(gpuops.host.gpu_verify), with the same defaults.
          - The wait starts the moment the last target is gone. It is not run when a target survived SIGKILL or could not
            be signalled (the run fails then anyway), nor in check mode.
          - Needs C(nvidia-ml-py) on the target.
        type: dict
        suboptions:
          gpus:
            description:
              - GPUs to check, each an NVML index (V(0)) or a UUID (the C(GPU-) prefix may be left out); every GPU when empty.
                A GPU the host does not show fails the run before anything is signalled.
            type: list
            elements: str
            default: []
          max_used_mib:
            description: The most memory, in MiB, a clean GPU may show in use, read through the v2 memory call.
            type: int
            default: 32
          allow_processes:
            description: Whether processes NVML lists may remain on a clean GPU (its memory still within O(stop.verify.max_used_mib)).
            type: bool
            default: false
          v1_reserved_mib:
            description:
              - Drivers without the v2 memory call only, the v1 used memory of this host's GPUs when idle (see M(gpuops.host.gpu_verify));
                without it a v1 reading never counts as clean.
            type: int
          expected_count:
            description:
              - Number of GPUs the host must show; when omitted, the NVIDIA GPUs on the PCI bus.
            type: int
          timeout:
            description: Seconds to wait, from the last target's exit, for every GPU to be clean. V(0) checks once.
            type: float
            default: 60
          poll_interval:
            description:
              - Seconds between two NVML readings; a release is noticed at most this late. More than 0.
            type: float
            default: 0.1
      settle:
        description:
          - How long to watch for a server started again, where a server had a parent other
            than init (a C(while true) wrapper, a script). A unit or a container is stopped through its supervisor, whose
            restart policy an explicit stop does not trigger. V(0) watches nothing.
        type: float
        default: 2
      active_window:
        description:
          - Before anything is drained or signalled - a server whose extraction run
            (its dump directory - the record's for the server the record names, else its main process's C(SGLANG_HS_DUMP_DIR))
            wrote a dump within this many seconds is in an active run, and the call fails, naming the run and what it has
            written (RV(runs)). A driver that feeds a training set sends its next request a moment after the last one finished,
            so a drain that reads zero requests between two of them proves nothing.
          - The readiness check's and the probe's own dumps (C(HEALTH_CHECK), C(gpuops-probe-) in their names), and for the
            recorded server every dump written before it was proven ready (the record's C(checked); SGLang's warm-up request
            dumps too), are counted apart and make no run active. Dumps are counted and sized, never read.
          - V(0) looks at no run.
        type: float
        default: 120
      cut_active_run:
        description:
          - Stop a server in an active extraction run anyway (see O(stop.active_window)); RV(runs) and a warning say that the run
            was cut.
        type: bool
        default: false
      dump_patterns:
        description:
          - The name patterns (shell-style) of the files under a run directory that
            count as the run's dumps (RV(runs), the manifest, O(stop.active_window)); every regular file by default. The dumps
            are counted and sized, never opened. The run's manifest, C(gpuops-manifest.json), is never a dump.
          - The stop completes the manifest of the recorded server's run - written by M(gpuops.host.dump_dir) when the server
            was proven ready - once the server is stopped, with how it ended (V(drained), or V(cut) with O(stop.cut_active_run)),
            the time and the final counts, and where the recorded server is found gone while its manifest still says running,
            as V(crashed). Written as M(gpuops.host.dump_dir) writes it, following no link.
        type: list
        elements: str
        default:
          - '*'
      lock:
        description:
          - The host lock of M(gpuops.host.host_lock) around the stop, in the same call - so the lock costs no
            round trip of its own. Without it the stop does not look at any lock.
          - With O(stop.lock.take=false) the run O(stop.lock.run) must hold the lock already - checked before anything is drained or
            signalled, and again when the stop is done, so that a run that lost the lock to a stale-lock break on another
            controller stops there (RV(lock_lost)).
          - With O(stop.lock.take=true) the stop takes the lock for O(stop.lock.run) before anything is drained or signalled - failing,
            with nothing touched, where another run holds it, as host_lock does - and releases it when it ends, whatever the
            outcome. In check mode it neither takes nor releases it.
        type: dict
        suboptions:
          run:
            description: The run that holds or takes the lock, as host_lock's O(gpuops.host.host_lock#module:run).
            type: str
            required: true
          take:
            description: Take the lock for the stop and release it after (V(true)), or check that O(stop.lock.run) holds it (V(false)).
            type: bool
            default: false
          release:
            description:
              - With O(stop.lock.take=false), release the lock that O(stop.lock.run) holds once the call succeeded -
                for O(state=started) once the new server is recorded, so that the run needs no call of its own to
                release it (RV(lock)). A failed call keeps it, for the run's own release. A lock that cannot be
                released is warned of.
            type: bool
            default: false
          path:
            description: host_lock's O(gpuops.host.host_lock#module:path).
            type: path
            default: /run/gpuops
          owner:
            description: host_lock's O(gpuops.host.host_lock#module:owner).
            type: dict
            default: {}
          max_age:
            description: host_lock's O(gpuops.host.host_lock#module:max_age).
            type: int
            default: 21600
  start:
    description:
      - How the server starts, as the caller rendered its start - O(state=started) starts it, then waits until it answers ready.
      - A start that fails fails the call, with RV(died) and the command's own words; RV(unit_written) says whether
        a unit file was written.
    type: dict
    suboptions:
      kind:
        description:
          - How the server runs. V(process) - O(start.argv) starts it detached and prints its PID last; V(systemd) -
            the unit O(start.unit) is written and restarted; V(docker), V(podman) - O(start.argv) runs the container
            O(start.container), once the exited containers of the collection's earlier runs (its label,
            C(gpuops.host.role=sglang_launch)) are removed, before the stop, so that the name is free.
        type: str
        required: true
        choices: [process, systemd, docker, podman]
      argv:
        description: The command that starts the process or runs the container, run without a shell of the module's own.
        type: list
        elements: str
        default: []
      container:
        description: The container's name, whose main process is the server.
        type: str
      unit:
        description: The unit, for V(systemd).
        type: dict
        suboptions:
          name:
            description: Its name, C(NAME.service).
            type: str
            required: true
          path:
            description: Its file, written beside its name and renamed over it (mode 0644).
            type: path
            required: true
          content:
            description: The file's content.
            type: str
            required: true
          enable:
            description: Whether the unit is enabled (C(WantedBy=) in its content).
            type: bool
            default: false
          migrate:
            description: An earlier release's unit (C(name), C(path)) to stop, disable and remove first, where its file is there.
            type: dict
  record:
    description:
      - Once the server passed every check of O(checks), record it -
        the node's record at O(record.path) (JSON, 0640, written beside its name and renamed over it), the manifest of
        its extraction run where the record names a run directory (a manifest that cannot be written is said in
        RV(record_written), and does not fail the server), a line of the run history, and the removal of older run
        directories. A record that cannot be written fails the call, with RV(check) V(record).
      - Unset, nothing is written.
    type: dict
    suboptions:
      path:
        description: The record, C(server.json) in the state directory.
        type: path
        required: true
      fields:
        description: What the record holds beside who the server is (C(pid), C(start), C(owner)) and C(checked).
        type: dict
        required: true
      dump_patterns:
        description: What the manifest counts as dumps (shell-style name patterns); unset, every regular file.
        type: list
        elements: str
      history:
        description: The run history (JSON lines, 0640) that gets O(record.entry); unset, none is written.
        type: path
      entry:
        description: The line of the run history, to which C(pid), C(seconds_to_ready) and C(finished) are added.
        type: dict
        default: {}
      runs_dir:
        description: The directory of the runs' secret files, whose entries but O(record.keep) are removed.
        type: path
      keep:
        description: The run directories under O(record.runs_dir) to keep.
        type: list
        elements: path
        default: []
      remove:
        description: Files to remove once the server is recorded.
        type: list
        elements: path
        default: []
  rollback:
    description:
      - When the new server fails after the stop signalled the old one, start the previous configuration again - the
        record that O(record.path) held before this call, if it passed its checks - as that record says it was
        started (its C(relaunch), the O(start) of that launch, which O(record.fields) should hold), from its own run
        directory of secret files, which must still be root's alone. It is awaited and checked as a new server is
        (O(checks), with that record's GPUs, expected C(/server_info) values and API key) and recorded again with
        C(rolled_back_from). A configuration that dumped hidden states dumps into a fresh run directory beside its
        own (C(-rollback-) and 8 hex digits), whose name replaces C(SGLANG_HS_DUMP_DIR) in its environment file.
      - Whatever O(rollback) says, a failed O(state=started) also stops the failed server (forced, O(stop) otherwise),
        records the failed launch at O(record.path) and in O(record.history), removes this run's directory of secret
        files (unless a unit file written for it names them) and the run directory of its dumps where that is empty,
        and says in RV(server_now) what the node runs now.
    type: bool
    default: false
  relaunch:
    description:
      - With O(state=started), in place of O(start) and O(url), start the configuration of an earlier record again, as
        O(rollback) does - as that record says it was started, from its own run directory of secret files, checked as
        that record says it was checked (its O(checks), O(path) and GPUs) and recorded again at O(record.path) with
        C(rolled_back_from). Nothing is stopped first - for the nodes of a multi-node server whose group failed, each
        stopped already, that start together.
      - A failure says so, with RV(rollback); nothing is stopped then either.
    type: dict
    suboptions:
      record:
        description: The record of the configuration (the node's record as it was before the failed launch).
        type: dict
        required: true
      failed:
        description: The marker of the failed launch that this start replaces (the record's C(rolled_back_from)).
        type: str
  launch:
    description:
      - The request of P(gpuops.host.sglang_launch#role) - the role's variables by the same names, without the
        C(sglang_launch_) prefix - which the module turns into its plan and its start itself.
      - With O(state=started) it plans first, as M(gpuops.host.sglang_server_info) does - it reads the record, the
        node's servers, the owner (O(launch.user)), the supervisor under O(launch.supervisor=auto) and the command line
        through the installed SGLang's parser, and compares the desired configuration with the running one field by
        field. Where the configuration changed, the server is down or O(launch.restart) is set, it renders the command
        line, the environment file, the unit file or the container command on the node and does what O(state=started)
        does with them, in the same call; otherwise nothing changes (RV(status=unchanged)).
      - Mutually exclusive with the low-level options of the start, which it fills in itself - O(start),
        O(relaunch), O(command), O(record), O(run_dir), O(dump_dir), O(checks), O(environment_file), O(url),
        O(directories) and O(secrets). O(stop) gives its stop's options, O(secret_server_args) and
        O(secret_environment) its secrets.
      - In check mode it plans and returns what it would do (RV(status=check)), touching nothing.
    type: dict
    suboptions:
      mode:
        description:
          - The mode's name (a key of the role's C(sglang_launch_modes)), in the run name, the record and the
            configuration's identity. What the mode does comes with it - O(launch.dumps) and O(launch.verify_info).
        type: str
        required: true
      node_name:
        description:
          - The node's name in the run name (C(MODE-TIME-NAME-RANDOM)), the inventory host name; unset, the node's
            host name.
        type: str
      dumps:
        description:
          - Whether the mode dumps hidden states (the mode table's C(dump_hidden_states)) - the run gets a fresh
            directory under O(launch.dump_root) in C(SGLANG_HS_DUMP_DIR), the installed SGLang must carry the dump
            patch, and the new server is checked for it (the directory in every scheduler's environment, a probe
            request's own dump).
        type: bool
        default: false
      verify_info:
        description:
          - Whether the mode verifies C(/server_info) (the mode table's C(verify_server_info)) - the new server's
            C(/server_info) must report every argument of O(launch.server_args) as the installed SGLang's parser
            stored it.
        type: bool
        default: false
      server_args:
        description:
          - The public server arguments by SGLang's own names (the fields of C(ServerArgs), V(mem_fraction_static)),
            mapped to values - the mode's and the role's, with C(model_path), C(host) and C(port). V(true) renders a
            bare flag, V(false) and V(null) leave it out, a list renders the flag once followed by the items, a mapping
            is passed as JSON.
          - This option is logged as given; secret arguments (C(api_key)) go in O(secret_server_args).
        type: dict
        default: {}
      secret_args:
        description:
          - More argument names (with underscores) to handle as secrets, besides those whose names contain C(key),
            C(token), C(secret) or C(password). Secret arguments reach the server through a C(--config) YAML file of
            mode 0600 in the run directory, never the command line, and are masked in messages and log tails.
        type: list
        elements: str
        default: []
      environment:
        description:
          - The public variables of the server's environment (C(CUDA_VISIBLE_DEVICES), C(HF_HOME)), beside what the
            launch sets itself (C(PATH), C(HOME), C(HF_HOME) unless set here, C(SPT_NOENV), C(GPUOPS_RUN)).
          - This option is logged as given; secret variables (C(HF_TOKEN)) go in O(secret_environment). Every value
            reaches the server through the run directory's 0600 environment file, never a command line.
        type: dict
        default: {}
      python:
        description:
          - The Python interpreter that has SGLang installed, for example V(/opt/sglang/venv/bin/python) - inside
            O(launch.image) for a container. One that cannot import C(sglang) is refused before the running server is
            touched; its directory goes first on the server's C(PATH).
        type: path
        required: true
      module:
        description: The server's entry module, run with C(python -m).
        type: str
        default: sglang.launch_server
      pythonpath:
        description: Directories put on the server's C(PYTHONPATH).
        type: list
        elements: path
        default: []
      config_file:
        description:
          - Pass the arguments as a C(--config) YAML file, with dashed keys, instead of flags. Each launch writes its
            own file, mode 0600, in its run directory (C(runs/MARKER/server-args.yaml) under O(launch.state_dir)), so
            that a rollback starts the previous launch with the file it ran with.
        type: bool
        default: false
      user:
        description:
          - The user the server runs as - the unit's C(User=), the process supervisor's C(setpriv), a container's
            C(--user UID:GID); it must exist on the node. The server gets its C(HOME) and C(HF_HOME)
            (C(HOME/.cache/huggingface), unless O(launch.environment) sets it), and the run and dump directories
            belong to it.
        type: str
        default: root
      group:
        description: The group the server runs as (C(Group=)); empty for the primary group of O(launch.user).
        type: str
        default: ""
      dump_group:
        description:
          - The group that reads the dumps, for example the training job's - each run directory of dumps is
            O(launch.user)'s and this group's, mode 2750, and the dumps are mode 0640 files of this group. Empty for
            the server's own group.
        type: str
        default: ""
      supervisor:
        description:
          - V(systemd) runs the server as a unit (C(KillMode=mixed), C(TimeoutStopSec=) from O(launch.term_timeout));
            V(process) as a detached process in its own session (setsid) with a log file and a pidfile; V(docker) and
            V(podman) as the main process of a container of O(launch.image), named C(gpuops-sglang-MARKER).
          - V(auto) picks V(systemd) where systemd is PID 1, else V(process).
        type: str
        default: auto
        choices: [auto, process, systemd, docker, podman]
      image:
        description:
          - The image SGLang is installed in, for O(launch.supervisor=docker) and O(launch.supervisor=podman)
            (required there); O(launch.python) is its interpreter inside the image. The command-line check runs in a
            throwaway container of it (C(--network=none)).
        type: str
        default: ""
      shm_size:
        description:
          - C(--shm-size) of a Docker container; with C(--ipc=host), which the launch always passes, it applies only
            where the engine honours it. A Podman container does not get it (Podman refuses it beside C(--ipc=host)).
        type: str
        default: 32g
      container_gpu_options:
        description:
          - Options of C(run) that pass the GPUs; V([]) passes every GPU - C(--gpus all) for Docker (NVIDIA Container
            Toolkit), the CDI device C(--device nvidia.com/gpu=all) for Podman. C(CUDA_VISIBLE_DEVICES) and
            C(base_gpu_id) still choose among them.
        type: list
        elements: str
        default: []
      container_network:
        description:
          - V(host) runs the container on the host's network; any other network name runs it there, with
            O(launch.port) published on O(launch.host) (C(--publish HOST:PORT:PORT)).
        type: str
        default: host
      container_restart:
        description:
          - The engine's restart policy - V(no), V(on-failure), V(unless-stopped) or V(always). V(no) by default, so
            that only the collection starts the server; a stop through the engine never triggers a policy.
        type: str
        default: "no"
      container_volumes:
        description:
          - More mounts of the container, C(SRC:DST[:OPTIONS]), beside the model (read-only; for a hub ID, the owner's
            C(HF_HOME)), the dump root and the run directory (read-only), which are always mounted at their host paths.
        type: list
        elements: str
        default: []
      container_options:
        description: More options of the server container's C(run), before the image - no secrets, C(inspect) shows them.
        type: list
        elements: str
        default: []
      unit:
        description:
          - Name of the collection's systemd unit, without C(.service). A unit file of this name that lacks the
            collection's header line (a team's own unit) is never written over - the launch is refused before the
            running server is touched; a C(sglang.service) that an earlier release wrote is migrated.
        type: str
        default: gpuops-sglang
      unit_dir:
        description: Directory of the systemd unit file.
        type: path
        default: /etc/systemd/system
      limit_memlock:
        description: C(LimitMEMLOCK=) of the unit (RDMA and NVSHMEM, as DeepEP uses them, lock memory).
        type: raw
        default: infinity
      limit_nofile:
        description: C(LimitNOFILE=) of the unit.
        type: raw
        default: 1048576
      restart_on_failure:
        description: C(Restart=on-failure) in the unit (otherwise C(Restart=no)).
        type: bool
        default: false
      enable:
        description:
          - Start at boot - the unit gets C([Install] WantedBy=multi-user.target) and is enabled. Turning it off again
            leaves an existing enablement alone; disable it with C(systemctl disable).
        type: bool
        default: false
      term_timeout:
        description:
          - The seconds written into the unit's C(TimeoutStopSec=), which C(systemctl stop) waits after SIGTERM before
            SIGKILL - the one stop timeout, O(gpuops.host.sglang_stop#role:main:sglang_stop_term_timeout).
        type: raw
        default: 60
      state_dir:
        description:
          - Directory of the server's record (C(server.json)), pidfile, run history (C(runs.jsonl)) and the runs'
            directories of secret files (C(runs/MARKER)).
        type: path
        default: /var/lib/gpuops/sglang
      log_dir:
        description: Directory of the server logs, one C(MARKER.log) per launch.
        type: path
        default: /var/log/sglang
      model_path:
        description: C(--model-path) of the server - a directory on the node, or a HuggingFace hub ID (C(org/name)).
        type: str
        required: true
      check_model_path:
        description:
          - Refuse a model path that does not exist on the node, before the running server is touched. A hub ID is
            looked up in the owner's cache instead (C(HF_HOME/hub/models--org--name/snapshots/)); with
            C(HF_HUB_OFFLINE) set in the environment, an ID not cached there is refused.
        type: bool
        default: true
      host:
        description: C(--host) of the server.
        type: str
        default: 127.0.0.1
      port:
        description: C(--port) of the server.
        type: int
        default: 30000
      dump_root:
        description:
          - Where the run directories of hidden-state dumps are created; it must exist. It and every directory above it
            must belong to root or O(launch.user) and be writable by nobody else (above it, a sticky directory such as
            C(/tmp) is allowed); see M(gpuops.host.dump_dir).
        type: path
        default: /data/hs_dumps
      run_name:
        description:
          - Name of the run directory under O(launch.dump_root); empty for the run marker. A plain directory name -
            letters, digits, C(.), C(_) and C(-).
        type: str
        default: ""
      dump_min_free_gb:
        description: Free space (10^9 bytes) that the dump root's filesystem must have.
        type: float
        default: 100
      dump_patch_paths:
        description: Directories of the SGLang package, relative to it, searched for the hidden-state dump patch (C(*.py)).
        type: list
        elements: str
        default: [srt/models]
      dump_patch_pattern:
        description: Regular expression whose presence in the installed SGLang shows the hidden-state dump patch.
        type: str
        default: SGLANG_HS_DUMP_DIR
      ready_path:
        description:
          - Path that answers 200 when the server is ready (C(/health_generate) runs a one-token generation). A node of
            rank 1 or more (O(launch.worker)) is awaited at C(/health) instead.
        type: str
        default: /health_generate
      ready_timeout:
        description: Seconds to wait for the server to be ready; big models load slowly.
        type: float
        default: 1800
      ready_interval:
        description: Seconds between two readiness checks; the server's readiness is noticed at most this late.
        type: float
        default: 0.5
      log_tail_lines:
        description: Lines of the server log quoted, secrets masked, when it fails to become ready.
        type: int
        default: 50
      probe_prompt:
        description: Prompt of the probe request that must produce a dump file (O(launch.dumps)); unset, a sentence of the collection's.
        type: str
      probe_timeout:
        description: Seconds the probe request may take.
        type: float
        default: 60
      gpus:
        description:
          - NVML indices of the GPUs the server must occupy once ready. Empty to derive them from C(base_gpu_id),
            C(gpu_id_step) and C(tp_size) x C(dp_size) of O(launch.server_args), mapped through C(CUDA_VISIBLE_DEVICES)
            where the environment sets it.
        type: list
        elements: int
        default: []
      min_used_mib:
        description: MiB in use below which a GPU the server should occupy counts as unused.
        type: int
        default: 1024
      expected_count:
        description:
          - The number of GPUs NVML must show in the check of the GPUs the server occupies, as
            O(gpuops.host.gpu_verify#module:expected_count) (the role passes C(gpu_clean_expected_count)).
        type: int
      v1_reserved_mib:
        description:
          - For a driver without the v2 memory call, the v1 used memory of this node's GPUs when idle, as
            O(gpuops.host.gpu_verify#module:v1_reserved_mib) (the role passes C(gpu_clean_v1_reserved_mib)).
        type: int
      owners:
        description:
          - The users whose processes the plan may count as the servers that the restart replaces on O(launch.port)
            (the role passes C(sglang_stop_owners)); another program there, or another user's, refuses the launch
            before anything is touched. Unset, V(root) and O(launch.user); empty, every user.
        type: list
        elements: str
      rollback:
        description:
          - After a launch that failed once the old server was stopped, start the previous recorded configuration again,
            as O(rollback) does, and check it as a new server is checked; the call still fails, and says both outcomes
            (RV(rollback)). Never for a multi-node server (O(launch.multinode)) - a failed group is left stopped.
        type: bool
        default: false
      restart:
        description:
          - Restart the server even where nothing differs - its configuration, the SGLang release, the dump patch and
            the model files are those of the running server.
        type: bool
        default: false
      multinode:
        description:
          - This node runs one node of a multi-node server (the role's C(sglang_launch_multinode_group)), whose
            C(--nnodes), C(--node-rank) and C(--dist-init-addr) are in O(launch.server_args). Neither
            O(launch.rollback) nor O(launch.lock_release) applies - a node that fails stops the others.
        type: bool
        default: false
      worker:
        description:
          - With O(launch.multinode), this node is of rank 1 or more, which takes no request and serves only a health
            server - it is ready once C(/health) answers and its schedulers (one per GPU) are alive, with neither the
            probe nor the C(/server_info) check.
        type: bool
        default: false
      lock_run:
        description:
          - The run that holds the host lock of M(gpuops.host.host_lock), its O(gpuops.host.host_lock#module:run). The
            stop checks that the lock still names it before the running server is touched, and again right before the
            new server is started, so that a run whose lock another controller broke as stale stops there. V("")
            checks nothing.
        type: str
        default: ""
      lock_path:
        description: The lock directory of O(launch.lock_run), as O(gpuops.host.host_lock#module:path); V("") for that option's default.
        type: str
        default: ""
      lock_release:
        description:
          - Release the host lock of O(launch.lock_run) in this call, once the new server is recorded
            (O(stop.lock.release)), so that the run needs no call of its own; RV(lock_released) then names the run. A
            failed launch keeps the lock; never for a multi-node server (O(launch.multinode)).
        type: bool
        default: false
notes:
  - SGLang's C(--config) reader requires a C(.yaml) or C(.yml) file name.
seealso:
  - module: gpuops.host.sglang_server_info
  - module: gpuops.host.gpu_reap
  - module: gpuops.host.gpu_verify
"""

EXAMPLES = r"""
- name: Converge the node to SGLang in tuning mode - restarted only where what runs differs, and why said in reasons
  gpuops.host.sglang_server:
    state: started
    launch:
      mode: tuning
      python: /opt/sglang/venv/bin/python
      model_path: /models/glm-5
      server_args: {tp_size: 8, mem_fraction_static: 0.92, cuda_graph_max_bs_decode: 160}
      user: sglang
      supervisor: systemd
      state_dir: /var/lib/gpuops/sglang
    secret_server_args: {api_key: "{{ vault_sglang_api_key }}"}
    secret_environment: {HF_TOKEN: "{{ vault_hf_token }}"}
    stop:
      record_path: /var/lib/gpuops/sglang/server.json
      owners: [root, sglang]
  register: converged

- name: The same in check mode - what would change, with --diff the running and the desired configuration
  gpuops.host.sglang_server:
    state: started
    launch: {mode: tuning, python: /opt/sglang/venv/bin/python, model_path: /models/glm-5}
  check_mode: true
  register: plan

- name: Stop every SGLang server of the node - find, drain, stop through their supervisors, stop what is left, verify the GPUs
  gpuops.host.sglang_server:
    state: stopped
    stop:
      record_path: /var/lib/gpuops/sglang/server.json
      owners: [root, sglang]
      timeout: 600
      stop_timeout: 60
      verify:
        expected_count: 8
  register: stopped

- name: Stop every SGLang server of the node and remove what the collection made to run it (never a dump)
  gpuops.host.sglang_server:
    state: absent
    stop:
      record_path: /var/lib/gpuops/sglang/server.json

- name: The same stop under the host lock, taken and released in the same call
  gpuops.host.sglang_server:
    state: stopped
    stop:
      record_path: /var/lib/gpuops/sglang/server.json
      lock:
        run: "{{ run_id }}"
        take: true
        owner: {playbook: "{{ ansible_play_name }}"}

- name: Stop what runs and start the new server as its systemd unit, check it and record it, in one call
  gpuops.host.sglang_server:
    state: started
    run_dir:
      path: /var/lib/gpuops/sglang/runs/tuning-20260101T000000Z-node1-3f9a2c1b
      group: 1000
      owner: {uid: 1000, gid: 1000}
    environment_file: "{{ server_env }}"
    command:
      server_args: {model_path: /models/qwen, tp_size: 4, mem_fraction_static: 0.92}
      secrets_path: /var/lib/gpuops/sglang/runs/tuning-20260101T000000Z-node1-3f9a2c1b/secret-args.yaml
      config_keys: "{{ plan.command.config_keys }}"
    secret_server_args: {api_key: "{{ vault_sglang_api_key }}"}
    stop:
      record_path: /var/lib/gpuops/sglang/server.json
    start:
      kind: systemd
      unit:
        name: gpuops-sglang.service
        path: /etc/systemd/system/gpuops-sglang.service
        content: "{{ lookup('ansible.builtin.template', 'sglang.service.j2') }}"
    url: http://127.0.0.1:30000
    timeout: 1800
    log_path: /var/log/sglang/tuning.log
    checks:
      gpus: [0, 1, 2, 3]
      expected_info: "{{ plan.command.expected_info }}"
    record:
      path: /var/lib/gpuops/sglang/server.json
      fields: {status: ok, mode: tuning, url: "http://127.0.0.1:30000"}
  register: launched
"""

RETURN = r"""
removed:
  description:
    - With O(state=absent), what was removed (in check mode, what would be) - the unit file, the containers
      (C(docker container ID)), each run directory and the record, by path.
  returned: state is absent
  type: list
  elements: str
  sample: [/etc/systemd/system/gpuops-sglang.service, /var/lib/gpuops/sglang/runs, /var/lib/gpuops/sglang/server.json]
kept:
  description:
    - With O(state=absent), what was left, and why - a unit file that gpuops.host did not write.
  returned: state is absent
  type: list
  elements: str
  sample: ["the unit file /etc/systemd/system/team-sglang.service of team-sglang.service, which gpuops.host did not write"]
server_now:
  description:
    - After a failed O(state=started), what the node runs now - V(rollback) (the previous configuration was started
      again and passed its checks), V(old) (the running server was never signalled), V(none) (no SGLang server is
      left) or V(unknown) (SGLang servers are left that no one can vouch for). The message says the same in words.
  returned: state is started and it failed
  type: str
  sample: none
rollback:
  description:
    - After a failed O(state=started) with O(rollback), what the rollback did - C(ok), C(marker) (the previous run),
      C(pid), C(gpus_serving), C(message) (why it failed) and C(dump_dir) (its fresh run directory of dumps); null
      where none was made.
  returned: state is started and it failed
  type: dict
  sample: {ok: true, marker: serving-20260101T000000Z-node1-3f9a2c1b, pid: 4242, gpus_serving: [0, 1], message: null}
launch:
  description:
    - After a failed O(state=started), the line of the run history (O(record.entry) with C(status=failed),
      C(server) as RV(server_now), C(changed), C(seconds_to_clean), C(gpus_verified), C(gpus_serving), C(message) and
      C(rollback)), written there where the old server was signalled.
  returned: state is started and it failed
  type: dict
  sample: {status: failed, server: none, changed: true, message: "the server did not answer ..."}
cleanup:
  description:
    - After a failed O(state=started) whose server was started, the stop of that server, as RV(summary) and RV(said)
      of O(state=stopped) describe a stop.
  returned: state is started, it failed and its server was started
  type: dict
  sample: {said: [], summary: {servers: [4242], seconds_to_clean: 2.1, gpus_verified: 8}}
summary:
  description:
    - the stop in figures, as P(gpuops.host.sglang_stop#role) reports it (its C(sglang_stop_result)) - C(servers),
      C(elsewhere), C(gateways), C(others) (PIDs), C(supervisors), C(supervised_stops), C(comes_back), C(runs),
      C(marker), C(in_flight), C(forced), C(lost) (null where a main process needed SIGKILL), C(killed), C(escalated),
      C(exited_on_their_own), C(seconds_to_clean), C(gpus_verified).
  returned: state is stopped or absent and the stop succeeded
  type: dict
  sample: {"servers": [4200], "lost": 0, "killed": [], "seconds_to_clean": 2.05, "gpus_verified": 8}
said:
  description:
    - one line for each thing a reader should know - how a unit or a container stopped its server, each
      extraction run cut or ended and what it holds, and what was left running (other users' servers, gateways, GPU
      holders, processes of other PID namespaces); in a failure, what was left running. With O(launch), its stop's
      lines, and a manifest of the extraction run that was not written.
  returned: state is stopped or absent, or launch is set
  type: list
  elements: str
  sample: ["Left running: the SGLang Model Gateway, pid 3100 (user root) python -m sglang_router.launch_router, listening on TCP ports 30000"]
signalled:
  description:
    - whether the stop signalled anything (a supervised stop, or gpu_reap's escalation), in a failure too - from
      the first signal on the old server is not untouched. Always false in check mode.
  returned: state is stopped or absent
  type: bool
  sample: true
reap:
  description:
    - the result of M(gpuops.host.gpu_reap) for what was left after the supervised stops - C(stopped) (each
      process with the signals it got), C(would_stop) in check mode, C(protected), C(foreign), C(other_namespaces),
      C(elapsed), and C(verify), the report of the wait until every GPU was clean - as that module returns them.
  returned: state is stopped or absent and the stop got that far
  type: dict
  sample: {stopped: [{pid: 4200, signals: [SIGTERM]}], foreign: [], elapsed: 4.31, verify: {clean: true, count: 8}}
lock:
  description:
    - With O(stop.lock) - the lock file, the record of the run that held it during the stop (C(owner)), the stale
      record that taking it replaced (C(taken_over)), and whether the stop released it (C(released)).
    - For O(state=started) with O(stop.lock.release), C(path) and whether the call released it once the new server was
      recorded (C(released)).
  returned: state is stopped or absent and stop.lock is set, or state is started and stop.lock.release is true
  type: dict
  sample: {path: /run/gpuops/lock.json, owner: {run: 20260101T000000Z-42}, taken_over: null, released: true}
lock_lost:
  description:
    - With O(stop.lock) - true in the failure of a stop whose run could not take the lock (O(stop.lock.take=true)), did
      not hold it, or no longer held it when the stop was done; RV(signalled) says whether it had stopped anything by
      then.
  returned: failure of the stop with stop.lock
  type: bool
  sample: true
holder:
  description: With O(stop.lock) - the record of the run that holds the lock, when the stop fails because of it.
  returned: failure of the stop because of the lock
  type: dict
  sample: {run: 20260101T060100Z-77, playbook: Restart SGLang in tuning mode, controller: ops-2}
settled:
  description:
    - The watch for a server started again (C(respawned), C(polls), C(seconds)), where a server had a parent that may start it again; null where none had.
  returned: state is stopped or absent
  type: dict
  sample: {respawned: [], polls: 20, seconds: 2.0}
servers:
  description: the servers running now, by main process.
  returned: state is stopped or absent
  type: list
  elements: dict
  contains:
    pid:
      description: PID of the main process.
      type: int
      sample: 4200
    start:
      description: Start time of the main process, in clock ticks since boot.
      type: int
      sample: 991234
    url:
      description: Where it answers.
      type: str
      sample: "http://127.0.0.1:30000"
    cmdline:
      description: Its command line, secrets masked.
      type: str
      sample: python3 -m sglang.launch_server --model-path /models/qwen
    marker:
      description: Its run marker (C(GPUOPS_RUN)), or null.
      type: str
      sample: tuning-20260101T000000Z
    recorded:
      description: Whether it is the server of O(stop.record_path).
      type: bool
      sample: true
    session:
      description: Its session ID when it leads its own session; null otherwise.
      type: int
      sample: 4200
    node_rank:
      description: Its C(--node-rank) - 0 for a server on one node and for rank 0 of a multi-node server, which alone is drained.
      type: int
      sample: 0
    schedulers:
      description: Titled schedulers in its tree.
      type: int
      sample: 4
    supervisor:
      description:
        - What runs it. C(kind) V(systemd) with C(unit), C(fragment_path), C(written_by_gpuops) (the unit file starts
          with sglang_launch's header line), C(restart), C(timeout_stop) (seconds), C(enabled), C(active_state),
          C(main_pid), C(n_restarts) and C(kill_mode); V(container) with C(engine) (V(docker) or V(podman)), C(id),
          C(name), C(image), C(restart) (its restart policy), C(network) and C(ports) (container port to the host
          ports published for it); V(process) with C(session) and C(parent), the process that may start it again
          (null when its parent is init or a container shim). C(error) says why the supervisor could not be asked.
      type: dict
      sample: {kind: systemd, unit: team-sglang.service, restart: always, timeout_stop: 90.0, enabled: true}
    tree:
      description: The main process and its tree, each with C(pid), C(ppid), C(name), C(state) and C(cmdline).
      type: list
      elements: dict
      sample: [{pid: 4201, ppid: 4200, name: sglang::scheduler_TP0, state: S, cmdline: sglang::scheduler_TP0}]
  sample: []
elsewhere:
  description: main processes of servers in another PID namespace or container, with the reason; not in RV(servers).
  returned: state is stopped or absent
  type: list
  elements: dict
  sample:
    - pid: 7100
      ppid: 7001
      name: python3
      state: S
      cmdline: python3 -m sglang.launch_server
      reason: "in another PID namespace (pid:[4026532712])"
others:
  description: With O(stop.owners) - other users' servers, left alone, each with C(pid), C(user), C(cmdline) and C(ports).
  returned: state is stopped or absent
  type: list
  elements: dict
  sample: [{pid: 7300, user: bob, cmdline: python3 -m sglang.launch_server --port 31000, ports: [31000]}]
supervised_stops:
  description: The stop - the servers stopped through their unit or container.
  returned: state is stopped or absent
  type: list
  elements: dict
  sample:
    - pid: 4200
      supervisor: systemd
      name: team-sglang.service
      how: systemctl stop team-sglang.service
      seconds: 6.42
      forced: false
      result: success
comes_back:
  description:
    - warnings about the servers that come back by themselves at the next boot or engine restart (an enabled
      unit that P(gpuops.host.sglang_launch#role) did not write, a container with restart policy C(always) or
      C(unless-stopped)), each with the command that disables it.
  returned: state is stopped or absent
  type: list
  elements: str
  sample:
    - >-
      the systemd unit team-sglang.service of the SGLang server 4200 is enabled: it starts again at the next boot
      (systemctl disable --now team-sglang.service, or disable_supervisors)
gateways:
  description:
    - the SGLang Model Gateways (PyPI C(sglang-router)) running beside the servers, never drained nor
      stopped by a server's stop (M(gpuops.host.gpu_reap) protects them, see its O(gpuops.host.gpu_reap#module:protect_gateways)).
  returned: state is stopped or absent
  type: list
  elements: dict
  contains:
    pid:
      description: PID of the gateway (of the co-launcher, for C(python -m sglang_router.launch_server)).
      type: int
      sample: 5100
    start:
      description: Its start time, in clock ticks since boot.
      type: int
      sample: 881234
    user:
      description: The user it runs as.
      type: str
      sample: sglang
    cmdline:
      description: Its command line - C(sglang::router) once it runs, as it retitles itself.
      type: str
      sample: sglang::router
    ports:
      description: The TCP ports it listens on (its HTTP port and its Prometheus port).
      type: list
      elements: int
      sample: [8000, 29000]
    colaunched:
      description:
        - The servers it started itself (C(sglang::server)), each with C(pid), C(cmdline), C(ports) and
          C(schedulers), unless O(stop.pids) names them.
      type: list
      elements: dict
      sample: []
  sample: [{pid: 5100, start: 881234, user: sglang, cmdline: sglang::router, ports: [8000, 29000], colaunched: []}]
recorded:
  description: the entry of RV(servers) that is the recorded server, or null.
  returned: state is stopped or absent
  type: dict
  sample: {pid: 4200, url: "http://127.0.0.1:30000"}
record:
  description: The record read from O(stop.record_path), empty when there is none.
  returned: state is stopped or absent
  type: dict
  sample: {marker: tuning-20260101T000000Z, pid: 4200}
drains:
  description:
    - The drain of each server, in the order of RV(servers), each with the server's C(pid) and C(url), C(drained) (no
      request in flight at the end), C(in_flight), C(lost) (aborted with O(stop.force)), C(source) (C(metrics) or C(loads)) and C(seconds).
  returned: state is stopped or absent
  type: list
  elements: dict
  sample: [{pid: 4200, url: "http://127.0.0.1:30000", drained: true, in_flight: 0, lost: 0, source: loads}]
runs:
  description:
    - The extraction run of each server that has a dump directory, with C(pid),
      C(marker), C(path), C(exists), C(files) and C(bytes) (the run's dumps, O(stop.dump_patterns)), C(gb), C(own) (the
      readiness check's and the probe's dumps), C(newest) (the last write, seconds since the epoch), C(age) (seconds
      since it), C(active) (within O(stop.active_window)), C(cut) (stopped although active, O(stop.cut_active_run)) and
      C(recorded) (the run of the server that the record names).
    - Once the stop is done - C(files), C(bytes), C(gb), C(own) and C(newest) counted again at its end;
      C(recent) (dumps written within 10 s before the stop, which may be partial); C(ended) - V(drained), V(cut),
      V(crashed) (the recorded server was found gone, and this run is added), null where the server still runs (a stop
      that failed); C(manifest) (the path of the manifest completed, the recorded run's only; null in check mode);
      C(manifest_error) where it could not be written (a warning says so too).
  returned: state is stopped or absent
  type: list
  elements: dict
  sample: [{pid: 4200, marker: extraction-20261201T000000Z-node1-3f9a2c1b, path: /data/hs_dumps/extraction-20261201T000000Z-node1-3f9a2c1b,
            exists: true, files: 37312, bytes: 924000000000, gb: 924.0, own: 3, newest: 1796000000.5, age: 4.2,
            active: true, cut: true, recorded: true, recent: 2, ended: cut,
            manifest: /data/hs_dumps/extraction-20261201T000000Z-node1-3f9a2c1b/gpuops-manifest.json}]
undrained:
  description:
    - The servers sent nothing, neither drained nor given O(stop.api_key), each with C(pid),
      C(user), C(url), C(reason) and C(strangers) (the processes outside its tree that hold its port).
  returned: state is stopped or absent
  type: list
  elements: dict
  sample: [{pid: 5100, user: nobody, url: "http://127.0.0.1:4444", strangers: [],
            reason: "it runs as nobody, who is not trusted with the API key (root)"}]
listener:
  description:
    - Who listens on the port of O(url) - C(port), C(tied) (a process of the new server's tree listens, and no other), C(url) (the server's own
      address), C(holders), C(strangers) (holders outside the tree, with C(user)) and C(reason).
  returned: state is started, once the server started
  type: dict
  sample: {port: 30000, tied: true, url: "http://127.0.0.1:30000", holders: [], strangers: [], reason: null}
seconds:
  description: Seconds the readiness wait took.
  returned: state is started, once the server started
  type: float
  sample: 4.2
ready:
  description: Whether O(path) answered 200.
  returned: state is started, once the server started
  type: bool
  sample: true
start:
  description: The start time of the server's main process, in clock ticks since boot (with the PID, it names the process).
  returned: state is started and the server is ready
  type: int
  sample: 991234
user:
  description: The user the server's main process runs as.
  returned: state is started and the server is ready
  type: str
  sample: root
died:
  description:
    - Whether the server's main process exited while loading, or its unit or container ended before it named a main
      process.
  returned: state is started, once the server started
  type: bool
  sample: false
pid:
  description: The server's main process; null when none was found.
  returned: state is started, once the server started
  type: int
  sample: 4200
last:
  description: The last answer of O(path), or its error.
  returned: state is started, once the server started
  type: str
  sample: HTTP 200
log_tail:
  description: The end of O(log_path), secrets masked, when the server did not become ready.
  returned: failure of state started
  type: list
  elements: str
  sample: ["ValueError: ..."]
leaked:
  description:
    - Options of O(command.server_args) that carried a secret value, refused (C(server_args.api_key)); the
      values are not returned.
  returned: failure because of a secret in a logged option
  type: list
  elements: str
  sample: [environment.HF_TOKEN]
seconds_to_ready:
  description: Seconds from the server process's start until it answered ready.
  returned: state is started and the server is ready
  type: float
  sample: 41.3
record_written:
  description: What was written (C(record), C(manifest), C(manifest_error), C(removed)).
  returned: state is started, record is set, and the server passed its checks
  type: dict
  sample: {"record": {"status": "ok", "marker": "extraction-20260101T000000Z-node1-3f9a2c"}, "manifest": null,
           "manifest_error": null, "removed": []}
started:
  description: When the start began, in seconds since the epoch (the record's C(started)).
  returned: state is started
  type: int
  sample: 1767225600
stopped:
  description: The stop's result, as O(state=stopped) returns it (RV(summary) and RV(said) included).
  returned: state is started and stop is set
  type: dict
  sample: {"servers": [], "signalled": true, "summary": {"seconds_to_clean": 2.05}, "said": []}
stop_failed:
  description: Whether the stop itself failed (then nothing was started).
  returned: failure of the stop of state started
  type: bool
  sample: true
unit_written:
  description: With a unit, whether its unit file was written (then its secret files stay, which it names).
  returned: state is started and start.kind is systemd, once the unit file was written
  type: bool
  sample: true
checks_seconds:
  description: Seconds the checks took, after the server answered ready.
  returned: state is started, checks is set, and every check passed
  type: float
  sample: 3.1
checks:
  description:
    - What each check found, by name (V(environ), V(probe), V(schedulers), V(info), V(gpus)); in a failure,
      those that passed.
  returned: state is started and checks is set
  type: dict
  sample: {"gpus": {"gpus": [0, 1], "idle": [], "error": null}}
check:
  description: The check of O(checks) that failed.
  returned: failure of a check of state started
  type: str
  sample: gpus
actions:
  description:
    - What the call did, in order, each step with C(action) (V(directories), V(log), V(old_containers), V(dump_dir),
      V(run_dir), V(stop), V(start), V(wait), V(check) with C(check), V(record)), its C(seconds) and what it found
      (C(removed) exited containers of the collection's earlier runs, C(servers) stopped, C(pid) started, C(files)
      written, C(ready)); a step that failed has C(failed). In check mode the steps not taken have C(would). In a failure too.
  returned: always
  type: list
  elements: dict
  sample: [{action: stop, servers: [4200], seconds: 2.05}, {action: start, kind: systemd, pid: 4310, seconds: 0.04},
           {action: wait, path: /health_generate, ready: true, seconds: 41.2}, {action: check, check: gpus, seconds: 0.02},
           {action: record, path: /var/lib/gpuops/sglang/server.json, seconds: 0.01}]
dump_made:
  description: Whether O(dump_dir) was made by this call (in a failure too).
  returned: dump_dir is set and it was made
  type: bool
  sample: true
diff:
  description:
    - The identity of the server recorded now (C(before); empty where none passed its checks) and that of the record this
      start writes (C(after)) - mode, command line one flag per line, environment names, supervisor, unit or container
      settings, SGLang release, model files - as text, which C(--diff) shows.
  returned: state is started
  type: dict
  sample: {before: "mode: serving\n", after: "mode: extraction\n"}
status:
  description:
    - With O(launch) - V(launched) (the new server runs and passed its checks), V(unchanged) (the running server
      already has the desired configuration; nothing was touched) or V(check) (check mode, where the server would
      restart). A failed launch returns its report in RV(launch) instead, with C(status=failed).
  returned: launch is set
  type: str
  sample: launched
server:
  description:
    - With O(launch), what the node runs afterwards - V(new) (the new server), V(unchanged) (the server that already
      ran the configuration) or V(old) (check mode - the running server, left untouched).
  returned: launch is set
  type: str
  sample: new
mode:
  description: With O(launch), the mode of the server the node runs (O(launch.mode); where unchanged, the record's).
  returned: launch is set
  type: str
  sample: extraction
marker:
  description:
    - With O(launch), the run's name (C(GPUOPS_RUN) in the server's environment) - the new run's, or where unchanged
      the recorded server's.
  returned: launch is set
  type: str
  sample: extraction-20261205T120000Z-node1-0a1b2c3d
url:
  description: With O(launch), the base URL where the server answers (C(127.0.0.1) for a server bound to every address).
  returned: launch is set
  type: str
  sample: "http://127.0.0.1:30000"
dump_dir:
  description:
    - With O(launch), the run directory of the server's hidden-state dumps (where unchanged, the recorded server's);
      null for a mode that does not dump (O(launch.dumps)).
  returned: launch is set
  type: str
  sample: /data/hs_dumps/extraction-20261205T120000Z-node1-0a1b2c3d
gpus_serving:
  description: With O(launch), the NVML indices of the GPUs the server occupies (O(launch.gpus), or those its arguments give).
  returned: launch is set
  type: list
  elements: int
  sample: [0, 1, 2, 3]
seconds_to_clean:
  description:
    - With O(launch), the seconds the stop of the old server took until its GPUs were clean (the stop's
      C(seconds_to_clean)); null where the server did not restart, and in check mode.
  returned: launch is set
  type: float
  sample: 2.05
gpus_verified:
  description:
    - With O(launch), the GPUs the stop verified clean before the start (the stop's C(gpus_verified)); V(0) where the
      server did not restart, and in check mode.
  returned: launch is set
  type: int
  sample: 8
reasons:
  description:
    - With O(launch), why the server restarted, or would in check mode, in words, one line per cause - the plan's
      RV(gpuops.host.sglang_server_info#module:reasons); empty where it stays as it is.
  returned: launch is set
  type: list
  elements: str
  sample: ["command line: --mem-fraction-static 0.85 -> 0.92", "SGLang release: 0.5.14 -> 0.5.23"]
message:
  description:
    - With O(launch), null - the call succeeded. A failed launch says why in its C(msg) and in RV(launch) (secrets
      masked).
  returned: launch is set
  type: str
  sample: null
lock_released:
  description:
    - With O(launch) and O(launch.lock_release), the run whose host lock (O(launch.lock_run)) this call released once
      the new server was recorded; V("") where it released none.
  returned: launch is set, except in check mode when the server would restart
  type: str
  sample: 20260101T000000Z-42
plan:
  description:
    - With O(launch), the plan the call acted on, as M(gpuops.host.sglang_server_info) returns it - C(owner) (the
      server's user and groups as the node knows them), C(supervisor) (V(auto) chosen on the node), C(needs_restart),
      C(reasons), C(changes) (the fields that differ), C(current) (the desired identity and what the node has now,
      which the record keeps), C(record) (the record as it was read) and C(command) (the command line as the installed
      SGLang's parser checked it), with C(refusals), C(unit_files) and C(mounts) where the plan returned them.
    - In a failure of the start too.
  returned: launch is set
  type: dict
  sample:
    owner: {user: sglang, uid: 1001, gid: 1001, dump_gid: 1002, home: /home/sglang,
            environment: {HOME: /home/sglang, HF_HOME: /home/sglang/.cache/huggingface}}
    supervisor: systemd
    needs_restart: true
    reasons: ["command line: --mem-fraction-static 0.85 -> 0.92"]
    changes: [{field: argv, words: "command line: --mem-fraction-static 0.85 -> 0.92"}]
    current: {mode: tuning, sglang: 0.5.23}
    record: {status: ok, marker: tuning-20261204T101500Z-node1-3f9a2c1b, pid: 4242, url: "http://127.0.0.1:30000"}
    command: {argv: [/opt/sglang/bin/python, -m, sglang.launch_server, --model-path, /models/qwen,
                     --mem-fraction-static, "0.92"], expected_gpus: [0, 1, 2, 3], release: 0.5.23}
"""

import copy
import os

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.host.plugins.module_utils._checks import Unreadable
from ansible_collections.gpuops.host.plugins.module_utils._converge import STATES, converge
from ansible_collections.gpuops.host.plugins.module_utils._launch_options import OPTIONS as LAUNCH_OPTIONS
from ansible_collections.gpuops.host.plugins.module_utils._nvml import HAS_PYNVML, PYNVML_IMPORT_ERROR, Nvml
from ansible_collections.gpuops.host.plugins.module_utils._procs import ProcFS
from ansible_collections.gpuops.host.plugins.module_utils._reap import MissingLibrary, Run
from ansible_collections.gpuops.host.plugins.module_utils._reap_options import argument_spec as reap_argument_spec
from ansible_collections.gpuops.host.plugins.module_utils._sglang import (
    STOP_SETS, ActionFailed, Deps, command_options, lock_options, plan_masks, secrets_of,
)
from ansible_collections.gpuops.host.plugins.module_utils._verify import wait_argument_spec


def stop_options():
    """The stop's options (the stop option's suboptions)."""
    return dict(
        record_path=dict(type='path'),
        presets=dict(type='list', elements='str', default=['sglang']),
        patterns=dict(type='list', elements='str', default=[]),
        pids=dict(type='list', elements='int', default=[]),
        owners=dict(type='list', elements='str', default=[]),
        default_url=dict(type='str', default='http://127.0.0.1:30000'),
        api_key=dict(type='str', no_log=True),
        api_key_users=dict(type='list', elements='str', default=[], no_log=False),
        timeout=dict(type='float', default=600),
        interval=dict(type='float', default=0.5),
        request_timeout=dict(type='float', default=10),
        force=dict(type='bool', default=False),
        stop_timeout=dict(type='float', default=60),
        disable_supervisors=dict(type='bool', default=False),
        reap=dict(type='dict', default={}, options=dict(
            (k, v) for k, v in reap_argument_spec().items() if k not in STOP_SETS)),
        verify=dict(type='dict', options=wait_argument_spec()),
        settle=dict(type='float', default=2),
        active_window=dict(type='float', default=120),
        cut_active_run=dict(type='bool', default=False),
        dump_patterns=dict(type='list', elements='str', default=['*']),
        lock=dict(type='dict', options=lock_options()),
    )


def argument_spec():
    owner = dict(uid=dict(type='int', required=True), gid=dict(type='int', required=True))
    return dict(
        state=dict(type='str', choices=list(STATES), default='started'),
        url=dict(type='str'),
        path=dict(type='str', default='/health_generate'),
        timeout=dict(type='float', default=600),
        interval=dict(type='float', default=0.5),
        request_timeout=dict(type='float', default=10),
        log_path=dict(type='path'),
        log_lines=dict(type='int', default=50),
        secrets=dict(type='list', elements='str', default=[], no_log=True),
        command=dict(type='dict', options=dict(command_options(), config_keys=dict(type='dict', default={}, no_log=False))),
        secret_server_args=dict(type='dict', default={}, no_log=True),
        secret_environment=dict(type='dict', default={}, no_log=True),
        launch=dict(type='dict', options=copy.deepcopy(LAUNCH_OPTIONS)),
        run_dir=dict(type='dict', options=dict(
            path=dict(type='path', required=True),
            group=dict(type='int', default=0),
            owner=dict(type='dict', options=copy.deepcopy(owner)),
            environment_owner=dict(type='dict', options=copy.deepcopy(owner)))),
        environment_file=dict(type='str', no_log=True),
        directories=dict(type='list', elements='dict', default=[], options=dict(
            path=dict(type='path', required=True),
            group=dict(type='int'))),
        dump_dir=dict(type='dict', options=dict(
            root=dict(type='path', required=True),
            name=dict(type='str', required=True),
            owner=dict(type='int', default=0),
            group=dict(type='int', default=0),
            min_free_gb=dict(type='float', default=0))),
        checks=dict(type='dict', options=dict(
            dump_dir=dict(type='path'),
            prompt=dict(type='str'),
            probe=dict(type='bool', default=True),
            probe_timeout=dict(type='float', default=60),
            expected_info=dict(type='dict'),
            api_key=dict(type='str', no_log=True),
            gpus=dict(type='list', elements='int', default=[]),
            min_used_mib=dict(type='int', default=1024),
            schedulers=dict(type='int', default=0),
            expected_count=dict(type='int'),
            v1_reserved_mib=dict(type='int'))),
        stop=dict(type='dict', options=stop_options()),
        start=dict(type='dict', options=dict(
            kind=dict(type='str', required=True, choices=['process', 'systemd', 'docker', 'podman']),
            argv=dict(type='list', elements='str', default=[]),
            container=dict(type='str'),
            unit=dict(type='dict', options=dict(
                name=dict(type='str', required=True),
                path=dict(type='path', required=True),
                content=dict(type='str', required=True),
                enable=dict(type='bool', default=False),
                migrate=dict(type='dict'))))),
        rollback=dict(type='bool', default=False),
        relaunch=dict(type='dict', options=dict(record=dict(type='dict', required=True), failed=dict(type='str'))),
        record=dict(type='dict', options=dict(
            path=dict(type='path', required=True),
            fields=dict(type='dict', required=True),
            dump_patterns=dict(type='list', elements='str'),
            history=dict(type='path'),
            entry=dict(type='dict', default={}),
            runs_dir=dict(type='path'),
            keep=dict(type='list', elements='path', default=[]),
            remove=dict(type='list', elements='path', default=[]))),
    )


def main():
    module = AnsibleModule(
        argument_spec=argument_spec(),
        required_if=[('state', 'stopped', ('stop',)), ('state', 'absent', ('stop',))],
        mutually_exclusive=[('relaunch', 'start'), ('relaunch', 'stop')] + [
            ('launch', name) for name in ('start', 'relaunch', 'command', 'record', 'run_dir', 'dump_dir', 'checks',
                                          'environment_file', 'url', 'directories', 'secrets')],
        supports_check_mode=True,
    )
    p = module.params
    for where, q in (('', p), ('stop.', p['stop'])):
        if q is None:
            continue
        if not (q['timeout'] >= 0 and q['interval'] > 0 and q['request_timeout'] > 0) \
                or float('inf') in (q['timeout'], q['interval']):
            module.fail_json(msg='%stimeout must be 0 or more, %sinterval and %srequest_timeout more than 0, all finite; '
                             'got %r, %r, %r' % (where, where, where, q['timeout'], q['interval'], q['request_timeout']))
    if p['command'] and (p['command']['config_file'] and not p['command']['config_path']):
        module.fail_json(msg='command.config_file is true but command.config_path is not set')
    # Values of under 4 characters (SPT_NOENV=1) are masked nowhere: masking them would garble every number.
    module.no_log_values.update(secrets_of(dict(p['command'] or {}, secrets=p['secrets'],
                                                secret_server_args=p['secret_server_args'],
                                                api_key=(p['stop'] or {}).get('api_key'))))
    if p['launch']:
        # its result holds a plan: masked as gpuops.host.sglang_server_info masks one
        p = dict(p)
        masked, module.params['secret_environment'] = plan_masks(module.no_log_values, p['launch'],
                                                                 p['secret_server_args'], p['secret_environment'])
        module.no_log_values.clear()
        module.no_log_values.update(masked)
    module.no_log_values.difference_update([v for v in module.no_log_values if len(v) < 4])

    def validated(kind, options):
        # loaded for a launch only: a stop does not pay for them
        from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
        from ansible_collections.gpuops.host.plugins.module_utils._server_info import argument_spec as plan_spec
        found = ArgumentSpecValidator(plan_spec() if kind == 'plan' else argument_spec()).validate(options)
        if found.error_messages:
            raise ActionFailed('the launch made invalid %s options: %s' % (kind, '; '.join(found.error_messages)))
        return found.validated_parameters

    def run(argv, environ):
        return module.run_command(argv, environ_update=environ)

    def open_nvml():
        if not HAS_PYNVML:
            raise Unreadable(missing_required_lib('nvidia-ml-py'))
        return Nvml()

    procfs = ProcFS()
    deps = Deps(procfs, run, tmpdir=module.tmpdir, check_mode=module.check_mode, warn=module.warn,
                self_pids=(os.getpid(), os.getppid()), reaping=lambda params: Run(params, procfs, os.getpid()),
                open_nvml=open_nvml)
    try:
        result = converge(p, deps, validated)
    except MissingLibrary as e:
        module.fail_json(msg=missing_required_lib('nvidia-ml-py', reason=e.reason), exception=PYNVML_IMPORT_ERROR)
    except ActionFailed as e:
        module.fail_json(msg=e.msg, **e.result)
    module.exit_json(**dict({'changed': False}, **result))


if __name__ == '__main__':
    main()
