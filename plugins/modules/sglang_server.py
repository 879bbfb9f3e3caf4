#!/usr/bin/python
# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_server
short_description: Find, check, drain and probe SGLang servers on their real interfaces
version_added: 0.2.0
description:
  - The SGLang-facing logic of the collection in one place. O(action) picks what to do. None starts a process;
    only V(stop), and V(find) with O(stop_supervised), stop one.
  - V(find) lists the SGLang servers running now - their main processes, found by the run marker of the
    record O(record_path), by O(presets) and by O(patterns) - with the URL each answers on and its tree (its
    descendants and, for a server that leads its own session, every process of that session, orphans
    re-parented to PID 1 included). With O(drain) it then drains each of them, one after the other, as
    V(drain) does, in the same call (RV(drains)), at the address where the server's own tree listens (from
    C(/proc/net/tcp), C(/proc/net/tcp6) and the processes' sockets), never one its command line names. A server whose
    listener cannot be tied to its tree (nothing of it listens on its port, or another process does), or that is
    not trusted with O(api_key), is sent nothing - no request, no key - and is not drained; it is listed in
    RV(undrained) with the reason, and a warning names it. Its drain cannot hold up the stop.
  - Trusted with the API key are the server that the record names by PID and start time, a server that root itself
    runs (real, effective, saved and filesystem UIDs 0, and no setuid program's image - a user who execs C(su)
    gets a process that C(ps) shows as root's), and servers whose real user is the recorded server's or in
    O(api_key_users). The listener is checked again before every request that carries the key; no key goes with
    C(/metrics) or C(/health*), which SGLang serves without one, and no redirect is followed. A server's
    C(--config) file, where its key may be, is read only when it is a regular file of the server's real user,
    looked at before it is opened.
  - A process is its real user's throughout (O(owners), RV(servers), RV(others)) - the UID of C(/proc/PID/status),
    not the owner of C(/proc/PID), which is the effective UID.
  - V(release) reads the version of the SGLang that O(python) imports.
  - V(render) turns O(server_args) into the server's command line and the NVML indices of the GPUs it will
    occupy. Secret arguments never go onto the command line, which every user of the host can read - with
    O(config_file) every argument is in the C(--config) file O(config_path); otherwise the secret ones are in
    the C(--config) file O(secrets_path), or, without it, left for the caller to pass (RV(secret_args)). It
    neither imports SGLang nor writes a file.
  - V(check_args) renders and then passes the whole command line, or C(--config) file, through the installed
    SGLang's own parser (C(sglang.srt.server_args.prepare_server_args), what C(sglang serve) runs), without
    launching anything, and then writes the argument files of the command line (mode 0600) - secret arguments
    reach the check through a temporary file, never its command line. Unknown, ambiguous (SGLang's parser accepts unambiguous abbreviations) and
    badly-valued arguments fail with SGLang's own message. It returns the release and the values the server
    will report in C(/server_info), for V(check_info).
  - V(drain) waits until the server at O(url) has no request in flight. The count comes from C(/metrics)
    (C(sglang:num_running_reqs) + C(sglang:num_queue_reqs)) while the server serves it (C(--enable-metrics)),
    else from C(/v1/loads) (C(num_running_reqs) + C(num_waiting_reqs) over every data-parallel rank). A count
    that cannot be read is not zero - the wait goes on. A refused connection means that nothing serves there,
    so there is nothing to drain. The whole wait is bounded by O(timeout) - each reading's own timeout is cut
    to the time left. When requests are still in flight at the end it fails, leaving the server running,
    unless O(force), which asks the server to abort them (C(/abort_request)) and reports them as lost.
  - V(ready) waits until O(path) answers 200, and stops at once, with the end of the server's log (secrets
    masked), when the process O(pid) exits. With O(pid), ready also means that the listener on the port of O(url)
    belongs to the tree of O(pid) - a port held by another process (one that bound it while the server loaded)
    fails the action, naming that process by PID, user and command line.
  - V(check_environ) checks that every variable of O(environ) is in the environment of the server O(pid) and
    of every titled scheduler (C(sglang::scheduler*)) of its tree - SGLang's children hide their environment
    behind setproctitle unless the launch set C(SPT_NOENV=1).
  - V(probe) sends one C(/generate) request with its own request id O(rid) and, with O(dump_dir), waits for
    the hidden-state dump whose file name carries that id - not for any file, since health checks generate too.
  - V(check_info) compares C(/server_info) with O(expect).
  - V(stop) is the whole stop of the servers in one call, so that no round trip of Ansible falls between its steps -
    V(find) with O(drain) and O(stop_supervised) (find, drain, stop those of a unit or a container through it),
    then M(gpuops.host.gpu_reap)'s escalation on what is left of them (SIGTERM to the main processes, SIGKILL after
    O(stop_timeout); the same selectors, every process of the recorded run by its C(GPUOPS_RUN), O(owners) as its
    users, and the other options of gpu_reap in O(reap)), the wait until every GPU is clean (O(verify)), and, where a
    server had a parent that may start it again, the watch of V(settle) for O(settle) seconds. Every option is
    checked, and NVML opened, before anything is drained or signalled. With no server and nothing left to stop, it
    changes nothing. RV(signalled) says, in a failure too, whether anything was signalled. With O(lock) the stop
    also takes, or checks, the host lock before it touches anything, and releases, or checks, it when it is done.
  - V(settle) watches, for O(timeout) seconds after a stop, for a new server that a wrapper (a C(while true)
    loop, a script), a unit or a container started again, and fails naming it, what started it and the command
    that disables that.
  - For each server V(find) reports what runs it (RV(servers[].supervisor)) - a systemd unit, read from the
    C(name=systemd) line (cgroup v1) or the C(0::) line (cgroup v2) of C(/proc/PID/cgroup), C(/system.slice/NAME.service),
    and then from C(systemctl show); a Docker container (C(/docker/ID) with the C(cgroupfs) driver,
    C(docker-ID.scope) with the C(systemd) driver) or a Podman one (C(libpod-ID)), then from C(docker|podman inspect);
    or nobody, a process in its own session, with the parent that may start it again. A unit is only taken for the
    supervisor where systemd is PID 1 of the module's PID namespace.
  - V(drain), V(probe) and V(check_info) with O(pid) send nothing - O(api_key) included - unless the listener on
    the port of O(url) belongs to the tree of O(pid).
  - Secrets - O(api_key), O(secrets), O(secret_server_args) and O(secret_environment) - never appear on a command
    line, in messages, in results or in the module's invocation log (syslog, or the journal) - those options are
    declared C(no_log). O(server_args) and O(environment) are logged as given, so a value there that is a secret
    (a name with C(key), C(token), C(secret) or C(password), or listed in O(secret_args)) is refused before
    anything is done.
author:
  - gpuops maintainers (@gpuops)
requirements:
  - For V(release) and V(check_args), SGLang importable by O(python).
extends_documentation_fragment:
  - gpuops.host.attributes
  - gpuops.host.verify_wait
attributes:
  check_mode:
    support: full
    details:
      - V(drain) takes a single reading and does not wait; V(probe) sends nothing; V(check_args) runs the parser
        but writes no file, and reports in RV(written) which it would write.
  diff_mode:
    support: none
  idempotent:
    support: partial
    details:
      - V(check_args) writes its argument files only when their content differs. V(probe) sends one request
        each time, which writes a dump in extraction mode. The other actions only read.
options:
  action:
    description: What to do; see the description.
    type: str
    required: true
    choices: [find, release, render, check_args, drain, ready, check_environ, probe, check_info, settle, stop]
  url:
    description:
      - Base URL of the server, for V(drain), V(ready), V(probe) and V(check_info).
    type: str
  api_key:
    description:
      - The server's C(--api-key), sent as a bearer token. Without it a server started with an API key answers
        C(/v1/loads) and C(/server_info) with 401; C(/metrics) and C(/health*) need none.
      - V(find) with O(drain), and V(stop), drain each server with the key it was started with where its command
        line (C(--api-key)) or its C(--config) file (C(api-key), read as the server names it, only when the file
        belongs to the server's user or the server runs as root) says, and with this key otherwise; so a restart
        that changes the key drains the old server with its own. V(drain), V(probe) and V(check_info) with O(pid)
        do the same for the server O(pid).
    type: str
  python:
    description: The interpreter that has SGLang installed; the first word of the rendered command line.
    type: path
    default: /usr/bin/python3
  container:
    description:
      - Run V(release) and V(check_args) in a container of this image instead of on the host, for a server that runs
        in one - C(ENGINE run --rm --network none --entrypoint /bin/sh IMAGE -c ... ENV_FILE PYTHON ...), where
        PYTHON is O(python) inside the image. The module's private temporary directory (the argument files the check
        reads, and the environment in a file of mode 0600) is mounted read-only at its own path, and the container's
        shell reads the environment from that file; nothing secret is on the engine's command line or in what the
        engine's C(inspect) shows (C(--env-file) and C(-e) would copy every value there).
      - The engine's client reaches its daemon through C(DOCKER_HOST) where that is set.
    type: dict
    suboptions:
      engine:
        description: The container engine's command line client.
        type: str
        choices: [docker, podman]
        default: docker
      image:
        description: The image SGLang is installed in.
        type: str
        required: true
      options:
        description: More options of C(run) before the image, such as C(--volume) for directories of O(pythonpath).
        type: list
        elements: str
        default: []
  pythonpath:
    description:
      - Directories put first on C(sys.path) for V(release) and V(check_args), as the server gets them on C(PYTHONPATH).
      - Refused, as O(python) and its venv are, where a user other than root and the O(run_as) user can change one of
        them or a directory on the way to it; nothing is run then.
    type: list
    elements: path
    default: []
  run_as:
    description:
      - The user who runs V(release) and V(check_args) on the host (the server's user), through C(/usr/bin/setpriv),
        with O(python) isolated (C(-I)) - no user site directory, no C(PYTHON*) variable, nothing of the current
        directory. Root then runs nothing of the server's Python.
      - Without it, root runs them, isolated as well.
      - The temporary argument files of the check are given to this user in a directory of root's that no one else
        can change.
    type: dict
    suboptions:
      uid:
        description: Its UID.
        type: int
        required: true
      gid:
        description: Its primary GID; C(setpriv --init-groups) adds its supplementary groups.
        type: int
        required: true
  environment:
    description:
      - Environment of the server, given to V(release) and V(check_args) as the server would get it.
        C(CUDA_VISIBLE_DEVICES) maps the GPUs of RV(expected_gpus).
      - Logged as given with the invocation, so a variable whose name contains C(key), C(token), C(secret) or
        C(password) (C(HF_TOKEN)) is refused here; put it, and any other secret variable, in O(secret_environment).
    type: dict
    default: {}
  secret_environment:
    description:
      - More environment of the server, as O(environment) (its values win), whose values are secrets - never logged,
        and masked in every result and message (those of 4 characters or more). Masking applies to the whole
        result, so masking a value such as a version number would also mask it where it is data.
    type: dict
    default: {}
  entry_module:
    description: The server's entry module, run with C(python -m).
    type: str
    default: sglang.launch_server
  server_args:
    description:
      - Server arguments for V(render) and V(check_args), keyed by SGLang's own names, the fields of
        C(ServerArgs) (V(mem_fraction_static), V(cuda_graph_max_bs_decode)); the flag is C(--) and the name with
        dashes. V(true) renders a bare flag, V(false) and V(null) leave it out, a list renders the flag once
        followed by its items, a mapping is passed as JSON.
      - Logged as given with the invocation, so an argument whose value is a secret (a name with C(key),
        C(token), C(secret) or C(password), or listed in O(secret_args)) is refused here; pass it in
        O(secret_server_args).
    type: dict
    default: {}
  secret_server_args:
    description:
      - Server arguments, as O(server_args), whose values are secrets (V(api_key), V(hf_token)) - never logged,
        never on the command line (see V(render)), and masked in every result and message.
    type: dict
    default: {}
  secret_args:
    description:
      - More names of server arguments whose values are secrets, beside those named like one and those of
        O(secret_server_args).
    type: list
    elements: str
    default: []
  config_file:
    description:
      - Pass the arguments as a C(--config) YAML file at O(config_path) instead of flags, keys with dashes
        (SGLang turns each key verbatim into C(--KEY)). V(check_args) checks that form.
    type: bool
    default: false
  config_path:
    description:
      - The C(--config) file with every argument, for O(config_file); written by V(check_args), mode 0600 (a
        missing directory is created, mode 0700). Its name must end in C(.yaml).
    type: path
  secrets_path:
    description:
      - The C(--config) file with the secret arguments (without O(config_file)); written by V(check_args), mode
        0600 (a missing directory is created, mode 0700), with the content the parser checked. Its name must end
        in C(.yaml). Without it the secret arguments are left off the command line.
    type: path
  record_path:
    description:
      - For V(find), the record (C(server.json)) that P(gpuops.host.sglang_launch#role) keeps of its server. The
        process whose environment carries the record's run marker (C(GPUOPS_RUN)) is that server, with the URL
        recorded there. A missing record finds nothing by marker.
    type: path
  port:
    description:
      - For V(find), also report who listens on this TCP port (RV(port)), from C(/proc/net/tcp) and C(/proc/net/tcp6)
        of the module's network namespace and the open sockets of the processes it can see.
    type: int
  bind_host:
    description:
      - For V(find) with O(port), the address that a new server will bind. Only the sockets listening on the port at
        an address that conflicts with it count (that address, the wildcard of its family, an IPv6 wildcard). Another
        program's listener on another address of the port (V(127.0.0.2), V(::1)) neither holds it nor blocks it.
      - Without it, or with a wildcard (V(0.0.0.0), V(::)), every address of the port counts.
    type: str
  presets:
    description: For V(find), M(gpuops.host.gpu_reap) presets whose command line patterns find servers started by hand.
    type: list
    elements: str
    default: [sglang]
  patterns:
    description: For V(find), more regular expressions matched against the full command line of a main process.
    type: list
    elements: str
    default: []
  drain:
    description:
      - For V(find), drain each server found, as V(drain) does at its URL, with O(timeout), O(interval),
        O(request_timeout), O(force) and O(api_key); the first server that fails its drain fails the action and
        is left running, with the ones after it undrained. One call saves a round trip before a stop.
      - Refused before any request, when an SGLang Model Gateway's co-launcher runs servers of its own that
        O(pids) does not name - those are stopped through their launcher, and the message names it.
    type: bool
    default: false
  owners:
    description:
      - For V(find), the users whose servers are found for a stop (names, or UIDs where a user has no name), by the
        real UID of each process. Another user's server is listed in RV(others), with its user, PID and ports, and is
        never drained (it is sent no API key) nor stopped, unless O(pids) names it. Empty, the servers of every user
        are found.
      - Only gateways of root itself and of these users (without them, of the found servers' users) can refuse a
        stop for the servers they co-launched, and only their new servers fail the settle watch; another user's
        neither blocks nor fails it.
    type: list
    elements: str
    default: []
  stop_supervised:
    description:
      - For V(find), after the drain, stop each server that a systemd unit or a Docker or Podman container runs
        through that supervisor - C(systemctl stop UNIT), which uses the unit's own C(KillMode) and
        C(TimeoutStopSec), or C(docker stop --time) / C(podman stop --time) with O(stop_timeout) - and report it in
        RV(supervised_stops), with whether the supervisor had to escalate to SIGKILL. An explicit stop does not
        trigger a restart policy. Servers that nothing supervises are left to M(gpuops.host.gpu_reap).
      - The cgroup of a server only names a candidate; the supervisor's own answer decides. A unit supervises a server
        whose cgroup is its C(ControlGroup) or below it (C(systemctl show)); a container, one in the same container
        cgroup as its C(State.Pid) (C(inspect)). Nothing below a user's own manager (C(user@UID.service)) is a system
        unit or container. A server whose cgroup names a unit or container that does not hold it is stopped as a
        process of its own, with a warning, never through what it names.
    type: bool
    default: false
  stop_timeout:
    description:
      - For O(stop_supervised), the seconds a container engine waits after SIGTERM before its SIGKILL.
      - For V(stop), also the seconds M(gpuops.host.gpu_reap)'s escalation waits after SIGTERM (its C(term_timeout)).
    type: float
    default: 60
  reap:
    description:
      - For V(stop), the options of M(gpuops.host.gpu_reap) for what is left after the supervised stops, as that module
        documents them. The stop sets the others - the selectors, C(term_timeout) (O(stop_timeout)) and C(verify)
        (O(verify)).
    type: dict
    default: {}
    suboptions:
      descendants: {description: gpu_reap's O(gpuops.host.gpu_reap#module:descendants)., type: bool, default: true}
      sessions: {description: gpu_reap's O(gpuops.host.gpu_reap#module:sessions)., type: bool, default: true}
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
      max_processes: {description: gpu_reap's O(gpuops.host.gpu_reap#module:max_processes)., type: int, default: 512}
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
        choices: [mixed, control-group]
      term_signal:
        description: gpu_reap's O(gpuops.host.gpu_reap#module:term_signal).
        type: str
        default: SIGTERM
      kill_timeout: {description: gpu_reap's O(gpuops.host.gpu_reap#module:kill_timeout)., type: float, default: 10}
  settle:
    description:
      - For V(stop), how long to watch, as V(settle) does, for a server started again, where a server had a parent
        other than init (a C(while true) wrapper, a script). A unit or a container is stopped through its supervisor,
        whose restart policy an explicit stop does not trigger. V(0) watches nothing.
    type: float
    default: 2
  active_window:
    description:
      - For V(find) with O(drain), and V(stop), before anything is drained or signalled - a server whose extraction
        run (its dump directory - the record's for the server the record names, else its main process's
        C(SGLANG_HS_DUMP_DIR)) wrote a dump within this many seconds is in an active run, and the call fails, naming
        the run and what it has written (RV(runs)). A driver that feeds a training set sends its next request a moment
        after the last one finished, so a drain that reads zero requests between two of them proves nothing.
      - The readiness check's and the probe's own dumps (C(HEALTH_CHECK), C(gpuops-probe-) in their names), and for
        the recorded server every dump written before it was proven ready (the record's C(checked); SGLang's warm-up
        request dumps too), are counted apart and make no run active. Dumps are counted and sized, never read.
      - V(0) looks at no run.
    type: float
    default: 120
  cut_active_run:
    description:
      - Stop a server in an active extraction run anyway (see O(active_window)); RV(runs) and a warning say that the
        run was cut.
    type: bool
    default: false
  dump_patterns:
    description:
      - For V(find) with O(drain), and V(stop) - the name patterns (shell-style) of the files under a run directory
        that count as the run's dumps (RV(runs), the manifest, O(active_window)); every regular file by default. The
        dumps are counted and sized, never opened. The run's manifest, C(gpuops-manifest.json), is never a dump.
      - V(stop) completes the manifest of the recorded server's run - written by M(gpuops.host.dump_dir) when the
        server was proven ready - once the server is stopped, with how it ended (V(drained), or V(cut) with
        O(cut_active_run)), the time and the final counts, and where the recorded server is found gone while its
        manifest still says running, as V(crashed). Written as M(gpuops.host.dump_dir) writes it, following no link.
    type: list
    elements: str
    default: ['*']
  disable_supervisors:
    description:
      - For O(stop_supervised), also keep each supervisor from starting its server again - C(systemctl disable UNIT)
        for an enabled unit that P(gpuops.host.sglang_launch#role) did not write, C(docker|podman update
        --restart=no) for a container (Podman 5.1 and later; an older Podman has no C(podman update --restart), and
        the stop fails there after the container stopped). Without it such a server comes back at the next boot, and
        the result warns.
    type: bool
    default: false
  lock:
    description:
      - For V(stop), the host lock of M(gpuops.host.host_lock) around the stop, in the same call - so the lock costs no
        round trip of its own. Without it the stop does not look at any lock.
      - With O(lock.take=false) the run O(lock.run) must hold the lock already - checked before anything is drained or
        signalled, and again when the stop is done, so that a run that lost the lock to a stale-lock break on another
        controller stops there (RV(lock_lost)).
      - With O(lock.take=true) the stop takes the lock for O(lock.run) before anything is drained or signalled - failing,
        with nothing touched, where another run holds it, as host_lock does - and releases it when it ends, whatever
        the outcome. In check mode it neither takes nor releases it.
    type: dict
    suboptions:
      run:
        description: The run that holds or takes the lock, as host_lock's O(gpuops.host.host_lock#module:run).
        type: str
        required: true
      take:
        description: Take the lock for the stop and release it after (V(true)), or check that O(lock.run) holds it (V(false)).
        type: bool
        default: false
      path: {description: host_lock's O(gpuops.host.host_lock#module:path)., type: path, default: /run/gpuops}
      owner: {description: host_lock's O(gpuops.host.host_lock#module:owner)., type: dict, default: {}}
      max_age: {description: host_lock's O(gpuops.host.host_lock#module:max_age)., type: int, default: 21600}
  stopped:
    description:
      - For V(settle), the servers just stopped, each with C(pid) and C(start) (RV(servers) of V(find)); any other
        server found during O(timeout) fails the action, naming what started it.
    type: list
    elements: dict
    default: []
  pids:
    description:
      - For V(find), main processes to take for servers whatever their command line - needed only for a server that
        the SGLang Model Gateway's co-launcher started (C(sglang::server)), which is otherwise reported in
        RV(gateways) and refused by O(drain).
    type: list
    elements: int
    default: []
  default_url:
    description: For V(find), the URL of a server whose command line names no C(--port) (it may use C(--config)).
    type: str
    default: http://127.0.0.1:30000
  other_namespaces:
    description:
      - For V(find), also list as servers those that run in another PID namespace or container cgroup than the
        module. By default they are listed apart, in RV(elsewhere) - their address is not reachable from here,
        and M(gpuops.host.gpu_reap) leaves them alone too.
    type: bool
    default: false
  pid:
    description:
      - The server's main process, for V(ready) (stop waiting when it exits) and V(check_environ), and named in the
        messages of V(drain).
      - For V(ready), V(drain), V(probe) and V(check_info), the process whose tree must hold the listener on the port
        of O(url) (see the description).
    type: int
  main_process_of:
    description:
      - For V(ready) in place of O(pid), the supervisor that has just started the server - its main process is the
        server. The wait first reads it - C(MainPID) of C(systemctl show) for a unit, C(State.Pid) of C(docker|podman
        inspect) for a container - every 0.1 s for up to 10 s, and fails at once, with RV(died), when the unit has
        failed or the container has exited before naming one, with the supervisor's state in the message. It then
        waits as with O(pid), and returns it in RV(pid).
    type: dict
    suboptions:
      kind:
        description: What runs the server.
        type: str
        choices: [systemd, docker, podman]
        required: true
      name:
        description: The unit (C(gpuops-sglang.service)) or the container's name.
        type: str
        required: true
  api_key_users:
    description:
      - For V(find) with O(drain), the users, beside root itself and the user of the recorded server, whose servers
        are drained and sent O(api_key), by their real UID. Servers of other users are listed in RV(undrained).
    type: list
    elements: str
    default: []
  environ:
    description: For V(check_environ), the variables (name to value) that every process checked must have.
    type: dict
    default: {}
  schedulers:
    description: For V(check_environ), the fewest titled schedulers the tree must have (tensor x data parallel size).
    type: int
    default: 1
  timeout:
    description:
      - Seconds the whole action may wait - the drain (V(drain); for V(find) with O(drain), each server's), the wait for readiness (V(ready)), or the probe
        request and its dump (V(probe)).
    type: float
    default: 600
  interval:
    description:
      - Seconds between two readings while waiting; what is waited for (no request in flight, the ready answer, the
        probe's dump) is noticed at most this late.
      - A reading is one HTTP request (C(/metrics) or C(/v1/loads), the ready path) or one directory listing, cheap
        enough to repeat twice a second.
    type: float
    default: 0.5
  request_timeout:
    description: Seconds one HTTP request may take, cut to the time left of O(timeout).
    type: float
    default: 10
  force:
    description:
      - For V(drain) and V(find) with O(drain), when requests are still in flight after O(timeout), abort them and succeed with a warning and
        RV(lost), instead of failing.
    type: bool
    default: false
  path:
    description: For V(ready), the path that answers 200 once the server is ready (C(/health_generate) runs a generation).
    type: str
    default: /health_generate
  log_path:
    description: For V(ready), the server's log, quoted (secrets masked) when it fails to become ready.
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
  rid:
    description: For V(probe), the request id; default a fresh C(gpuops-probe-<pid>-<ms>).
    type: str
  prompt:
    description: For V(probe), the prompt.
    type: str
    default: The hidden states of this prompt are dumped to check the extraction run.
  dump_dir:
    description: For V(probe), the directory to search for the dump named by the request id.
    type: path
  expect:
    description: For V(check_info), the values C(/server_info) must report, by name (RV(expected_info) of V(check_args)).
    type: dict
    default: {}
  checks:
    description:
      - For V(ready), the checks that a server which answers ready must pass before it counts as ready, in this
        order, each sent only to the server's own listener; the first that fails fails the action, with RV(check)
        naming it and RV(pid) the server (which the caller stops).
      - With O(checks.dump_dir), the dump directory in the environment of the main process and of every scheduler
        (one per GPU of O(checks.gpus)), then a probe request whose own hidden-state dump must appear there.
      - With O(checks.expected_info), C(/server_info) against those values.
      - Then NVML must show every GPU of O(checks.gpus) with at least O(checks.min_used_mib) in use (a server that
        came up on other GPUs answers ready all the same).
      - Unset, V(ready) only waits.
    type: dict
    suboptions:
      dump_dir:
        description: The run directory the server dumps into; unset, nothing is checked of dumps.
        type: path
      prompt:
        description: The probe's prompt; unset, O(prompt).
        type: str
      probe_timeout:
        description: Seconds to wait for the probe's answer and its dump.
        type: float
        default: 60
      expected_info:
        description: The values C(/server_info) must report, by name (RV(expected_info) of V(check_args)); unset, not checked.
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
      expected_count:
        description: The number of GPUs NVML must show, as O(gpuops.host.gpu_verify#module:expected_count).
        type: int
      v1_reserved_mib:
        description: As O(gpuops.host.gpu_verify#module:v1_reserved_mib), for a driver without the v2 memory call.
        type: int
  stop:
    description:
      - The stop's options in one dict, each as the option of the same name documented here for V(stop) - O(record_path),
        O(presets), O(patterns), O(pids), O(owners), O(default_url), O(api_key), O(timeout) (the drain's), O(interval),
        O(request_timeout), O(force), O(stop_timeout), O(disable_supervisors), O(reap), O(verify), O(settle),
        O(active_window), O(cut_active_run), O(dump_patterns), O(lock).
      - For V(stop), in place of those options.
      - For V(ready) with O(start) - stop what runs first, as V(stop) does, then start the new server in the same call,
        so that nothing else runs between the old server's exit and the new server's start. The result has the stop's
        as RV(stopped); a failure of the stop itself says so with RV(stop_failed).
    type: dict
    suboptions:
      record_path:
        description:
          - For V(find), the record (C(server.json)) that P(gpuops.host.sglang_launch#role) keeps of its server. The process
            whose environment carries the record's run marker (C(GPUOPS_RUN)) is that server, with the URL recorded there.
            A missing record finds nothing by marker.
        type: path
      presets:
        description: For V(find), M(gpuops.host.gpu_reap) presets whose command line patterns find servers started by hand.
        type: list
        elements: str
        default:
          - sglang
      patterns:
        description: For V(find), more regular expressions matched against the full command line of a main process.
        type: list
        elements: str
        default: []
      pids:
        description:
          - For V(find), main processes to take for servers whatever their command line - needed only for a server that the
            SGLang Model Gateway's co-launcher started (C(sglang::server)), which is otherwise reported in RV(gateways) and
            refused by O(drain).
        type: list
        elements: int
        default: []
      owners:
        description:
          - For V(find), the users whose servers are found for a stop (names, or UIDs where a user has no name), by the real
            UID of each process. Another user's server is listed in RV(others), with its user, PID and ports, and is never
            drained (it is sent no API key) nor stopped, unless O(pids) names it. Empty, the servers of every user are found.
          - Only gateways of root itself and of these users (without them, of the found servers' users) can refuse a stop
            for the servers they co-launched, and only their new servers fail the settle watch; another user's neither blocks
            nor fails it.
        type: list
        elements: str
        default: []
      default_url:
        description: For V(find), the URL of a server whose command line names no C(--port) (it may use C(--config)).
        type: str
        default: http://127.0.0.1:30000
      api_key:
        description:
          - The server's C(--api-key), sent as a bearer token. Without it a server started with an API key answers C(/v1/loads)
            and C(/server_info) with 401; C(/metrics) and C(/health*) need none.
          - V(find) with O(drain), and V(stop), drain each server with the key it was started with where its command line
            (C(--api-key)) or its C(--config) file (C(api-key), read as the server names it, only when the file belongs to
            the server's user or the server runs as root) says, and with this key otherwise; so a restart that changes the
            key drains the old server with its own. V(drain), V(probe) and V(check_info) with O(pid) do the same for the server
            O(pid).
        type: str
      timeout:
        description:
          - Seconds the whole action may wait - the drain (V(drain); for V(find) with O(drain), each server's), the wait for
            readiness (V(ready)), or the probe request and its dump (V(probe)).
        type: float
        default: 600
      interval:
        description:
          - Seconds between two readings while waiting; what is waited for (no request in flight, the ready answer, the probe's
            dump) is noticed at most this late.
          - A reading is one HTTP request (C(/metrics) or C(/v1/loads), the ready path) or one directory listing, cheap enough
            to repeat twice a second.
        type: float
        default: 0.5
      request_timeout:
        description: Seconds one HTTP request may take, cut to the time left of O(timeout).
        type: float
        default: 10
      force:
        description:
          - For V(drain) and V(find) with O(drain), when requests are still in flight after O(timeout), abort them and succeed
            with a warning and RV(lost), instead of failing.
        type: bool
        default: false
      stop_timeout:
        description:
          - For O(stop_supervised), the seconds a container engine waits after SIGTERM before its SIGKILL.
          - For V(stop), also the seconds M(gpuops.host.gpu_reap)'s escalation waits after SIGTERM (its C(term_timeout)).
        type: float
        default: 60
      disable_supervisors:
        description:
          - For O(stop_supervised), also keep each supervisor from starting its server again - C(systemctl disable UNIT) for
            an enabled unit that P(gpuops.host.sglang_launch#role) did not write, C(docker|podman update --restart=no) for
            a container (Podman 5.1 and later; an older Podman has no C(podman update --restart), and the stop fails there
            after the container stopped). Without it such a server comes back at the next boot, and the result warns.
        type: bool
        default: false
      reap:
        description:
          - For V(stop), the options of M(gpuops.host.gpu_reap) for what is left after the supervised stops, as that module
            documents them. The stop sets the others - the selectors, C(term_timeout) (O(stop_timeout)) and C(verify) (O(verify)).
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
          - After the stop, wait until every GPU (or those in O(verify.gpus)) is clean, and fail the run when they are not
            within O(verify.timeout); the suboptions are those of M(gpuops.host.gpu_verify), with the same defaults.
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
            description: Whether processes NVML lists may remain on a clean GPU (its memory still within O(verify.max_used_mib)).
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
          - For V(stop), how long to watch, as V(settle) does, for a server started again, where a server had a parent other
            than init (a C(while true) wrapper, a script). A unit or a container is stopped through its supervisor, whose
            restart policy an explicit stop does not trigger. V(0) watches nothing.
        type: float
        default: 2
      active_window:
        description:
          - For V(find) with O(drain), and V(stop), before anything is drained or signalled - a server whose extraction run
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
          - Stop a server in an active extraction run anyway (see O(active_window)); RV(runs) and a warning say that the run
            was cut.
        type: bool
        default: false
      dump_patterns:
        description:
          - For V(find) with O(drain), and V(stop) - the name patterns (shell-style) of the files under a run directory that
            count as the run's dumps (RV(runs), the manifest, O(active_window)); every regular file by default. The dumps
            are counted and sized, never opened. The run's manifest, C(gpuops-manifest.json), is never a dump.
          - V(stop) completes the manifest of the recorded server's run - written by M(gpuops.host.dump_dir) when the server
            was proven ready - once the server is stopped, with how it ended (V(drained), or V(cut) with O(cut_active_run)),
            the time and the final counts, and where the recorded server is found gone while its manifest still says running,
            as V(crashed). Written as M(gpuops.host.dump_dir) writes it, following no link.
        type: list
        elements: str
        default:
          - '*'
      lock:
        description:
          - For V(stop), the host lock of M(gpuops.host.host_lock) around the stop, in the same call - so the lock costs no
            round trip of its own. Without it the stop does not look at any lock.
          - With O(lock.take=false) the run O(lock.run) must hold the lock already - checked before anything is drained or
            signalled, and again when the stop is done, so that a run that lost the lock to a stale-lock break on another
            controller stops there (RV(lock_lost)).
          - With O(lock.take=true) the stop takes the lock for O(lock.run) before anything is drained or signalled - failing,
            with nothing touched, where another run holds it, as host_lock does - and releases it when it ends, whatever the
            outcome. In check mode it neither takes nor releases it.
        type: dict
        suboptions:
          run:
            description: The run that holds or takes the lock, as host_lock's O(gpuops.host.host_lock#module:run).
            type: str
            required: true
          take:
            description: Take the lock for the stop and release it after (V(true)), or check that O(lock.run) holds it (V(false)).
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
      - For V(ready), instead of O(pid) or O(main_process_of) - start the server first, then wait for it, as the
        caller rendered its start.
      - A start that fails fails the action, with RV(died) and the command's own words; RV(unit_written) says whether
        a unit file was written.
    type: dict
    suboptions:
      kind:
        description:
          - How the server runs. V(process) - O(start.argv) starts it detached and prints its PID last; V(systemd) -
            the unit O(start.unit) is written and restarted; V(docker), V(podman) - O(start.argv) runs the container
            O(start.container).
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
      - For V(ready), with O(pid), O(main_process_of) or O(start) - once the server passed every check of O(checks), record it -
        the node's record at O(record.path) (JSON, 0640, written beside its name and renamed over it), the manifest of
        its extraction run where the record names a run directory (a manifest that cannot be written is said in
        RV(record_written), and does not fail the server), a line of the run history, and the removal of older run
        directories. A record that cannot be written fails the action, with RV(check) V(record).
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
notes:
  - SGLang's C(--config) reader requires a C(.yaml) or C(.yml) file name.
  - The supported releases are 0.5.14 and 0.5.23; both derive every flag from the C(ServerArgs) field of the
    same name, so one rendering serves both. C(cuda_graph_max_bs) - the old name of the decode graph batch
    size - is an ambiguous abbreviation in 0.5.23, which V(check_args) refuses with SGLang's message; use
    C(cuda_graph_max_bs_decode).
seealso:
  - module: gpuops.host.gpu_reap
  - module: gpuops.host.gpu_verify
"""

EXAMPLES = r"""
- name: Check the new command line with the installed SGLang's parser, before the old server is touched
  gpuops.host.sglang_server:
    action: check_args
    python: /opt/sglang/bin/python
    server_args:
      model_path: /models/qwen
      tp_size: 4
      mem_fraction_static: 0.92
      cuda_graph_max_bs_decode: 160
    secret_server_args:
      api_key: "{{ vault_sglang_api_key }}"
    secret_environment:
      HF_TOKEN: "{{ vault_hf_token }}"
    secrets_path: /var/lib/gpuops/sglang/secret-args.yaml
  register: args

- name: Find the servers of the host
  gpuops.host.sglang_server:
    action: find
    record_path: /var/lib/gpuops/sglang/server.json
  register: found

- name: Wait up to 10 minutes until no request is in flight; fail, leaving the server running, if some remain
  gpuops.host.sglang_server:
    action: drain
    url: "{{ item.url }}"
    timeout: 600
  loop: "{{ found.servers }}"

- name: Find the servers and drain each of them, in one call
  gpuops.host.sglang_server:
    action: find
    record_path: /var/lib/gpuops/sglang/server.json
    drain: true
    timeout: 600
  register: found

- name: Stop the servers in one call - find, drain, stop through their supervisors, stop what is left, verify the GPUs
  gpuops.host.sglang_server:
    action: stop
    record_path: /var/lib/gpuops/sglang/server.json
    owners: [root, sglang]
    timeout: 600
    stop_timeout: 60
    verify:
      expected_count: 8
  register: stopped

- name: The same stop under the host lock, taken and released in the same call
  gpuops.host.sglang_server:
    action: stop
    record_path: /var/lib/gpuops/sglang/server.json
    lock:
      run: "{{ run_id }}"
      take: true
      owner: {playbook: "{{ ansible_play_name }}"}
    verify:
      expected_count: 8

- name: Wait for readiness, quoting the log if the server dies while loading
  gpuops.host.sglang_server:
    action: ready
    url: http://127.0.0.1:30000
    pid: 4200
    log_path: /var/log/sglang/tuning-20260101T000000Z.log
    timeout: 1800

- name: Check that /server_info reports what the parser stored
  gpuops.host.sglang_server:
    action: check_info
    url: http://127.0.0.1:30000
    expect: "{{ args.expected_info }}"

- name: Send a probe and wait for its own hidden-state dump
  gpuops.host.sglang_server:
    action: probe
    url: http://127.0.0.1:30000
    dump_dir: /data/hs_dumps/run-42
    timeout: 60
"""

RETURN = r"""
summary:
  description:
    - V(stop) - the stop in figures, as P(gpuops.host.sglang_stop#role) reports it (its C(sglang_stop_result)) - C(servers),
      C(elsewhere), C(gateways), C(others) (PIDs), C(supervisors), C(supervised_stops), C(comes_back), C(runs),
      C(marker), C(in_flight), C(forced), C(lost) (null where a main process needed SIGKILL), C(killed), C(escalated),
      C(exited_on_their_own), C(seconds_to_clean), C(gpus_verified).
  returned: action is stop and it succeeded
  type: dict
  sample: {"servers": [4200], "lost": 0, "killed": [], "seconds_to_clean": 2.05, "gpus_verified": 8}
said:
  description:
    - V(stop) - one line for each thing a reader should know - how a unit or a container stopped its server, each
      extraction run cut or ended and what it holds, and what was left running (other users' servers, gateways, GPU
      holders, processes of other PID namespaces); in a failure, what was left running.
  returned: action is stop
  type: list
  elements: str
  sample: ["Left running: the SGLang Model Gateway, pid 3100 (user root) python -m sglang_router.launch_router, listening on TCP ports 30000"]
signalled:
  description:
    - V(stop) - whether the stop signalled anything (a supervised stop, or gpu_reap's escalation), in a failure too - from
      the first signal on the old server is not untouched. Always false in check mode.
  returned: action is stop
  type: bool
  sample: true
reap:
  description:
    - V(stop) - the result of M(gpuops.host.gpu_reap) for what was left after the supervised stops - C(stopped) (each
      process with the signals it got), C(would_stop) in check mode, C(protected), C(foreign), C(other_namespaces),
      C(elapsed), and C(verify), the report of the wait until every GPU was clean - as that module returns them.
  returned: action is stop and the stop got that far
  type: dict
  sample: {stopped: [{pid: 4200, signals: [SIGTERM]}], foreign: [], elapsed: 4.31, verify: {clean: true, count: 8}}
lock:
  description:
    - V(stop) with O(lock) - the lock file, the record of the run that held it during the stop (C(owner)), the stale
      record that taking it replaced (C(taken_over)), and whether the stop released it (C(released)).
  returned: action is stop and lock is set
  type: dict
  sample: {path: /run/gpuops/lock.json, owner: {run: 20260101T000000Z-42}, taken_over: null, released: true}
lock_lost:
  description:
    - V(stop) with O(lock) - true in the failure of a stop whose run could not take the lock (O(lock.take=true)), did
      not hold it, or no longer held it when the stop was done; RV(signalled) says whether it had stopped anything by
      then.
  returned: failure of stop with lock
  type: bool
  sample: true
holder:
  description: V(stop) with O(lock) - the record of the run that holds the lock, when the stop fails because of it.
  returned: failure of stop because of the lock
  type: dict
  sample: {run: 20260101T060100Z-77, playbook: Restart SGLang in tuning mode, controller: ops-2}
settled:
  description:
    - V(stop) - what V(settle) returned, where a server had a parent that may start it again; null where none had.
  returned: action is stop
  type: dict
  sample: {respawned: [], polls: 20, seconds: 2.0}
servers:
  description: V(find) - the servers running now, by main process.
  returned: action is find or stop
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
      description: Whether it is the server of O(record_path).
      type: bool
      sample: true
    session:
      description: Its session ID when it leads its own session; null otherwise.
      type: int
      sample: 4200
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
  description: V(find) - main processes of servers in another PID namespace or container, with the reason; not in RV(servers).
  returned: action is find or stop
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
  description: V(find) with O(owners) - other users' servers, left alone, each with C(pid), C(user), C(cmdline) and C(ports).
  returned: action is find or stop
  type: list
  elements: dict
  sample: [{pid: 7300, user: bob, cmdline: python3 -m sglang.launch_server --port 31000, ports: [31000]}]
supervised_stops:
  description: V(find) with O(stop_supervised) - the servers stopped through their unit or container.
  returned: action is find and stop_supervised, or stop
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
    - V(find) - warnings about the servers that come back by themselves at the next boot or engine restart (an enabled
      unit that P(gpuops.host.sglang_launch#role) did not write, a container with restart policy C(always) or
      C(unless-stopped)), each with the command that disables it.
  returned: action is find or stop
  type: list
  elements: str
  sample:
    - >-
      the systemd unit team-sglang.service of the SGLang server 4200 is enabled: it starts again at the next boot
      (systemctl disable --now team-sglang.service, or disable_supervisors)
respawned:
  description: V(settle) - the new servers found after the stop, each with its supervisor; empty when none came.
  returned: action is settle
  type: list
  elements: dict
  sample: []
gateways:
  description:
    - V(find) - the SGLang Model Gateways (PyPI C(sglang-router)) running beside the servers, never drained nor
      stopped by a server's stop (M(gpuops.host.gpu_reap) protects them, see its O(gpuops.host.gpu_reap#module:protect_gateways)).
  returned: action is find or stop
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
          C(schedulers), unless O(pids) names them.
      type: list
      elements: dict
      sample: []
  sample: [{pid: 5100, start: 881234, user: sglang, cmdline: sglang::router, ports: [8000, 29000], colaunched: []}]
recorded:
  description: V(find) - the entry of RV(servers) that is the recorded server, or null.
  returned: action is find or stop
  type: dict
  sample: {pid: 4200, url: "http://127.0.0.1:30000"}
record:
  description: V(find) - the record read from O(record_path), empty when there is none.
  returned: action is find or stop
  type: dict
  sample: {marker: tuning-20260101T000000Z, pid: 4200}
port:
  description: V(find) with O(port) - who listens on that port.
  returned: action is find and port is set
  type: dict
  contains:
    port:
      description: The port.
      type: int
      sample: 30000
    listening:
      description: Whether a TCP socket listens on it.
      type: bool
      sample: true
    holders:
      description:
        - The processes with such a socket open, each with C(pid), C(ppid), C(name), C(state), C(user) and C(cmdline)
          (secrets masked). Empty while RV(port.listening) when only processes this PID namespace cannot see hold it.
      type: list
      elements: dict
      sample: [{pid: 4200, ppid: 1, name: python3, state: S, user: root, cmdline: python3 -m sglang.launch_server}]
    addresses:
      description: The local addresses the listening sockets are bound to.
      type: list
      elements: str
      sample: [127.0.0.1]
    unheld:
      description: Whether a listening socket is held by none of RV(port.holders) (by processes this PID namespace cannot see).
      type: bool
      sample: false
  sample: {port: 30000, listening: true, holders: [], addresses: [127.0.0.1], unheld: true}
release:
  description: The installed SGLang's version.
  returned: action is release or check_args
  type: str
  sample: 0.5.23
package:
  description: The directory of the C(sglang) package that O(python) imports (with O(pythonpath)).
  returned: action is release or check_args
  type: str
  sample: /opt/sglang/venv/lib/python3.11/site-packages/sglang
argv:
  description: V(render), V(check_args) - the server's full command line; it carries no secret.
  returned: action is render or check_args
  type: list
  elements: str
  sample: [/usr/bin/python3, -m, sglang.launch_server, --cuda-graph-max-bs-decode, "160", --tp-size, "4"]
server_argv:
  description: The server arguments as flags (without the interpreter and module).
  returned: action is render or check_args
  type: list
  elements: str
  sample: [--cuda-graph-max-bs-decode, "160", --config, /var/lib/gpuops/sglang/secret-args.yaml]
files:
  description: The argument files of the command line (O(config_path), O(secrets_path)).
  returned: action is render or check_args
  type: list
  elements: str
  sample: [/var/lib/gpuops/sglang/secret-args.yaml]
written:
  description: V(check_args) - the argument files written (in check mode, that would be written) because their content differed.
  returned: action is render or check_args
  type: list
  elements: str
  sample: []
expected_gpus:
  description:
    - NVML indices of the GPUs the server will occupy - C(tp_size) x C(dp_size) from C(base_gpu_id) in steps of
      C(gpu_id_step), through C(CUDA_VISIBLE_DEVICES).
  returned: action is render or check_args
  type: list
  elements: int
  sample: [0, 1, 2, 3]
secret_args:
  description: Names of O(server_args) treated as secrets and set; they are not on RV(argv) unless through a C(--config) file.
  returned: action is render or check_args
  type: list
  elements: str
  sample: [api_key]
config_keys:
  description:
    - V(check_args) - C(--config) keys that the installed release refuses in a file, with the spelling written
      instead. SGLang 0.5.14 refuses the key of a destination that a deprecated alias shares, so its file gets
      C(cuda-graph-max-bs) for C(cuda_graph_max_bs_decode).
  returned: action is check_args
  type: dict
  sample: {cuda-graph-max-bs-decode: cuda-graph-max-bs}
expected_info:
  description: V(check_args) - the values the parser stored for the arguments given (secrets left out), as C(/server_info) will report them.
  returned: action is check_args
  type: dict
  sample: {cuda_graph_max_bs_decode: 160, mem_fraction_static: 0.92}
drains:
  description:
    - V(find) with O(drain) - the drain of each server, in the order of RV(servers), each with the keys that
      V(drain) returns (RV(drained), RV(in_flight), RV(lost), ...) and the server's C(pid) and C(url).
  returned: action is find and drain is true, or stop
  type: list
  elements: dict
  sample: [{pid: 4200, url: "http://127.0.0.1:30000", drained: true, in_flight: 0, lost: 0, source: loads}]
runs:
  description:
    - V(find) with O(drain), and V(stop) - the extraction run of each server that has a dump directory, with C(pid),
      C(marker), C(path), C(exists), C(files) and C(bytes) (the run's dumps, O(dump_patterns)), C(gb), C(own) (the
      readiness check's and the probe's dumps), C(newest) (the last write, seconds since the epoch), C(age) (seconds
      since it), C(active) (within O(active_window)), C(cut) (stopped although active, O(cut_active_run)) and
      C(recorded) (the run of the server that the record names).
    - V(stop) only, once the stop is done - C(files), C(bytes), C(gb), C(own) and C(newest) counted again at its end;
      C(recent) (dumps written within 10 s before the stop, which may be partial); C(ended) - V(drained), V(cut),
      V(crashed) (the recorded server was found gone, and this run is added), null where the server still runs (a stop
      that failed); C(manifest) (the path of the manifest completed, the recorded run's only; null in check mode);
      C(manifest_error) where it could not be written (a warning says so too).
  returned: action is find and drain is true, or stop
  type: list
  elements: dict
  sample: [{pid: 4200, marker: extraction-20261201T000000Z-node1-3f9a2c1b, path: /data/hs_dumps/extraction-20261201T000000Z-node1-3f9a2c1b,
            exists: true, files: 37312, bytes: 924000000000, gb: 924.0, own: 3, newest: 1796000000.5, age: 4.2,
            active: true, cut: true, recorded: true, recent: 2, ended: cut,
            manifest: /data/hs_dumps/extraction-20261201T000000Z-node1-3f9a2c1b/gpuops-manifest.json}]
undrained:
  description:
    - V(find) with O(drain) - the servers sent nothing, neither drained nor given O(api_key), each with C(pid),
      C(user), C(url), C(reason) and C(strangers) (the processes outside its tree that hold its port).
  returned: action is find and drain is true, or stop
  type: list
  elements: dict
  sample: [{pid: 5100, user: nobody, url: "http://127.0.0.1:4444", strangers: [],
            reason: "it runs as nobody, who is not trusted with the API key (root)"}]
listener:
  description:
    - V(ready), and the failures of V(drain), V(probe) and V(check_info), with O(pid) - who listens on the port of
      O(url) - C(port), C(tied) (a process of the tree of O(pid) listens, and no other), C(url) (the server's own
      address), C(holders), C(strangers) (holders outside the tree, with C(user)) and C(reason).
  returned: action is ready and pid is set, or failure of a check of the listener
  type: dict
  sample: {port: 30000, tied: true, url: "http://127.0.0.1:30000", holders: [], strangers: [], reason: null}
drained:
  description: V(drain) - whether no request was in flight at the end (or nothing listened).
  returned: action is drain
  type: bool
  sample: true
serving:
  description: V(drain) - false when nothing listened at O(url).
  returned: action is drain
  type: bool
  sample: true
in_flight:
  description: V(drain) - requests in flight at the last reading; null when it could not be read.
  returned: action is drain
  type: int
  sample: 0
source:
  description: V(drain) - where the last count came from, V(metrics) or V(loads).
  returned: action is drain
  type: str
  sample: loads
readings:
  description: V(drain) - readings taken.
  returned: action is drain
  type: int
  sample: 3
lost:
  description: V(drain) - requests given up with O(force) (aborted, or left to be cut by the stop).
  returned: action is drain
  type: int
  sample: 0
aborted:
  description: V(drain) - whether O(force) aborted the requests still in flight.
  returned: action is drain
  type: bool
  sample: false
needs_api_key:
  description: V(drain) - whether the count needed an O(api_key) that was not given or not accepted.
  returned: action is drain
  type: bool
  sample: false
error:
  description: V(drain) - the last reading's error, if any.
  returned: action is drain
  type: str
  sample: "metrics: HTTP 404 (the server runs without --enable-metrics)"
seconds:
  description: Seconds the action waited.
  returned: action is drain, ready or probe
  type: float
  sample: 4.2
ready:
  description: V(ready) - whether O(path) answered 200.
  returned: action is ready
  type: bool
  sample: true
start:
  description: V(ready) with O(pid), once ready - the start time of O(pid), in clock ticks since boot (with the PID, it names the process).
  returned: action is ready, pid is set, and the server is ready
  type: int
  sample: 991234
user:
  description: V(ready) with O(pid), once ready - the user O(pid) runs as.
  returned: action is ready, pid is set, and the server is ready
  type: str
  sample: root
died:
  description:
    - V(ready) - whether the process O(pid) exited while loading, or the supervisor of O(main_process_of) ended
      before it named a main process.
  returned: action is ready
  type: bool
  sample: false
pid:
  description: V(ready) - the server's main process, O(pid) or that of O(main_process_of); null when none was found.
  returned: action is ready
  type: int
  sample: 4200
last:
  description: V(ready) - the last answer or error.
  returned: action is ready
  type: str
  sample: HTTP 200
log_tail:
  description: V(ready) - the end of O(log_path), secrets masked, when the server did not become ready.
  returned: failure of ready
  type: list
  elements: str
  sample: ["ValueError: ..."]
leaked:
  description:
    - Options of O(server_args) and O(environment) that carried a secret value, refused (C(server_args.api_key)); the
      values are not returned.
  returned: failure because of a secret in a logged option
  type: list
  elements: str
  sample: [environment.HF_TOKEN]
checked:
  description: V(check_environ) - the processes checked, with the variables each lacks; V(check_info) - the names compared.
  returned: action is check_environ or check_info
  type: list
  sample: []
missing:
  description: V(check_environ) - the processes that lack a variable.
  returned: action is check_environ
  type: list
  elements: dict
  sample: []
ok:
  description: V(check_environ) - whether the check passed.
  returned: action is check_environ
  type: bool
  sample: true
rid:
  description: V(probe) - the request id sent.
  returned: action is probe
  type: str
  sample: gpuops-probe-4242-1767225600000
dumps:
  description: V(probe) - the dump files named by RV(rid).
  returned: action is probe
  type: list
  elements: str
  sample: [/data/hs_dumps/run-42/gpuops-probe-4242-1767225600000.pt]
seconds_to_ready:
  description: V(ready) with O(pid) or O(main_process_of), once ready - seconds from the server process's start until it answered ready.
  returned: action is ready, the server has a main process, and it is ready
  type: float
  sample: 41.3
record_written:
  description: V(ready) with O(record) - what was written (C(record), C(manifest), C(manifest_error), C(removed)).
  returned: action is ready, record is set, and the server passed its checks
  type: dict
  sample: {"record": {"status": "ok", "marker": "extraction-20260101T000000Z-node1-3f9a2c"}, "manifest": null,
           "manifest_error": null, "removed": []}
started:
  description: V(ready) with O(start) - when the start began, in seconds since the epoch (the record's C(started)).
  returned: action is ready and start is set
  type: int
  sample: 1767225600
stopped:
  description: V(ready) with O(stop) - the stop's result (as V(stop) returns it, RV(summary) and RV(said) included).
  returned: action is ready and stop is set
  type: dict
  sample: {"servers": [], "signalled": true, "summary": {"seconds_to_clean": 2.05}, "said": []}
stop_failed:
  description: V(ready) with O(stop) - whether the stop itself failed (then nothing was started).
  returned: failure of the stop of ready
  type: bool
  sample: true
unit_written:
  description: V(ready) with O(start) of a unit - whether its unit file was written (then its secret files stay, which it names).
  returned: action is ready and start.kind is systemd, once the unit file was written
  type: bool
  sample: true
checks_seconds:
  description: V(ready) with O(checks) - seconds the checks took, after the server answered ready.
  returned: action is ready, checks is set, and every check passed
  type: float
  sample: 3.1
checks:
  description:
    - V(ready) with O(checks) - what each check found, by name (V(environ), V(probe), V(info), V(gpus)); in a failure,
      those that passed.
  returned: action is ready and checks is set
  type: dict
  sample: {"gpus": {"gpus": [0, 1], "idle": [], "error": null}}
check:
  description: V(ready) - the check of O(checks) that failed.
  returned: failure of a check of ready
  type: str
  sample: gpus
mismatches:
  description: V(check_info) - names whose reported value differs (name, expected, reported, missing).
  returned: action is check_info
  type: list
  elements: dict
  sample: []
"""

import copy
import os

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.host.plugins.module_utils._checks import Unreadable
from ansible_collections.gpuops.host.plugins.module_utils._nvml import HAS_PYNVML, PYNVML_IMPORT_ERROR, Nvml
from ansible_collections.gpuops.host.plugins.module_utils._procs import ProcFS
from ansible_collections.gpuops.host.plugins.module_utils._reap import MissingLibrary, Run
from ansible_collections.gpuops.host.plugins.module_utils._reap_options import argument_spec as reap_argument_spec
from ansible_collections.gpuops.host.plugins.module_utils._sglang import (
    ACTIONS, STOP_KEYS, STOP_SETS, ActionFailed, Deps, lock_options, perform, secrets_of,
)
from ansible_collections.gpuops.host.plugins.module_utils._verify import wait_argument_spec


def argument_spec():
    spec = dict(
        action=dict(type='str', required=True, choices=list(ACTIONS)),
        url=dict(type='str'),
        api_key=dict(type='str', no_log=True),
        python=dict(type='path', default='/usr/bin/python3'),
        pythonpath=dict(type='list', elements='path', default=[]),
        container=dict(type='dict', options=dict(
            engine=dict(type='str', choices=['docker', 'podman'], default='docker'),
            image=dict(type='str', required=True),
            options=dict(type='list', elements='str', default=[]))),
        environment=dict(type='dict', default={}),
        secret_environment=dict(type='dict', default={}, no_log=True),
        entry_module=dict(type='str', default='sglang.launch_server'),
        run_as=dict(type='dict', options=dict(uid=dict(type='int', required=True),
                                              gid=dict(type='int', required=True))),
        server_args=dict(type='dict', default={}),
        secret_server_args=dict(type='dict', default={}, no_log=True),
        secret_args=dict(type='list', elements='str', default=[], no_log=False),
        config_file=dict(type='bool', default=False),
        config_path=dict(type='path'),
        secrets_path=dict(type='path'),
        record_path=dict(type='path'),
        port=dict(type='int'),
        bind_host=dict(type='str'),
        presets=dict(type='list', elements='str', default=['sglang']),
        patterns=dict(type='list', elements='str', default=[]),
        pids=dict(type='list', elements='int', default=[]),
        owners=dict(type='list', elements='str', default=[]),
        stop_supervised=dict(type='bool', default=False),
        stop_timeout=dict(type='float', default=60),
        reap=dict(type='dict', default={}, options=dict(
            (k, v) for k, v in reap_argument_spec().items() if k not in STOP_SETS)),
        verify=dict(type='dict', options=wait_argument_spec()),
        settle=dict(type='float', default=2),
        active_window=dict(type='float', default=120),
        cut_active_run=dict(type='bool', default=False),
        dump_patterns=dict(type='list', elements='str', default=['*']),
        disable_supervisors=dict(type='bool', default=False),
        lock=dict(type='dict', options=lock_options()),
        stopped=dict(type='list', elements='dict', default=[]),
        default_url=dict(type='str', default='http://127.0.0.1:30000'),
        other_namespaces=dict(type='bool', default=False),
        drain=dict(type='bool', default=False),
        api_key_users=dict(type='list', elements='str', default=[], no_log=False),
        pid=dict(type='int'),
        main_process_of=dict(type='dict', options=dict(
            kind=dict(type='str', required=True, choices=['systemd', 'docker', 'podman']),
            name=dict(type='str', required=True))),
        environ=dict(type='dict', default={}),
        schedulers=dict(type='int', default=1),
        timeout=dict(type='float', default=600),
        interval=dict(type='float', default=0.5),
        request_timeout=dict(type='float', default=10),
        force=dict(type='bool', default=False),
        path=dict(type='str', default='/health_generate'),
        log_path=dict(type='path'),
        log_lines=dict(type='int', default=50),
        secrets=dict(type='list', elements='str', default=[], no_log=True),
        rid=dict(type='str'),
        prompt=dict(type='str', default='The hidden states of this prompt are dumped to check the extraction run.'),
        dump_dir=dict(type='path'),
        expect=dict(type='dict', default={}),
        checks=dict(type='dict', options=dict(
            dump_dir=dict(type='path'),
            prompt=dict(type='str'),
            probe_timeout=dict(type='float', default=60),
            expected_info=dict(type='dict'),
            api_key=dict(type='str', no_log=True),
            gpus=dict(type='list', elements='int', default=[]),
            min_used_mib=dict(type='int', default=1024),
            expected_count=dict(type='int'),
            v1_reserved_mib=dict(type='int'))),
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
    # The stop's options, in one dict: a stop made by ready before it starts the server, or by stop itself.
    spec['stop'] = dict(type='dict', options=dict((k, copy.deepcopy(spec[k])) for k in STOP_KEYS))
    return spec


def main():
    module = AnsibleModule(
        argument_spec=argument_spec(),
        mutually_exclusive=[('pid', 'main_process_of', 'start')],
        required_if=[('action', a, ('url',)) for a in ('drain', 'ready', 'probe', 'check_info')]
        + [('action', 'check_environ', ('pid',)), ('config_file', True, ('config_path',))],
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
    # Values of under 4 characters (SPT_NOENV=1) are masked nowhere: masking them would garble every number.
    module.no_log_values.update(secrets_of(p))
    module.no_log_values.difference_update([v for v in module.no_log_values if len(v) < 4])

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
        result = perform(p, deps)
    except MissingLibrary as e:
        module.fail_json(msg=missing_required_lib('nvidia-ml-py', reason=e.reason), exception=PYNVML_IMPORT_ERROR)
    except ActionFailed as e:
        module.fail_json(msg=e.msg, **e.result)
    module.exit_json(**dict({'changed': False}, **result))


if __name__ == '__main__':
    main()
