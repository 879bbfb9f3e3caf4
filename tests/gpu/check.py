# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The real-GPU check's sequence (run it through tests/gpu/run.sh; see docs/real-gpu.md).

1. gpu_info reads the idle GPUs (v1 used, v2 used, reserved, total).
2. A decoy holds /dev/nvidiactl open without a CUDA context.
3. Twice, once with a holder that dies of SIGTERM and once with one that ignores it
   (SIGKILL path): watcher.py starts holder.py (``sglang::scheduler_TP0`` with --mib MiB on
   GPU 0) and polls NVML; check.yml runs gpu_verify (must fail naming the holder), gpu_reap
   by pattern (planned in check mode first: it must select the holder alone) and gpu_verify
   with a timeout. The times from the holder's SIGTERM to its exit, to its memory being back
   and to the verified-clean verdict are recorded.
4. Everything goes to OUT/gpu-check.json; the exit status is 0 only when every check passed.

With ``--mode sim`` the same runs inside a gpusim sandbox against the simulated node: the
holder registers its memory with the simulator and the modules run inside the sandbox.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PATTERN = '^sglang::scheduler_TP0'
HOLDER_TITLE = 'sglang::scheduler_TP0'
SCENARIOS = (
    # name, holder ignores SIGTERM, gpu_reap term_timeout, expected signals, expected exit status
    ('sigterm', False, 30, ['SIGTERM'], -signal.SIGTERM),
    ('sigkill', True, 3, ['SIGTERM', 'SIGKILL'], -signal.SIGKILL),
)


class CheckFailed(Exception):
    pass


class Host(object):
    """The machine with the real GPU: everything runs directly."""

    holder_args = []

    def __init__(self, work):
        self.work = work
        self.interpreter = sys.executable

    def popen(self, argv, env=None):
        return subprocess.Popen(argv, stdout=subprocess.PIPE, universal_newlines=True, env=env)

    def state(self, pid):
        """State letter of PID (R, S, Z...), None when it does not exist."""
        try:
            with open('/proc/%d/stat' % pid) as f:
                return f.read().rsplit(')', 1)[1].split()[0]
        except (IOError, OSError):
            return None

    def kill_holder(self, pid):
        """SIGKILL a holder left behind by a failed run, if PID is still that holder."""
        try:
            with open('/proc/%d/cmdline' % pid, 'rb') as f:
                if f.read().startswith(HOLDER_TITLE.encode()):
                    os.kill(pid, signal.SIGKILL)
        except (IOError, OSError):
            pass

    def close(self):
        pass


class SimHost(Host):
    """The simulated node: a gpusim sandbox; the modules run inside it through a wrapper."""

    holder_args = ['--sim']

    def __init__(self, work, release_lag_ms=None):
        super(SimHost, self).__init__(work)
        sys.path.insert(0, os.path.join(REPO, 'tests', 'sim'))
        from gpusim.sandbox import Sandbox
        self.sb = Sandbox(os.path.join(work, 'sandbox'), gpus=1, decoys=True).start()
        if release_lag_ms is not None:
            self.sb.node.set_release_lag(release_lag_ms)
        self.sim_env = self.sb.env({})
        # The modules run in the check's own venv (sys.executable), inside the node, with the
        # node's variables: its NVML state and library, and the PID namespace NVML numbers in.
        exports = dict((k, self.sim_env[k]) for k in ('GPUSIM_STATE', 'LD_LIBRARY_PATH', 'GPUOPS_HOST_PIDNS')
                       if self.sim_env.get(k))
        exports['PYTHONPATH'] = os.path.join(REPO, 'tests', 'sim')
        self.interpreter = os.path.join(work, 'sandbox-python')
        with open(self.interpreter, 'w') as f:
            f.write('#!/bin/sh\nexport %s\nexec nsenter -t %d -p -m --wd="$(pwd)" -- %s "$@"\n' % (
                ' '.join('%s=%s' % (k, shlex.quote(v)) for k, v in sorted(exports.items())),
                self.sb.init_pid, sys.executable))
        os.chmod(self.interpreter, 0o755)

    def popen(self, argv, env=None):
        env = dict(env or os.environ, PYTHONPATH=os.path.join(REPO, 'tests', 'sim'))
        return self.sb.popen(argv, env=env, stdout=subprocess.PIPE, universal_newlines=True)

    def state(self, pid):
        for p in self.sb.procs():
            if p['pid'] == pid:
                return p['state']
        return None

    def kill_holder(self, pid):
        pass                    # closing the sandbox kills everything in it

    def close(self):
        self.sb.close()


def read_line(proc, timeout):
    """The first line PROC prints, or None when it prints none within TIMEOUT seconds."""
    box = []
    reader = threading.Thread(target=lambda: box.append(proc.stdout.readline()))
    reader.daemon = True
    reader.start()
    reader.join(timeout)
    return box[0] if box and box[0] else None


def playbook(host, args, phase, extra_vars, timeout):
    """Run one phase of check.yml; return its written results."""
    result_file = os.path.join(args.work, 'result-%s.json' % phase)
    vars_file = os.path.join(args.work, 'vars-%s.json' % phase)
    if os.path.exists(result_file):
        os.unlink(result_file)
    with open(vars_file, 'w') as f:
        json.dump(dict(extra_vars, gpu_check_phase=phase, gpu_check_result=os.path.abspath(result_file),
                       ansible_python_interpreter=host.interpreter), f)
    argv = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', 'localhost,', '-c', 'local',
            '-e', '@' + vars_file, os.path.join(HERE, 'check.yml')]
    started = time.monotonic()
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                          timeout=timeout, check=False)
    with open(os.path.join(args.out, 'ansible.log'), 'a') as log:
        log.write('### %s: rc %d in %.1f s\n%s\n' % (phase, proc.returncode, time.monotonic() - started, proc.stdout))
    if not os.path.exists(result_file):
        raise CheckFailed('ansible-playbook wrote no results for phase %s (rc %d): %s' % (
            phase, proc.returncode, proc.stdout[-2000:]))
    with open(result_file) as f:
        results = json.load(f)
    results['rc'] = proc.returncode
    return results


IDLE_KEYS = ('index', 'name', 'total_mib', 'v1_used_mib', 'used_mib', 'reserved_mib', 'free_mib', 'processes')


def idle_readings(info):
    return {key: dict((k, gpu.get(k)) for k in IDLE_KEYS) for key, gpu in info['gpus'].items()}


def since(later, earlier):
    """Milliseconds between two wall-clock times, None when either is missing."""
    if later is None or earlier is None:
        return None
    return round((float(later) - float(earlier)) * 1000, 1)


def scenario(host, args, checks, name, ignore_sigterm, term_timeout, signals, status, decoy_pid):
    signal_log = os.path.abspath(os.path.join(args.work, 'holder-%s.signals' % name))
    watch_file = os.path.abspath(os.path.join(args.work, 'watch-%s.json' % name))
    for path in (signal_log, watch_file):
        if os.path.exists(path):
            os.unlink(path)
    holder = [sys.executable, os.path.join(HERE, 'holder.py'), '--mib', str(args.mib), '--signal-log', signal_log]
    holder += host.holder_args + (['--ignore-sigterm'] if ignore_sigterm else [])
    watcher = host.popen([sys.executable, os.path.join(HERE, 'watcher.py'), '--result', watch_file, '--'] + holder)
    holder_pid = None
    try:
        line = read_line(watcher, 150)
        started = json.loads(line) if line else {'error': 'the watcher printed nothing in 150 s'}
        if 'error' in started:
            raise CheckFailed('%s: holder did not start: %s' % (name, started['error']))
        holder_pid = started['holder_pid']
        print('%s: holder %d holds %s MiB (v2 used)' % (name, holder_pid, started['held']['v2_used_mib']))
        play = playbook(host, args, 'reap', {
            'gpu_check_holder_pid': holder_pid, 'gpu_check_patterns': [PATTERN],
            'gpu_check_term_timeout': term_timeout, 'gpu_check_verify_timeout': args.verify_timeout,
            'gpu_check_poll_interval': args.poll_interval}, timeout=150)
        watcher.wait(90)
    finally:
        if holder_pid and watcher.poll() is None:
            host.kill_holder(holder_pid)
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    with open(watch_file) as f:
        watch = json.load(f)
    received = []
    if os.path.exists(signal_log):
        with open(signal_log) as f:
            received = [json.loads(line) for line in f]

    def check(what, ok, detail=None):
        checks.append({'scenario': name, 'check': what, 'ok': bool(ok), 'detail': detail})

    busy, plan, reap, verify = (play.get(k) or {} for k in ('busy', 'plan', 'reap', 'verify'))
    check('gpu_verify fails while the holder runs and names its pid',
          busy.get('clean') is False and 'pid %d ' % holder_pid in busy.get('msg', ''), busy.get('msg'))
    check('the reap plan selects the holder alone', [p['pid'] for p in plan.get('would_stop', [])] == [holder_pid],
          plan.get('would_stop'))
    stopped = [p for p in reap.get('stopped', []) if p['pid'] == holder_pid]
    check('gpu_reap stops the holder with %s' % ' then '.join(signals),
          not reap.get('remaining') and stopped and stopped[0]['signals'] == signals,
          reap.get('msg') or reap.get('stopped'))
    check('gpu_verify passes after the reap', verify.get('clean') is True, verify.get('msg'))
    exit_info = watch.get('exit') or {}
    check('the holder exits with status %d' % status, exit_info.get('status') == status, exit_info.get('status'))
    check('the holder received SIGTERM', bool(received), received)
    check('the memory is back at the idle level', watch.get('released') is not None, watch.get('error'))
    check('the decoy is alive and untouched', host.state(decoy_pid) not in (None, 'Z'), decoy_pid)

    sigterm = received[0]['wall'] if received else None
    released = (watch.get('released') or {}).get('wall')
    return {
        'holder_pid': holder_pid,
        'holder_ignores_sigterm': ignore_sigterm,
        'term_timeout': term_timeout,
        'poll_interval': args.poll_interval,
        'ms': {
            'sigterm_to_exit': since(exit_info.get('wall'), sigterm),
            'exit_to_memory_drop': watch.get('drop_lag_ms'),
            'exit_to_memory_back': watch.get('release_lag_ms'),
            'sigterm_to_memory_back': since(released, sigterm),
            'sigterm_to_verified': since(play.get('verified_at'), sigterm),
            'reap_start_to_exit': since(exit_info.get('wall'), play.get('reap_at')),
            'reap_start_to_memory_back': since(released, play.get('reap_at')),
            'reap_start_to_verified': since(play.get('verified_at'), play.get('reap_at')),
        },
        'gpu_reap': {'elapsed': reap.get('elapsed'), 'stopped': reap.get('stopped'), 'msg': reap.get('msg')},
        'gpu_verify_busy': {k: busy.get(k) for k in ('clean', 'msg', 'dirty')},
        'gpu_verify': {k: verify.get(k) for k in ('clean', 'msg', 'elapsed', 'polls', 'memory_api')},
        'watch': watch,
        'signals_received': received,
    }


def probe():
    """(reason to skip, facts): NVML must initialise and torch must see a CUDA device."""
    import pynvml
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return 'NVML init fails: %s' % e, None
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        facts = {'driver_version': pynvml.nvmlSystemGetDriverVersion(), 'count': pynvml.nvmlDeviceGetCount(),
                 'gpu0': pynvml.nvmlDeviceGetName(handle)}
    finally:
        pynvml.nvmlShutdown()
    # in a child, so that this process never holds a CUDA context
    code = 'import json, torch; print(json.dumps([torch.__version__, torch.cuda.is_available()]))'
    try:
        out = subprocess.run([sys.executable, '-c', code], stdout=subprocess.PIPE, universal_newlines=True,
                             timeout=120, check=False).stdout
        facts['torch'], available = json.loads(out.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        return 'torch could not be imported', facts
    if not available:
        return 'torch.cuda is not available', facts
    return None, facts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--mode', choices=['real', 'sim'], default='real')
    parser.add_argument('--out', required=True)
    parser.add_argument('--work', required=True)
    parser.add_argument('--mib', type=int, default=40960)
    parser.add_argument('--poll-interval', type=float, default=0.1, help='gpu_verify poll_interval after the reap')
    parser.add_argument('--verify-timeout', type=float, default=60, help='gpu_verify timeout after the reap')
    parser.add_argument('--sim-release-lag-ms', type=int, help='release lag of the simulated node (its default when unset)')
    parser.add_argument('--sim-ghost-mib', type=int, help='memory the simulated GPU keeps with no process (a failing run)')
    args = parser.parse_args()
    args.out, args.work = os.path.abspath(args.out), os.path.abspath(args.work)
    # a timeout's SIGTERM unwinds through the finally blocks, which stop what was started
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit('stopped by SIGTERM'))
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.work, exist_ok=True)
    if os.path.exists(os.path.join(args.out, 'ansible.log')):
        os.unlink(os.path.join(args.out, 'ansible.log'))
    started = time.monotonic()
    report = {'skipped': False, 'mode': args.mode, 'host': os.uname()[1], 'mib': args.mib, 'pattern': PATTERN,
              'started': time.strftime('%Y-%m-%dT%H:%M:%S%z'), 'ok': False, 'checks': [], 'scenarios': {}}

    if args.mode == 'real':
        reason, report['probe'] = probe()
        if reason:
            print('no NVIDIA GPU: skipped (%s)' % reason)
            report.update(skipped=True, reason=reason, ok=True)
            return finish(args, report, started)
        host = Host(args.work)
    else:
        host = SimHost(args.work, args.sim_release_lag_ms)
        if args.sim_ghost_mib:
            host.sb.node.set_ghost(0, args.sim_ghost_mib)
        state = host.sb.node.describe()
        report['sim'] = {'release_lag_ms': int(state['config'].get('release_lag_ms', 0)),
                         'reserved_mib': state['gpus'][0]['reserved_mib']}

    decoy = None
    try:
        idle = playbook(host, args, 'idle', {}, timeout=150)['info']
        if not idle or idle.get('failed'):
            raise CheckFailed('gpu_info failed on the idle GPUs: %s' % (idle or {}).get('msg'))
        report['idle'] = idle_readings(idle)
        report['driver_version'] = idle.get('driver_version')
        report['memory_api'] = idle.get('memory_api')
        print('idle: %s' % json.dumps(report['idle']))
        decoy = host.popen([sys.executable, os.path.join(HERE, 'decoy.py'), '/dev/nvidiactl'])
        line = read_line(decoy, 60) or ''
        if not line.startswith('ready '):
            raise CheckFailed('the decoy did not start: %r' % line)
        decoy_pid = int(line.split()[1])
        for name, ignore, term_timeout, signals, status in SCENARIOS:
            result = scenario(host, args, report['checks'], name, ignore, term_timeout, signals, status, decoy_pid)
            report['scenarios'][name] = result
            print('%s: %s' % (name, json.dumps(result['ms'])))
        report['ok'] = all(c['ok'] for c in report['checks'])
    except (CheckFailed, subprocess.TimeoutExpired) as e:
        report['error'] = str(e)
    finally:
        if decoy is not None and decoy.poll() is None:
            decoy.kill()
            decoy.wait()
        host.close()
    for c in report['checks']:
        print('%s  %s: %s' % ('ok  ' if c['ok'] else 'FAIL', c['scenario'], c['check']))
    if report.get('error'):
        print('error: %s' % report['error'])
    return finish(args, report, started)


def finish(args, report, started):
    report['seconds'] = round(time.monotonic() - started, 1)
    path = os.path.join(args.out, 'gpu-check.json')
    with open(path, 'w') as f:
        json.dump(report, f, indent=1)
    print('%s in %.1f s; results in %s' % ('passed' if report['ok'] else 'FAILED', report['seconds'], path))
    return 0 if report['ok'] else 1


if __name__ == '__main__':
    sys.exit(main())
