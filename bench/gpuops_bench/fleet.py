# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fleet scaling with the controller as the only bottleneck: restart_extraction.yml over 1, 8, 16 and
32 light nodes (one process per node: gpusim.lightnode), and Ansible settings compared on the
largest fleet; optionally an older commit of the collection run beside the working tree at every size."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import threading

from .common import RECOMMENDED_CFG, REPO, WORK, collections_path, log, ratio, summary
from .nodes import PLAYBOOKS, BenchFleet, BenchNode

PLAYBOOK = "restart_serving.yml"
# Settings compared against bench/ansible.cfg (forks 32, pipelining, gathering explicit), as
# environment overrides of it; 'defaults' is an empty ansible.cfg.
SETTINGS = {
    "recommended": {},
    "no pipelining": {"ANSIBLE_PIPELINING": "false"},
    "forks 4": {"ANSIBLE_FORKS": "4"},
    "strategy free": {"ANSIBLE_STRATEGY": "free"},
    "defaults": None,
}
DEFINITION = (
    "N light nodes (gpusim.lightnode: one process per node with the stand-in's parser, endpoints, memory on 8 "
    "GPUs registered with the NVML double and SGLang 0.5.23's shutdown pace: 5 s watchdog wake-up, ~1 s release), "
    "each a sandbox of its own, in one gpu_nodes group; one run of playbooks/{playbook} with "
    "gpuops_canary=false (all N in one batch) and a new --random-seed each run restarts every node into serving mode (extraction mode checks that "
    "every scheduler process sees the dump directory, and a light node has no scheduler processes). Wall time of "
    "ansible-playbook; controller CPU = CPU seconds of the ansible-playbook process tree (getrusage, children) "
    "less the CPU of the nodes' Python interpreters (each wrapped to add its own `times`); per node = / N. "
    "Settings: bench/ansible.cfg "
    "(recommended) and overrides of it; 'defaults' = an empty ansible.cfg.")


class Collection:
    """A collections root whose gpuops.host is LABEL's, and the directory of that collection's playbooks."""

    def __init__(self, label, root, playbooks, commit=None):
        self.label, self.root, self.playbooks, self.commit = label, root, playbooks, commit

    def env(self):
        """What points ansible-playbook (and the Python it starts) at this collection."""
        return {"ANSIBLE_COLLECTIONS_PATH": self.root, "PYTHONPATH": self.root}

    def playbook(self, name):
        return os.path.join(self.playbooks, name)


def _git(*args):
    out = subprocess.run(["git", "-C", REPO] + list(args), capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError("git %s: %s" % (" ".join(args), out.stderr.strip()))
    return out.stdout.strip()


def _link(path, target):
    """A symbolic link PATH -> TARGET, replacing whatever link was there."""
    if os.path.islink(path) and os.readlink(path) == target:
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.unlink(path)
    os.symlink(target, path)


def baseline(rev):
    """The collection at git revision REV as a Collection: its tree exported once with `git archive` (the
    repository's work tree, index and worktrees are left alone) to build/bench/baseline-<sha>/tree, and a
    collections root beside it whose gpuops.host is that tree and whose other collections are links to those of
    the working tree's root, so that only gpuops.host differs."""
    commit = _git("rev-parse", "--verify", "--end-of-options", "%s^{commit}" % rev)
    short = _git("rev-parse", "--short", commit)
    base = os.path.join(WORK, "baseline-%s" % short)
    tree = os.path.join(base, "tree")
    if not os.path.isdir(tree):
        partial = tree + ".partial"
        shutil.rmtree(partial, ignore_errors=True)
        os.makedirs(partial)
        archive = subprocess.Popen(["git", "-C", REPO, "archive", commit], stdout=subprocess.PIPE)
        untar = subprocess.run(["tar", "-x", "-C", partial], stdin=archive.stdout, check=False)
        archive.stdout.close()
        if archive.wait() or untar.returncode:
            raise RuntimeError("git archive %s | tar -x: rc %s, %s" % (rev, archive.returncode, untar.returncode))
        os.rename(partial, tree)
    current = os.path.join(collections_path(), "ansible_collections")
    root = os.path.join(base, "collections")
    for namespace in sorted(os.listdir(current)):
        for name in sorted(os.listdir(os.path.join(current, namespace))):
            target = tree if (namespace, name) == ("gpuops", "host") else os.path.join(current, namespace, name)
            _link(os.path.join(root, "ansible_collections", namespace, name), target)
    return Collection("baseline %s" % short, root, os.path.join(tree, "playbooks"), commit=commit)


def _start_all(nodes):
    errors = []

    def start(node):
        try:
            node.start()
        except Exception as e:  # pylint: disable=broad-except
            errors.append("%s: %s" % (node.name, e))

    threads = [threading.Thread(target=start, args=(n,)) for n in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError("light servers did not start: %s" % "; ".join(errors)[:3000])


def _one(fleet, n, setting, tag, seed, collection=None):
    """One run; SEED changes the servers' arguments, so that every node restarts (the roles leave a server that
    already runs with the requested configuration alone). COLLECTION (a Collection): whose collection and
    playbook run, with bench/ansible.cfg where SETTING is not one of SETTINGS; by default the working tree's."""
    overrides = SETTINGS.get(setting, {})
    fleet.config = RECOMMENDED_CFG if overrides is not None else default_cfg()
    fleet.extra_env = dict(overrides or {}, **(collection.env() if collection else {}))
    args = {"tp_size": fleet.nodes[0].gpus, "enable_metrics": True, "random_seed": seed}
    result = fleet.run(collection.playbook(PLAYBOOK) if collection else PLAYBOOK,
                       {"gpuops_canary": False, "sglang_launch_server_args": args}, tag=tag)
    row = {"nodes": n, "setting": setting, "rc": result["rc"], "wall": round(result["wall"], 3),
           "controller_cpu": round(result["controller_cpu"], 3), "node_cpu": round(result["node_cpu"], 3),
           "main_cpu": round(result["main_cpu"], 3),
           "cpu": round(result["cpu"], 3)}
    # Hosts the run left unchanged (it should restart every one).
    row["unchanged_hosts"] = len(re.findall(r"^\S+\s+: ok=\d+\s+changed=0\s", result["output"], re.M))
    if result["rc"] != 0 or row["unchanged_hosts"]:
        row["output_tail"] = result["output"][-3000:]
    if result["rc"] != 0:
        failed = re.search(r"^(?:fatal|failed): .*$", result["output"], re.M)
        row["error"] = (failed.group(0) if failed else result["output"].strip().split("\n")[-1])[:1000]
    return row


def default_cfg():
    from .common import default_cfg as make

    return make()


def run(rounds=1, sizes=(1, 8, 16, 32), compare_at=8, settings=None, baseline_rev=None):
    """BASELINE_REV: a git revision whose collection runs beside the working tree's at every size, with
    bench/ansible.cfg, on the same nodes and in the same rounds (see `baseline`)."""
    compare_at = compare_at if compare_at in sizes else max(sizes)
    settings = [s for s in SETTINGS if settings is None or s in settings]
    collections = {}
    if baseline_rev:
        old = baseline(baseline_rev)
        collections = {"recommended": Collection("recommended", collections_path(), PLAYBOOKS), old.label: old}
        log("fleet: baseline %s (%s) exported, collections root %s" % (baseline_rev, old.commit, old.root))
    samples = []
    with contextlib.ExitStack() as stack:
        nodes = []
        for i in range(max(sizes)):
            node = BenchNode(os.path.join(WORK, "nodes", "light%02d" % (i + 1)), light=True)
            nodes.append(stack.enter_context(node))
        _start_all(nodes)
        log("fleet: %d light nodes up" % len(nodes))
        seed = 0
        for r in range(rounds):
            plan = [(n, s) for n in sizes for s in collections or ["recommended"]]
            plan += [(compare_at, s) for s in settings if s != "recommended"]
            if r % 2:
                plan.reverse()
            for n, setting in plan:
                fleet = BenchFleet(os.path.join(WORK, "scaling-%d" % n), nodes[:n])
                seed += 1
                row = _one(fleet, n, setting, "%d-%s-%d" % (n, setting.replace(" ", "_"), r), seed,
                           collections.get(setting))
                samples.append(row)
                log("fleet: %2d nodes, %-14s round %d: %s" % (n, setting, r + 1, "rc %d" % row["rc"] if row["rc"]
                    else "%.1f s wall, controller %.1f CPU s (%.2f per node), nodes %.1f CPU s" % (
                        row["wall"], row["controller_cpu"], row["controller_cpu"] / n, row["node_cpu"])))
    rows = []
    for key in sorted({(s["nodes"], s["setting"]) for s in samples}):
        ss = [s for s in samples if (s["nodes"], s["setting"]) == key and s["rc"] == 0]
        n = key[0]
        rows.append({"nodes": n, "setting": key[1], "config": key[1], "runs": "%d/%d" % (len(ss), sum(
            1 for s in samples if (s["nodes"], s["setting"]) == key)),
            "wall_s": summary([s["wall"] for s in ss]),
            "controller_cpu_s": summary([s["controller_cpu"] for s in ss]),
            "controller_cpu_per_node_s": summary([s["controller_cpu"] / n for s in ss]),
            "main_cpu_s": summary([s["main_cpu"] for s in ss]),
            "node_cpu_per_node_s": summary([s["node_cpu"] / n for s in ss])})
    one = dict((r["setting"], r["wall_s"]["median"]) for r in rows if r["nodes"] == 1)
    for row in rows:        # a baseline's against its own one node
        row["wall_vs_one_node"] = ratio(row["wall_s"]["median"], one.get(
            row["setting"] if row["setting"] not in SETTINGS else "recommended"))
    result = {"definition": DEFINITION.format(playbook=PLAYBOOK), "rows": rows, "samples": samples,
              "extrapolation": extrapolate(rows)}
    if baseline_rev:
        result["baseline"] = {"rev": baseline_rev, "commit": old.commit, "label": old.label}
        result["against_baseline"] = against_baseline(rows, old.label)
        result["notes"] = baseline_notes(samples, list(collections))
    return result


METRICS = (("wall", "wall_s"), ("controller_cpu_per_node", "controller_cpu_per_node_s"),
           ("node_cpu_per_node", "node_cpu_per_node_s"))


def against_baseline(rows, label):
    """Per size: the medians of METRICS for the baseline (LABEL) and the working tree (recommended), and new /
    baseline."""
    at = {}
    for r in rows:
        at.setdefault(r["nodes"], {})[r["setting"]] = r
    out = []
    for n, by in sorted(at.items()):
        old, new = by.get(label), by.get("recommended")
        if old and new:
            row = {"nodes": n, "runs": {"baseline": old["runs"], "new": new["runs"]}}
            for name, key in METRICS:
                row[name] = {"baseline": old[key]["median"], "new": new[key]["median"],
                             "ratio": ratio(new[key]["median"], old[key]["median"])}
            out.append(row)
    return out


def baseline_notes(samples, labels):
    """The runs of LABELS (the working tree's and the baseline's) that failed or left a host unchanged: a record
    that one version wrote and the other cannot read shows here."""
    out = []
    for s in samples:
        if s["setting"] not in labels or not (s["rc"] or s["unchanged_hosts"]):
            continue
        what = ("rc %d, %s" % (s["rc"], s.get("error", "")) if s["rc"]
                else "%d of the hosts left unchanged (not restarted)" % s["unchanged_hosts"])
        out.append("Fleet, %s at %d nodes: %s." % (
            "the working tree" if s["setting"] == "recommended" else s["setting"], s["nodes"], what))
    return out


def extrapolate(rows, fleet=500, cores=16):
    """On paper: FLEET nodes on a CORES-core controller, from the recommended setting's figures.

    ansible-playbook's main process (the strategy: templating, conditionals, results) runs on one
    core; its forks (one per host of a batch, each running the tasks' connection and module
    transfer) spread over the cores. Per node costs are the marginal ones between the smallest and
    the largest fleet measured, so the fixed start-up cost is counted once."""
    rec = sorted((r for r in rows if r["setting"] == "recommended" and r["wall_s"]["median"]), key=lambda r: r["nodes"])
    if len(rec) < 2:
        return None
    small, large = rec[0], rec[-1]
    extra = large["nodes"] - small["nodes"]
    main = (large["main_cpu_s"]["median"] - small["main_cpu_s"]["median"]) / extra
    workers = ((large["controller_cpu_s"]["median"] - large["main_cpu_s"]["median"])
               - (small["controller_cpu_s"]["median"] - small["main_cpu_s"]["median"])) / extra
    main_s, workers_s = main * fleet, workers * fleet / (cores - 1)
    return {"fleet": fleet, "cores": cores, "from_nodes": [small["nodes"], large["nodes"]],
            "main_cpu_per_node_s": round(main, 3), "worker_cpu_per_node_s": round(workers, 3),
            "main_s": round(main_s, 1), "workers_s": round(workers_s, 1),
            "one_node_wall_s": small["wall_s"]["median"] if small["nodes"] == 1 else None,
            "wall_s_estimate": round(max(main_s, workers_s) + small["wall_s"]["median"], 1)}


def goals(result):
    rows = [r for r in result["rows"] if r["setting"] == "recommended"]
    largest = max(rows, key=lambda r: r["nodes"]) if rows else None
    if not largest or largest["wall_vs_one_node"] is None or largest["nodes"] == 1:
        return []
    x = largest["wall_vs_one_node"]
    return [("fleet of %d light nodes against one node (bench/ansible.cfg)" % largest["nodes"], "<= 2.0x wall",
             "%.2fx (%.1f s against %.1f s)" % (x, largest["wall_s"]["median"], largest["wall_s"]["median"] / x),
             "yes" if x <= 2.0 else "**no** (+%.2fx)" % (x - 2.0))]


def markdown(result):
    out = ["## Fleet scaling: light nodes, the controller as the bottleneck", "", result["definition"], "",
           "| Nodes | Setting | Wall (s) | min-max | vs 1 node | Controller CPU (s) | of it main process (s) | per node (s) "
           "| Nodes' Python CPU per node (s) | Runs |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        w = r["wall_s"]
        out.append("| %d | %s | %s | %s-%s | %s | %s | %s | %s | %s | %s |" % (
            r["nodes"], r["setting"], w["median"], w["min"], w["max"], r["wall_vs_one_node"],
            r["controller_cpu_s"]["median"], r["main_cpu_s"]["median"], r["controller_cpu_per_node_s"]["median"],
            r["node_cpu_per_node_s"]["median"], r["runs"]))
    at = {}
    for r in result["rows"]:
        at.setdefault(r["nodes"], {})[r["setting"]] = r
    for n, settings in sorted(at.items()):
        base = settings.get("recommended")
        others = [s for s in settings if s != "recommended" and s in SETTINGS]
        if base and others and base["wall_s"]["median"]:
            out += ["", "At %d nodes, against bench/ansible.cfg (%.1f s wall, %.1f controller CPU s): %s." % (
                n, base["wall_s"]["median"], base["controller_cpu_s"]["median"], "; ".join(
                    "%s %.2fx the wall time and %.2fx the controller CPU" % (
                        s, settings[s]["wall_s"]["median"] / base["wall_s"]["median"],
                        settings[s]["controller_cpu_s"]["median"] / base["controller_cpu_s"]["median"])
                    for s in others if settings[s]["wall_s"]["median"]))]
    out += _markdown_baseline(result)
    e = result.get("extrapolation")
    if e:
        out += ["", ("On paper, %(fleet)d nodes in one batch on a %(cores)d-core controller: ansible-playbook's main "
                     "process spends %(main_cpu_per_node_s).2f CPU s per extra node on one core (marginal, between "
                     "%(from_nodes)s nodes), %(main_s).0f s for %(fleet)d; its forks spend %(worker_cpu_per_node_s).2f "
                     "CPU s per node, %(workers_s).0f s on the %(cores)d cores less the main one. So about "
                     "%(wall_s_estimate).0f s of wall time (the larger of the two, plus one node's own run), "
                     "against %(one_node_wall_s)s s for one node, provided the controller holds 500 forks "
                     "(memory) and the nodes' own work, here counted apart, runs on the nodes.") % e]
    return out


def _markdown_baseline(result):
    """The working tree against the baseline commit, per size; nothing without one."""
    b = result.get("baseline")
    if not b:
        return []
    out = ["", "### Against the %s" % b["label"], "",
           "The collection at `%s` (`--fleet-baseline %s`, exported with git archive; its own "
           "playbooks/%s) run beside the working tree (commit %s) in the same rounds, on the same nodes with "
           "bench/ansible.cfg, alternating which goes first; medians, new / baseline." % (
               b["commit"], b["rev"], PLAYBOOK, result.get("run", {}).get("commit", "of this run")), "",
           "| Nodes | Wall baseline (s) | Wall new (s) | new / baseline | Controller CPU per node baseline (s) "
           "| new (s) | new / baseline | Nodes' Python CPU per node baseline (s) | new (s) | new / baseline "
           "| Runs baseline, new |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["against_baseline"]:
        cells = [str(r["nodes"])]
        for name, dummy in METRICS:
            cells += ["n/a" if r[name][k] is None else "%.2f" % r[name][k] for k in ("baseline", "new")]
            cells.append("n/a" if r[name]["ratio"] is None else "%.2fx" % r[name]["ratio"])
        out.append("| %s | %s, %s |" % (" | ".join(cells), r["runs"]["baseline"], r["runs"]["new"]))
    return out


def explain(result):
    rows = [r for r in result["rows"] if r["setting"] == "recommended"]
    largest = max(rows, key=lambda r: r["nodes"]) if rows else None
    out = []
    if largest and largest["wall_vs_one_node"] and largest["wall_vs_one_node"] > 2.0:
        one = [r for r in rows if r["nodes"] == 1]
        out.append("Fleet: %d light nodes took %.2fx one node's wall time (goal 2x). The controller runs %d hosts' "
                   "tasks on 2 cores: %.1f CPU s in the controller (%.1f s of it in ansible-playbook's main process, "
                   "which is single-threaded) and %.1f CPU s in the nodes' Python interpreters, all on the same 2 "
                   "cores here, against %.1f s and %.1f s for one node." % (
                       largest["nodes"], largest["wall_vs_one_node"], largest["nodes"],
                       largest["controller_cpu_s"]["median"], largest["main_cpu_s"]["median"],
                       largest["node_cpu_per_node_s"]["median"] * largest["nodes"],
                       one[0]["controller_cpu_s"]["median"] if one else float("nan"),
                       one[0]["node_cpu_per_node_s"]["median"] if one else float("nan")))
    return out
