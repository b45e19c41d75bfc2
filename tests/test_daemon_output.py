"""What a person sees through the daemon (the default path once one runs) is what the in-process
CLI shows: `--print id` alone, colour on a terminal unless NO_COLOR, the read grouped. A real
`memstore serve`, real CLI calls on a pseudo-terminal."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import run_on_tty
from daemonworld import Env, running_world

from memstore.surfaces.output import SGR_CODES

pytestmark = [pytest.mark.model, pytest.mark.slow]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    yield from running_world(tmp_path_factory, "output", {"repo_a": "alpha"})


def _served(world: Env) -> int:
    return int(world.status()["requests"])


def test_print_id_through_the_daemon_is_the_bare_id(world: Env) -> None:
    before = _served(world)
    rc, out, err = world.cli("write", "--kind", "fact", "--text", "Nightly builds run on the arm64 runners.",
                             "--evidence", "user:ops", "--allow-duplicate", "--print", "id",
                             cwd=world.repo_a)  # type: ignore[attr-defined]
    assert rc == 0 and isinstance(out, str) and len(out) == 26 and out.isalnum(), (out, err)
    assert _served(world) > before  # answered by the daemon, not in-process
    rc, shown, _ = world.cli("show", out, cwd=world.repo_a)  # type: ignore[attr-defined]
    assert rc == 0 and shown["memory"]["id"] == out


def test_a_read_on_a_terminal_through_the_daemon_is_coloured_unless_no_color(world: Env) -> None:
    query = ["read", "sqlite migration fails because the column already exists"]
    before = _served(world)
    rc, shown, _ = run_on_tty(query, cwd=world.repo_a, env=world.env())  # type: ignore[attr-defined]
    text = shown.decode()
    assert rc == 0 and _served(world) > before
    assert "\x1b[" in text and "Current code is ground truth" not in text
    plain = text
    for code in SGR_CODES:
        plain = plain.replace(code, "")
    assert plain.startswith("Groups best first") and "\n  solution " in plain, plain[:400]
    rc, shown, _ = run_on_tty(query, cwd=world.repo_a, env=world.env(NO_COLOR="1"))  # type: ignore[attr-defined]
    assert rc == 0 and b"\x1b" not in shown and shown.decode().startswith("Groups best first")
