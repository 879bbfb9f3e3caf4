# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The per-host lock of a gpuops run: one file holding its owner's record, in a directory only root can enter.

    lock = HostLock("/run/gpuops")
    lock.acquire({"run": "20260101T000000Z-42", "playbook": "...", ...}, max_age=21600)
    ...
    lock.check("20260101T000000Z-42")     # before each step that must run under the lock
    lock.release("20260101T000000Z-42")

Every reading and change of the lock happens under flock(2) on the directory, held for the few
microseconds a call takes and released by the kernel when the process ends, so it never goes stale
itself. The lock file is created with its complete record already in it (link(2) of a written
file: no moment where the lock exists without an owner) and a stale one is replaced by rename(2),
then read back. Age is judged by the host's boot-time clock (CLOCK_BOOTTIME, which no clock step moves and
which counts suspended time) when the record was taken in this boot (the kernel's boot_id): a record of an earlier
boot is stale, since no run outlives a reboot. A record without them (an earlier release's) is judged by the wall
clock, the host time in the record.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import time

from ansible_collections.gpuops.host.plugins.module_utils._writers import writers

LOCK_FILE = "lock.json"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
# A record this many seconds in the future cannot come from a run on this host's clock.
FUTURE_TOLERANCE = 60.0


class LockError(Exception):
    """The lock directory cannot be trusted or used."""


class LockHeld(Exception):
    """Another run holds the lock."""

    def __init__(self, path: str, owner: dict, age: float, max_age: float):
        self.path, self.owner, self.age, self.max_age = path, owner, age, max_age
        super().__init__(
            "Another gpuops run holds the lock %s on this host: %s, taken %d s ago by this host's clock. Wait for it "
            "to finish; if that run is dead, remove %s, or wait until the lock is older than %d s (its max_age)."
            % (path, describe(owner), age, path, max_age))


class LockLost(Exception):
    """The run that took the lock no longer holds it: another run took it over, or it was removed."""

    def __init__(self, path: str, run: str, owner, age):
        self.path, self.run, self.owner, self.age = path, run, owner, age
        if owner is None:
            now = "nobody holds it now (the lock file was removed)"
        else:
            now = "it is now held by %s, taken %d s ago by this host's clock" % (describe(owner), age)
        super().__init__(
            "This run (%s) no longer holds the lock %s on this host: %s. Another controller may have broken the lock "
            "as stale (its max_age); stopping before this run acts on the host again." % (run, path, now))


def describe(owner: dict) -> str:
    """The holder of a lock in words."""
    if not owner.get("run"):
        return "a run whose record cannot be read"
    words = ["run %s" % owner["run"]]
    if owner.get("playbook"):
        words.append("(%s)" % owner["playbook"])
    who = [part for part in (
        "by %s" % owner["user"] if owner.get("user") else "",
        "from %s" % owner["controller"] if owner.get("controller") else "",
        "controller PID %s" % owner["controller_pid"] if owner.get("controller_pid") else "",
    ) if part]
    if who:
        words.append(", ".join(who))
    return " ".join(words)


def boot_clock():
    """(boot_id, seconds since boot by CLOCK_BOOTTIME) of this host; boot_id None where it cannot be read."""
    try:
        with open(BOOT_ID) as f:
            boot_id = f.read().strip() or None
    except (IOError, OSError):
        boot_id = None
    return boot_id, time.clock_gettime(time.CLOCK_BOOTTIME)


def check_parents(path: str, uid: int) -> None:
    """Raise LockError where a directory on the way to the lock directory PATH can be changed by a user other than
    root and UID: that user would rename the lock directory away, or put another at its name, between two calls. A
    sticky directory (/run/lock) is safe for the entries it holds of root's."""
    found = writers(os.path.dirname(os.path.abspath(path)), set([0, uid]))
    if found:
        raise LockError("The lock directory %s is in a directory that another user can change: %s; refusing to use it. "
                        "Choose a lock directory under one that only root can write (the default, /run/gpuops)."
                        % (path, "; ".join("%s is %s" % entry for entry in found)))


def check_directory(path: str, uid: int) -> bool:
    """Whether PATH exists; raise LockError unless it is a real directory of UID that nobody else can enter."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        raise LockError("The lock directory %s is not a directory (a link or a file); refusing to use it." % path)
    if st.st_uid != uid or st.st_mode & 0o077:
        raise LockError(
            "The lock directory %s belongs to UID %d with mode %04o; it must belong to UID %d with mode 0700, so that "
            "no other user can create, hold or remove the lock. Remove it; it is created again."
            % (path, st.st_uid, stat.S_IMODE(st.st_mode), uid))
    return True


class HostLock:
    """The lock in DIRECTORY; CLOCK gives the host's wall-clock time, BOOT its (boot_id, boot-time clock), SLEEP
    waits (all injected for tests)."""

    def __init__(self, directory: str, clock=time.time, sleep=time.sleep, uid: int = None, pid: int = None,
                 guard_timeout: float = 30.0, boot=boot_clock):
        self.directory = directory
        self.path = os.path.join(directory, LOCK_FILE)
        self.clock, self.sleep, self.boot = clock, sleep, boot
        self.uid = os.geteuid() if uid is None else uid
        self.pid = os.getpid() if pid is None else pid
        self.guard_timeout = guard_timeout

    # -- reading --

    def read(self):
        """The record of the lock, None when there is none; {} (with its mtime) when it cannot be read."""
        try:
            with open(self.path) as f:
                text = f.read()
        except FileNotFoundError:
            return None
        try:
            owner = json.loads(text)
            if not isinstance(owner, dict):
                raise ValueError("not an object")
        except ValueError:
            owner = {}
        if not isinstance(owner.get("taken"), (int, float)):
            try:
                owner["taken"] = os.stat(self.path).st_mtime
            except FileNotFoundError:
                return None
        return owner

    def age(self, owner: dict) -> float:
        """Seconds since OWNER took the lock: by the boot-time clock when it took it in this boot, infinite when
        in an earlier boot, else by the wall clock."""
        boot_id, uptime = self.boot()
        if boot_id and owner.get("boot_id"):
            if owner["boot_id"] != boot_id:
                return float("inf")
            if isinstance(owner.get("taken_boottime"), (int, float)):
                return uptime - owner["taken_boottime"]
        return self.clock() - owner["taken"]

    def is_stale(self, owner: dict, max_age: float) -> bool:
        age = self.age(owner)
        return age > max_age or age < -FUTURE_TOLERANCE

    # -- changing --

    def acquire(self, owner: dict, max_age: float, check_mode: bool = False, moved: bool = False) -> dict:
        """Take the lock for OWNER (a dict with at least "run"); raise LockHeld when a live run holds it.

        Returns changed, owner (the record now in force), taken_over (the stale record replaced, or None), and
        moved_aside (where a directory that another user owns or can enter was moved, so it blocks nothing). A
        directory planted again right after it was moved aside fails: MOVED says this call moved one already."""
        check_parents(self.directory, self.uid)
        try:
            exists = check_directory(self.directory, self.uid)
        except LockError:
            # Planted by another user (in a sticky directory anyone can write, such as /run/lock): no run of ours
            # holds it.
            if check_mode:
                return {"changed": True, "owner": self.record(owner), "taken_over": None, "moved_aside": self.directory}
            if moved:
                raise
            aside = self._move_aside()
            result = self.acquire(owner, max_age, moved=True)
            result["moved_aside"] = aside
            return result
        if not exists:
            if check_mode:
                return {"changed": True, "owner": self.record(owner), "taken_over": None}
            self._make_directory()
        with self._guard(shared=check_mode):
            current = self.read()
            if current is not None and current.get("run") == owner["run"]:
                return {"changed": False, "owner": current, "taken_over": None}
            if current is not None and not self.is_stale(current, max_age):
                raise LockHeld(self.path, current, self.age(current), max_age)
            record = self.record(owner)
            if check_mode:
                return {"changed": True, "owner": record, "taken_over": current}
            tmp = self._write(record)
            try:
                if current is None:
                    os.link(tmp, self.path)  # fails when the lock exists: never replaces a record unread
                else:
                    os.rename(tmp, self.path)  # replaces the stale record in one step
            except FileExistsError:
                raise LockHeld(self.path, self.read() or {}, 0.0, max_age) from None
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            now = self.read()
            if now is None or now.get("run") != owner["run"]:
                raise LockHeld(self.path, now or {}, self.age(now) if now else 0.0, max_age)
            return {"changed": True, "owner": now, "taken_over": current}

    def check(self, run: str) -> dict:
        """Raise LockLost unless run RUN still holds the lock. Returns changed (False) and owner (RUN's record)."""
        if not check_directory(self.directory, self.uid):
            raise LockLost(self.path, run, None, None)
        with self._guard(shared=True):
            current = self.read()
        if current is None or current.get("run") != run:
            raise LockLost(self.path, run, current, self.age(current) if current is not None else None)
        return {"changed": False, "owner": current}

    def release(self, run: str, check_mode: bool = False) -> dict:
        """Remove the lock when run RUN holds it; leave another run's lock alone.

        Returns changed, released (whether RUN held it) and owner (the record left in place, or None)."""
        if not check_directory(self.directory, self.uid):
            return {"changed": False, "released": False, "owner": None}
        with self._guard(shared=check_mode):
            current = self.read()
            if current is None or current.get("run") != run:
                return {"changed": False, "released": False, "owner": current}
            if not check_mode:
                os.unlink(self.path)
            return {"changed": True, "released": True, "owner": None}

    def record(self, owner: dict) -> dict:
        """OWNER with the host's own PID and time added."""
        now = self.clock()
        boot_id, uptime = self.boot()
        return dict(owner, host_pid=self.pid, taken=now, boot_id=boot_id, taken_boottime=uptime,
                    taken_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)))

    # -- internals --

    def _move_aside(self) -> str:
        """Rename what another user put at the directory's path (rename(2) moves a link, never its target)."""
        aside = "%s.untrusted-%d-%d" % (self.directory, int(self.clock()), self.pid)
        os.rename(self.directory, aside)
        return aside

    def _make_directory(self) -> None:
        try:
            os.mkdir(self.directory, 0o700)
        except FileExistsError:
            pass
        check_directory(self.directory, self.uid)

    def _write(self, record: dict) -> str:
        tmp = os.path.join(self.directory, ".%s.%d.tmp" % (LOCK_FILE, self.pid))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        return tmp

    def _guard(self, shared: bool = False):
        return _Guard(self.directory, fcntl.LOCK_SH if shared else fcntl.LOCK_EX, self.guard_timeout, self.sleep)


def argument_spec() -> dict:
    """The options of gpuops.host.host_lock; sglang_server's O(lock) takes them, less O(state)."""
    return dict(
        path=dict(type='path', default='/run/gpuops'),
        state=dict(type='str', choices=['present', 'held', 'absent'], default='present'),
        run=dict(type='str', required=True),
        owner=dict(type='dict', default={}),
        max_age=dict(type='int', default=21600),
    )


# What taking, checking or releasing a lock raises: failure() turns each into the module's failure.
ERRORS = (LockHeld, LockLost, LockError, OSError)


def act(lock: HostLock, state: str, run: str, owner: dict = None, max_age: float = 21600,
        check_mode: bool = False) -> dict:
    """STATE (present, held or absent) for RUN on LOCK: host_lock's result, less its path; one of ERRORS."""
    if state == 'present':
        return lock.acquire(dict(owner or {}, run=run), max_age, check_mode)
    if state == 'held':
        return lock.check(run)
    return lock.release(run, check_mode)


def failure(lock: HostLock, error: Exception) -> dict:
    """The message and data of a failure of act() with ERROR: the holder and its age where another run holds it."""
    if isinstance(error, (LockHeld, LockLost)):
        return dict(msg=str(error), lock=lock.path, holder=error.owner,
                    age=None if error.age is None else round(error.age, 1))
    return dict(msg="Cannot use the lock %s: %s" % (lock.path, error), lock=lock.path)


class _Guard:
    """flock(2) on a directory for the duration of a with block."""

    def __init__(self, directory: str, operation: int, timeout: float, sleep):
        self.directory, self.operation, self.timeout, self.sleep = directory, operation, timeout, sleep
        self.fd = None

    def __enter__(self):
        self.fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        waited = 0.0
        while True:
            try:
                fcntl.flock(self.fd, self.operation | fcntl.LOCK_NB)
                return self
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES) or waited >= self.timeout:
                    os.close(self.fd)
                    raise LockError("Cannot take flock on %s within %.0f s: %s"
                                    % (self.directory, waited, e.strerror)) from None
            self.sleep(0.01)
            waited += 0.01

    def __exit__(self, *exc):
        os.close(self.fd)  # closing the descriptor releases the flock
