"""``repo:NAME@SHA:path#La-Lb`` evidence checked against the user's checkout of NAME (``repos:`` in
the global config.yaml), exactly as a ``file:`` citation is against the repo's own work tree.
Real git (the org's shared store on a bare remote, a checkout of the cited service), the real
CLI, one HOME per test (conftest)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import git, make_git_repo, run_on_tty
from test_shared_stores import TEAM, Cli, home_store, make_world

CLAIM = "The svc client retries a refused connection three times, one second apart, then raises."
SOURCE = "import time\n\ndef connect(sock):\n    for _ in range(3):\n        pass\n\nVERSION = 1\n"
QUERY = "svc client retries refused connection"


@pytest.fixture
def world(tmp_path: Path, cli: Cli) -> dict[str, Any]:
    """The shared world (repos A and B, the org's store attached as "team"), a checkout of svc
    whose src/a.py the org's memory cites at L3-L4, that memory merged and synced."""
    w: dict[str, Any] = make_world(tmp_path, cli)
    svc = make_git_repo(tmp_path / "svc")
    (svc / "src" / "a.py").write_text(SOURCE)
    git(svc, "add", "src/a.py")
    git(svc, "commit", "-q", "-m", "client")
    sha = git(svc, "rev-parse", "HEAD").strip()
    ref = f"repo:svc@{sha}:src/a.py#L3-L4"
    w.update(svc=svc, sha=sha, ref=ref, mid=org_memory(w, cli, CLAIM, ref))
    return w


def org_memory(w: dict[str, Any], cli: Cli, text: str, *refs: str) -> str:
    """A memory the org writes in its own store's repository, pushed, and synced here."""
    work = w["work"]
    args = [a for r in refs for a in ("--evidence", r)]
    code, out, err = cli("--store", ".", "write", "--kind", "fact", "--text", text, "--evidence", TEAM, *args,
                         cwd=work)
    assert code == 0, err
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "a memory citing svc")
    git(work, "push", "-q", "origin", "main")
    code, _, err = cli("sync", cwd=w["a"])
    assert code == 0, err
    return str(out["id"])


def configure(svc: Path, config: Path | None = None) -> None:
    """``repos: {svc: PATH}`` appended to a config.yaml (the user's global one by default)."""
    path = config or home_store() / "config.yaml"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(f"\nrepos:\n  svc: {svc}\n")


def hit(cli: Cli, cwd: Path, mid: str) -> dict[str, Any]:
    code, out, err = cli("read", QUERY, cwd=cwd)
    assert code == 0, err
    return next(r for r in out["results"] if r["id"] == mid)


def doubts(result: dict[str, Any]) -> dict[str, str]:
    return {d["doubt"]: d["why"] for d in result["doubts"]}


def commit(svc: Path, text: str, message: str) -> None:
    (svc / "src" / "a.py").write_text(text)
    git(svc, "commit", "-q", "-am", message)


def test_a_cited_line_is_unverified_without_a_checkout_verified_with_one_and_stale_once_it_changes(
        world: dict[str, Any], cli: Cli) -> None:
    b, svc, ref, mid = world["b"], world["svc"], world["ref"], world["mid"]
    first = hit(cli, b, mid)
    assert first["scope"] == "shared:team"
    assert list(doubts(first)) == ["unverified"] and ref in doubts(first)["unverified"]

    configure(svc)
    assert doubts(hit(cli, b, mid)) == {}

    # A commit elsewhere in the file (the version at the bottom, a line added above) moves nothing cited.
    commit(svc, "# client\n" + SOURCE.replace("VERSION = 1", "VERSION = 2"), "bump the version")
    result = hit(cli, b, mid)
    assert doubts(result) == {} and not result.get("stale")

    # A commit that rewrites line 3 makes it stale, the why naming the repo: citation.
    commit(svc, "# client\n" + SOURCE.replace("def connect(sock):", "def connect(sock, retries=5):"),
           "retries are a parameter")
    result = hit(cli, b, mid)
    assert list(doubts(result)) == ["stale"] and ref in doubts(result)["stale"]
    assert result["stale"]["evidence"] == [ref] and result["stale"]["files"] == ["svc:src/a.py"]
    assert result["stale"]["commits_since"] == 2

    # The same on a terminal: the text a person reads says stale, not unverified.
    rc, shown, _ = run_on_tty(["read", QUERY], cwd=b)
    line = next(ln for ln in shown.decode().splitlines() if mid[:10] in ln)
    assert rc == 0 and "stale: verify against the code" in line and "unverified" not in line, line


def test_an_uncommitted_edit_of_the_checkout_is_seen_after_a_cached_answer(world: dict[str, Any], cli: Cli) -> None:
    b, svc, mid = world["b"], world["svc"], world["mid"]
    configure(svc)
    assert doubts(hit(cli, b, mid)) == {}
    cache = home_store() / ".index" / "stale-repo-svc.json"
    assert cache.is_file()  # the answer is kept under the checkout's HEAD
    # Same HEAD, same size: only the work tree's stat tells the cached answer is no longer true.
    (svc / "src" / "a.py").write_text(SOURCE.replace("range(3)", "range(4)"))
    assert list(doubts(hit(cli, b, mid))) == ["stale"]
    git(svc, "checkout", "--", "src/a.py")
    assert doubts(hit(cli, b, mid)) == {}


def test_a_commit_not_fetched_or_a_path_it_lacks_stays_unverified_and_says_why(
        world: dict[str, Any], cli: Cli, tmp_path: Path) -> None:
    b, svc = world["b"], world["svc"]
    # A commit made in another clone of svc, which this checkout has not fetched.
    other = tmp_path / "svc-elsewhere"
    git(tmp_path, "clone", "-q", str(svc), str(other))
    (other / "src" / "b.py").write_text("def b():\n    return 2\n")
    git(other, "add", "src/b.py")
    git(other, "commit", "-q", "-m", "b")
    unfetched = git(other, "rev-parse", "HEAD").strip()
    ahead = f"repo:svc@{unfetched}:src/b.py#L1-L2"
    missing = f"repo:svc@{world['sha']}:src/gone.py#L1-L1"
    mid = org_memory(world, cli, "The svc module b returns two and the gone module is a placeholder.",
                     ahead, missing)
    configure(svc)
    code, out, err = cli("read", "svc module b returns two gone placeholder", cwd=b)
    assert code == 0, err
    why = doubts(next(r for r in out["results"] if r["id"] == mid))["unverified"]
    assert re.search(rf"{re.escape(ahead)} \(commit {unfetched[:12]} is not in the checkout of svc", why), why
    assert f"{missing} (src/gone.py is not in commit {world['sha'][:12]} of svc)" in why, why
    # Once fetched (HEAD has not moved), the commit is checked: a "not found" is never kept.
    git(svc, "fetch", "-q", str(other), "main")
    code, out, err = cli("read", "svc module b returns two gone placeholder", cwd=b)
    why = doubts(next(r for r in out["results"] if r["id"] == mid))["unverified"]
    assert ahead not in why and missing in why, why


def test_repos_in_a_repo_config_is_never_read(world: dict[str, Any], cli: Cli) -> None:
    b, svc, mid = world["b"], world["svc"], world["mid"]
    # A repo's config.yaml comes with its clone: it must not point memstore at folders of this machine.
    configure(svc, b / ".memory" / "config.yaml")
    assert list(doubts(hit(cli, b, mid))) == ["unverified"]
    assert not (home_store() / ".index" / "stale-repo-svc.json").exists()


def test_context_gives_the_same_doubts(world: dict[str, Any], cli: Cli) -> None:
    b, svc, mid = world["b"], world["svc"], world["mid"]

    def in_context() -> dict[str, Any]:
        code, ctx, err = cli("context", cwd=b)
        assert code == 0, err
        return next(m for part in ctx.values() if isinstance(part, list)
                    for m in part if isinstance(m, dict) and m.get("id") == mid)

    assert [d["doubt"] for d in in_context()["doubts"]] == ["unverified"]
    configure(svc)
    assert in_context()["doubts"] == []
    commit(svc, SOURCE.replace("for _ in range(3):", "for _ in range(5):"), "five retries")
    item = in_context()
    assert [d["doubt"] for d in item["doubts"]] == ["stale"] and item["stale"]["evidence"] == [world["ref"]]


def test_a_checkout_path_that_is_no_repository_leaves_the_citation_unverified(
        world: dict[str, Any], cli: Cli, tmp_path: Path) -> None:
    plain = tmp_path / "not-a-repo"
    plain.mkdir()
    configure(plain)
    why = doubts(hit(cli, world["b"], world["mid"]))["unverified"]
    assert "is not a git work tree" in why, why
    assert subprocess.run(["git", "-C", str(plain), "status"], capture_output=True, check=False).returncode != 0
