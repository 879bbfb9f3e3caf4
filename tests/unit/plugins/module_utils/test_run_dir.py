# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A run's directory of secret files (_run_dir), on real files: its mode, group and owner, its files' modes and
owners, and what it refuses - a link at its path, an argument file elsewhere - without touching what a link points
to. The directory is root's: the tests that make one run as root."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.gpuops.host.plugins.module_utils import _run_dir as run_dirs

as_root = pytest.mark.skipif(os.geteuid() != 0, reason='the run directory is root\'s: needs root')
# the server's user and group, which root gives the argument files and the directory's group
SERVER_UID, SERVER_GID = 4242, 4343


def mode_of(path):
    return stat.S_IMODE(os.lstat(str(path)).st_mode)


def owner_of(path):
    st = os.lstat(str(path))
    return st.st_uid, st.st_gid


def planted_link(directory, name, text):
    """A link at DIRECTORY/NAME to a file of mode 0644 holding TEXT, as another user plants one: (link, target)."""
    target = directory / ('%s.target' % name)
    target.write_text(text)
    os.chmod(str(target), 0o644)
    link = directory / name
    os.symlink(str(target), str(link))
    return link, target


@pytest.fixture
def umask():
    """A umask that would leave the group nothing: the modes are set, not left to it."""
    old = os.umask(0o077)
    yield
    os.umask(old)


@as_root
def test_the_directory_is_root_s_mode_0750_with_the_server_s_group_and_its_files_0600(tmp_path, umask):
    run = tmp_path / 'run-1'
    options = {'path': str(run) + '/', 'group': SERVER_GID, 'owner': {'uid': SERVER_UID, 'gid': SERVER_GID}}
    args = str(run / 'secret-args.yaml')
    written = run_dirs.prepare(options, {args: 'api-key: sk-1234\n'}, False, environment='HF_TOKEN=hf_x\n')
    assert written == [args, str(run / 'server.env')]
    assert (mode_of(run), owner_of(run)) == (0o750, (0, SERVER_GID))
    assert (mode_of(args), owner_of(args)) == (0o600, (SERVER_UID, SERVER_GID))
    assert (run / 'secret-args.yaml').read_text() == 'api-key: sk-1234\n'
    # the environment file, which root reads, is root's
    assert (mode_of(run / 'server.env'), owner_of(run / 'server.env')) == (0o600, (0, 0))
    assert (run / 'server.env').read_text() == 'HF_TOKEN=hf_x\n'
    assert sorted(os.listdir(str(run))) == ['secret-args.yaml', 'server.env']


@as_root
def test_the_environment_file_is_the_server_s_user_s_where_environment_owner_says(tmp_path):
    run = tmp_path / 'run-1'
    options = {'path': str(run), 'group': SERVER_GID, 'environment_owner': {'uid': SERVER_UID, 'gid': SERVER_GID}}
    run_dirs.prepare(options, {}, False, environment='A=1\n')
    assert (mode_of(run / 'server.env'), owner_of(run / 'server.env')) == (0o600, (SERVER_UID, SERVER_GID))


def test_a_file_is_written_with_its_mode_and_owner(tmp_path, umask):
    path = tmp_path / 'secret-args.yaml'
    run_dirs.write(str(path), 'api-key: sk-1234\n', os.getuid(), os.getgid())
    assert (mode_of(path), owner_of(path), path.read_text()) == (0o600, (os.getuid(), os.getgid()),
                                                                 'api-key: sk-1234\n')
    assert os.listdir(str(tmp_path)) == ['secret-args.yaml']


def test_a_link_planted_at_a_file_s_name_is_replaced_and_its_target_untouched(tmp_path):
    path, target = planted_link(tmp_path, 'secret-args.yaml', 'the target\n')
    run_dirs.write(str(path), 'api-key: sk-1234\n', os.getuid(), os.getgid())
    assert not path.is_symlink() and path.read_text() == 'api-key: sk-1234\n' and mode_of(path) == 0o600
    assert target.read_text() == 'the target\n' and mode_of(target) == 0o644


@as_root
def test_a_link_planted_in_the_run_directory_is_replaced_and_its_target_untouched(tmp_path):
    run = tmp_path / 'run-1'
    run.mkdir()
    target = tmp_path / 'elsewhere'
    target.write_text('the target\n')
    os.symlink(str(target), str(run / 'server.env'))
    run_dirs.prepare({'path': str(run)}, {}, False, environment='A=1\n')
    assert not (run / 'server.env').is_symlink() and (run / 'server.env').read_text() == 'A=1\n'
    assert target.read_text() == 'the target\n'


def test_a_link_at_the_directory_s_path_is_refused_and_its_target_untouched(tmp_path):
    target = tmp_path / 'elsewhere'
    target.mkdir()
    os.chmod(str(target), 0o755)
    run = tmp_path / 'run-1'
    os.symlink(str(target), str(run))
    args = str(run / 'secret-args.yaml')
    with pytest.raises(run_dirs.RunDirError) as e:
        run_dirs.prepare({'path': str(run), 'group': SERVER_GID}, {args: 'api-key: sk-1234\n'}, False,
                         environment='A=1\n')
    assert str(e.value) == ('%s is a link, not a directory of root\'s: refusing to write the run\'s secret files there'
                            % run)
    assert os.listdir(str(target)) == [] and mode_of(target) == 0o755
    assert owner_of(target) == (os.getuid(), os.getgid())


@as_root
def test_a_directory_of_another_user_is_refused(tmp_path):
    run = tmp_path / 'run-1'
    run.mkdir()
    os.chown(str(run), SERVER_UID, SERVER_GID)
    with pytest.raises(run_dirs.RunDirError) as e:
        run_dirs.prepare({'path': str(run)}, {}, False, environment='A=1\n')
    assert str(e.value).startswith('%s is UID %d\'s, not a directory of root\'s' % (run, SERVER_UID))
    assert os.listdir(str(run)) == [] and owner_of(run) == (SERVER_UID, SERVER_GID)


@pytest.mark.parametrize('name', ['elsewhere/secret-args.yaml', 'run-1/sub/secret-args.yaml'])
def test_an_argument_file_outside_the_directory_is_refused_before_anything_is_made(tmp_path, name):
    run = tmp_path / 'run-1'
    inside = str(run / 'secret-args.yaml')
    outside = str(tmp_path / name)
    with pytest.raises(run_dirs.RunDirError) as e:
        run_dirs.prepare({'path': str(run)}, {inside: 'a: 1\n', outside: 'api-key: sk-1234\n'}, False)
    assert str(e.value).startswith('the argument file %s is not in the run directory %s' % (outside, run))
    assert os.listdir(str(tmp_path)) == []


def test_check_mode_writes_nothing_and_lists_the_paths(tmp_path):
    run = tmp_path / 'run-1'
    args = str(run / 'secret-args.yaml')
    written = run_dirs.prepare({'path': str(run), 'group': SERVER_GID}, {args: 'api-key: sk-1234\n'}, True,
                               environment='A=1\n')
    assert written == [args, str(run / 'server.env')]
    assert os.listdir(str(tmp_path)) == []


def test_without_an_environment_only_the_argument_files_are_listed(tmp_path):
    run = tmp_path / 'run-1'
    args = str(run / 'config.yaml')
    assert run_dirs.prepare({'path': str(run)}, {args: 'port: 30000\n'}, True) == [args]


# -- the directories of the server (directories): its state directory, its runs, its log directory ---------------

@as_root
def test_directories_are_made_with_their_parents_root_s_mode_0750_of_their_group(tmp_path, umask):
    runs = tmp_path / 'state' / 'runs'
    logs = tmp_path / 'logs'
    made = run_dirs.directories([{'path': str(runs), 'group': SERVER_GID}, {'path': str(logs) + '/', 'group': None}],
                                False)
    assert made == [str(runs), str(logs)]
    assert (tmp_path / 'state').is_dir() and not (tmp_path / 'state').is_symlink()
    assert (mode_of(runs), owner_of(runs)) == (0o750, (0, SERVER_GID))
    assert (mode_of(logs), owner_of(logs)) == (0o750, (0, 0))
    # made again, nothing is new
    assert run_dirs.directories([{'path': str(runs), 'group': SERVER_GID}], False) == []


@as_root
def test_an_existing_directory_keeps_its_group_where_none_is_given(tmp_path):
    state = tmp_path / 'state'
    state.mkdir()
    os.chown(str(state), 0, SERVER_GID)
    os.chmod(str(state), 0o755)
    assert run_dirs.directories([{'path': str(state), 'group': None}], False) == []
    assert (mode_of(state), owner_of(state)) == (0o750, (0, SERVER_GID))


def test_a_link_at_a_directory_s_path_is_refused_and_its_target_untouched(tmp_path):
    target = tmp_path / 'elsewhere'
    target.mkdir()
    os.chmod(str(target), 0o755)
    state = tmp_path / 'state'
    os.symlink(str(target), str(state))
    with pytest.raises(run_dirs.RunDirError) as e:
        run_dirs.directories([{'path': str(state), 'group': SERVER_GID}], False)
    assert str(e.value).startswith('%s is a link, not a directory of root\'s' % state)
    assert state.is_symlink() and os.readlink(str(state)) == str(target)
    assert os.listdir(str(target)) == [] and mode_of(target) == 0o755
    assert owner_of(target) == (os.getuid(), os.getgid())


@as_root
def test_a_directory_of_another_user_is_refused_as_it_is(tmp_path):
    state = tmp_path / 'state'
    state.mkdir()
    os.chmod(str(state), 0o755)
    os.chown(str(state), SERVER_UID, SERVER_GID)
    with pytest.raises(run_dirs.RunDirError) as e:
        run_dirs.directories([{'path': str(state), 'group': 0}], False)
    assert str(e.value).startswith('%s is UID %d\'s, not a directory of root\'s' % (state, SERVER_UID))
    assert (mode_of(state), owner_of(state)) == (0o755, (SERVER_UID, SERVER_GID))


def test_check_mode_makes_nothing_and_lists_the_missing_directories(tmp_path):
    state = tmp_path / 'state'
    state.mkdir()
    os.chmod(str(state), 0o755)
    runs = state / 'runs'
    logs = tmp_path / 'log' / 'sglang'
    made = run_dirs.directories([{'path': str(state), 'group': SERVER_GID}, {'path': str(runs), 'group': SERVER_GID},
                                 {'path': str(logs), 'group': None}], True)
    assert made == [str(runs), str(logs)]
    assert os.listdir(str(tmp_path)) == ['state'] and os.listdir(str(state)) == []
    assert (mode_of(state), owner_of(state)) == (0o755, (os.getuid(), os.getgid()))


def test_the_log_file_is_made_0600_and_an_existing_one_keeps_its_lines(tmp_path):
    path = str(tmp_path / 'server.log')
    assert run_dirs.log_file(path, check_mode=True) is True and not os.path.exists(path)
    assert run_dirs.log_file(path, check_mode=False) is True
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with open(path, 'w') as f:
        f.write('server_args=...\n')
    os.chmod(path, 0o644)
    assert run_dirs.log_file(path, check_mode=False) is False
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with open(path) as f:
        assert f.read() == 'server_args=...\n'


def test_a_link_at_the_log_file_is_refused_and_its_target_untouched(tmp_path):
    link, target = planted_link(tmp_path, 'server.log', 'theirs\n')
    with pytest.raises(run_dirs.RunDirError, match='cannot open the server log'):
        run_dirs.log_file(str(link), check_mode=False)
    assert target.read_text() == 'theirs\n' and stat.S_IMODE(os.stat(str(target)).st_mode) == 0o644
