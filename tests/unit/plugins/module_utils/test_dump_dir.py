# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The run directory of the dumps, on real directories (the tests run as root, as the module does)."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.gpuops.host.plugins.module_utils._dump_dir import DumpDir, DumpDirError, check_root

NOBODY = 65534
USER, GROUP = 1001, 2001

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="makes directories of other users, as root does")


@pytest.fixture
def root(tmp_path):
    path = tmp_path / "dumps"
    path.mkdir(mode=0o755)
    return path


def test_the_run_directory_is_made_for_the_server_user_and_the_dump_group(root):
    result = DumpDir(str(root), "extraction-1", USER, GROUP).create()

    st = os.lstat(root / "extraction-1")
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (USER, GROUP, 0o2750)
    assert result["changed"] and result["path"] == str(root / "extraction-1") and result["mode"] == "2750"


def test_check_mode_checks_and_makes_nothing(root):
    result = DumpDir(str(root), "extraction-1", USER, GROUP).create(check_mode=True)

    assert result["changed"] and os.listdir(root) == []


@pytest.mark.parametrize("kind", ["directory", "link", "fifo", "file"])
def test_anything_at_the_name_fails_and_is_neither_used_nor_followed(root, tmp_path, kind):
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    entry = root / "planted"
    if kind == "directory":
        entry.mkdir()
    elif kind == "link":
        entry.symlink_to(target)
    elif kind == "fifo":
        os.mkfifo(entry)
    else:
        entry.write_text("")

    with pytest.raises(DumpDirError, match="/planted already exists .*earlier dumps are never overwritten") as e:
        DumpDir(str(root), "planted", USER, GROUP).create()

    if kind == "link":
        assert "a symbolic link to %s" % target in str(e.value)
    st = os.stat(target)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o700) and os.listdir(target) == []


def test_a_name_planted_between_the_check_and_the_mkdir_fails_the_creation(root, tmp_path):
    class Racing(DumpDir):
        def _entry(self, fd):
            found = super()._entry(fd)
            if found is None and not os.path.lexists(root / "late"):
                os.symlink(tmp_path, root / "late")      # what another user would plant right after the check
            return found

    with pytest.raises(DumpDirError, match="/late already exists .*a symbolic link"):
        Racing(str(root), "late", USER, GROUP).create()
    assert stat.S_IMODE(os.stat(tmp_path).st_mode) != 0o2750


@pytest.mark.parametrize("mode, owner, message", [
    (0o777, 0, "belongs to UID 0 with mode 0777: another user could plant"),
    (0o775, 0, "belongs to UID 0 with mode 0775"),
    (0o1777, 0, "belongs to UID 0 with mode 1777"),
    (0o755, NOBODY, "belongs to UID 65534 with mode 0755"),
])
def test_a_dump_root_that_another_user_can_change_is_refused(root, mode, owner, message):
    os.chown(root, owner, 0)
    os.chmod(root, mode)

    with pytest.raises(DumpDirError, match=message):
        DumpDir(str(root), "run", USER, GROUP).create()
    assert os.listdir(root) == []


def test_a_dump_root_of_the_server_user_is_accepted(root):
    os.chown(root, USER, USER)

    DumpDir(str(root), "run", USER, GROUP).create()

    assert os.path.isdir(root / "run")


def test_a_directory_above_the_root_that_others_can_write_is_refused_unless_sticky(tmp_path):
    above = tmp_path / "shared"
    above.mkdir()
    (above / "dumps").mkdir(mode=0o755)
    os.chmod(above, 0o777)
    with pytest.raises(DumpDirError, match="/shared belongs to UID 0 with mode 0777"):
        check_root(str(above / "dumps"), USER)

    os.chmod(above, 0o1777)
    assert check_root(str(above / "dumps"), USER) == str(above / "dumps")


def test_a_link_to_the_root_counts_only_where_nobody_else_could_have_planted_it(root, tmp_path):
    trusted = tmp_path / "trusted"
    trusted.mkdir(mode=0o755)
    (trusted / "dumps").symlink_to(root)
    assert check_root(str(trusted / "dumps"), USER) == str(root)

    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)          # /tmp-like: anyone may have made the link
    (shared / "dumps").symlink_to(root)
    os.lchown(shared / "dumps", NOBODY, NOBODY)
    with pytest.raises(DumpDirError, match="/shared/dumps is a symbolic link to .*, owned by UID 65534: only root"):
        check_root(str(shared / "dumps"), USER)
    os.lchown(shared / "dumps", 0, 0)
    assert check_root(str(shared / "dumps"), USER) == str(root)


def test_a_missing_root_a_relative_root_and_a_full_root_are_refused(root):
    with pytest.raises(DumpDirError, match="is not a directory on this host .is its volume mounted"):
        DumpDir(str(root / "absent"), "run", USER, GROUP).create()
    with pytest.raises(DumpDirError, match="not an absolute path"):
        DumpDir("dumps", "run", USER, GROUP).create()
    with pytest.raises(DumpDirError, match=r"GB free, less than the 1e\+15 GB asked for"):
        DumpDir(str(root), "run", USER, GROUP).create(min_free_gb=1e15)
    assert os.listdir(root) == []


@pytest.mark.parametrize("name", ["", "../etc", "a/b", ".hidden", "a\nb", ".."])
def test_a_name_that_is_not_plain_is_refused(root, name):
    with pytest.raises(DumpDirError, match="is not a plain name"):
        DumpDir(str(root), name, USER, GROUP)


def test_remove_takes_only_an_empty_directory(root, tmp_path):
    DumpDir(str(root), "empty", USER, GROUP).create()
    DumpDir(str(root), "full", USER, GROUP).create()
    (root / "full" / "hs_1.pt").write_bytes(b"dump")
    (root / "link").symlink_to(tmp_path)

    assert DumpDir(str(root), "empty", USER, GROUP).remove_if_empty()["removed"]
    kept = DumpDir(str(root), "full", USER, GROUP).remove_if_empty()
    linked = DumpDir(str(root), "link", USER, GROUP).remove_if_empty()
    again = DumpDir(str(root), "empty", USER, GROUP).remove_if_empty()

    assert not os.path.exists(root / "empty") and (root / "full" / "hs_1.pt").read_bytes() == b"dump"
    assert (kept["removed"], kept["kept"]) == (False, "it holds 1 entries")
    assert not linked["removed"] and "a symbolic link to" in linked["kept"] and os.path.isdir(tmp_path)
    assert (again["changed"], again["removed"], again["kept"]) == (False, False, None)
