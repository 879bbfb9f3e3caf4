# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The suboptions of gpuops.host.sglang_server's ``launch`` option (_launch renders them), apart so that a call
without a launch - a stop - does not load the rendering."""

from __future__ import annotations


def _opt(kind, default=None, **more):
    return dict(more, type=kind, default=default) if default is not None else dict(more, type=kind)


# gpuops.host.sglang_server's launch option: the sglang_launch role's variables, by the same names less the prefix.
# raw where the value goes into the configuration's identity as given (a unit's limits, the stop timeout).
OPTIONS = dict(
    mode=_opt('str', required=True),
    node_name=_opt('str'),
    dumps=_opt('bool', False),
    verify_info=_opt('bool', False),
    server_args=_opt('dict', {}),
    secret_args=_opt('list', [], elements='str', no_log=False),
    environment=_opt('dict', {}),
    python=_opt('path', required=True),
    module=_opt('str', 'sglang.launch_server'),
    pythonpath=_opt('list', [], elements='path'),
    config_file=_opt('bool', False),
    user=_opt('str', 'root'),
    group=_opt('str', ''),
    dump_group=_opt('str', ''),
    supervisor=_opt('str', 'auto', choices=['auto', 'process', 'systemd', 'docker', 'podman']),
    image=_opt('str', ''),
    shm_size=_opt('str', '32g'),
    container_gpu_options=_opt('list', [], elements='str'),
    container_network=_opt('str', 'host'),
    container_restart=_opt('str', 'no'),
    container_volumes=_opt('list', [], elements='str'),
    container_options=_opt('list', [], elements='str'),
    unit=_opt('str', 'gpuops-sglang'),
    unit_dir=_opt('path', '/etc/systemd/system'),
    limit_memlock=_opt('raw', 'infinity'),
    limit_nofile=_opt('raw', 1048576),
    restart_on_failure=_opt('bool', False),
    enable=_opt('bool', False),
    term_timeout=_opt('raw', 60),
    state_dir=_opt('path', '/var/lib/gpuops/sglang'),
    log_dir=_opt('path', '/var/log/sglang'),
    model_path=_opt('str', required=True),
    check_model_path=_opt('bool', True),
    host=_opt('str', '127.0.0.1'),
    port=_opt('int', 30000),
    dump_root=_opt('path', '/data/hs_dumps'),
    run_name=_opt('str', ''),
    dump_min_free_gb=_opt('float', 100),
    dump_patch_paths=_opt('list', ['srt/models'], elements='str'),
    dump_patch_pattern=_opt('str', 'SGLANG_HS_DUMP_DIR'),
    ready_path=_opt('str', '/health_generate'),
    ready_timeout=_opt('float', 1800),
    ready_interval=_opt('float', 0.5),
    log_tail_lines=_opt('int', 50),
    probe_prompt=_opt('str'),
    probe_timeout=_opt('float', 60),
    gpus=_opt('list', [], elements='int'),
    min_used_mib=_opt('int', 1024),
    expected_count=_opt('int'),
    v1_reserved_mib=_opt('int'),
    owners=_opt('list', elements='str'),
    rollback=_opt('bool', False),
    restart=_opt('bool', False),
    multinode=_opt('bool', False),
    worker=_opt('bool', False),
    lock_run=_opt('str', ''),
    lock_path=_opt('str', ''),
    lock_release=_opt('bool', False),
)
