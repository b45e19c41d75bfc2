"""`read --explain` / `--expect` through a real `memstore serve`: the flags cross the wire, the
daemon answers them, and the answer is the one the same read gets in process."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from daemonworld import Env, running_world

pytestmark = [pytest.mark.model, pytest.mark.slow]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    yield from running_world(tmp_path_factory, "explain", {"repo_a": "alpha"})


def _steady(answer: dict[str, Any]) -> dict[str, Any]:
    return {**answer, "stats": {**answer["stats"], "elapsed_ms": 0}}


def test_explain_and_expect_through_the_daemon_match_in_process(world: Env) -> None:
    ids = world.ids_a  # type: ignore[attr-defined]
    args = ("read", "sqlite migration fails because column already exists", "--explain",
            "--expect", ids["pref"][:12], "--expect", ids["solution"][:12])
    before = world.status()["requests"]
    rc_d, via_daemon, err_d = world.cli(*args, cwd=world.repo_a)  # type: ignore[attr-defined]
    assert rc_d == 0, err_d
    assert world.status()["requests"] >= before + 1
    rc_p, in_process, err_p = world.cli(*args, cwd=world.repo_a, MEMSTORE_DAEMON="0")  # type: ignore[attr-defined]
    assert rc_p == 0, err_p
    assert _steady(via_daemon) == _steady(in_process)
    assert all("explain" in r for r in via_daemon["results"])
    expected = {e["id"]: e for e in via_daemon["expected"]}
    assert expected[ids["solution"]]["returned"] and not expected[ids["pref"]]["returned"]
    rc, err, _ = world.cli("read", "q", "--expect", "01zzzzzzzzzzzz", cwd=world.repo_a)  # type: ignore[attr-defined]
    assert rc == 3 and err["error"]["code"] == "not_found"
