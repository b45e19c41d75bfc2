"""Staleness of `file:` evidence, computed against real git history (no model needed: the read
pipeline's use of it is covered in test_agent_loop)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from conftest import CliResult, git, reopen, write_req

from memstore.git.stale import StaleChecker, annotate, file_refs
from memstore.store.model import Memory
from memstore.verbs import api


def memory(repo: Path, mem_id: str) -> Memory:
    return reopen(repo).catalog("repo").memories[mem_id]


def check(repo: Path, mem_id: str) -> dict | None:
    ws = reopen(repo)
    sc = StaleChecker(ws.store("repo"))
    result = sc.check(ws.catalog("repo").memories[mem_id])
    sc.save()
    return result


def write_a(repo: Path, text: str = "A = 1\n") -> None:
    (repo / "src" / "a.py").write_text(text)


def setup_cited(repo: Path, *, rev: bool) -> str:
    write_a(repo)
    git(repo, "add", "src/a.py")
    git(repo, "commit", "-q", "-m", "add a.py")
    sha = git(repo, "rev-parse", "HEAD").strip()
    ref = f"file:src/a.py@{sha[:10]}" if rev else "file:src/a.py#L1-L1"
    ans = api.write(reopen(repo), write_req("fact", "A is 1 in src/a.py.", evidence=[ref, "user:x"]))
    return ans["id"]


def test_a_memory_turns_stale_after_its_file_changes_and_not_before(repo: Path) -> None:
    mem_id = setup_cited(repo, rev=True)
    assert check(repo, mem_id) is None  # not committed yet: never stale
    write_a(repo, "A = 2\n")
    assert check(repo, mem_id) is None  # still not committed, even though the file moved on
    write_a(repo)
    git(repo, "commit", "-q", "-m", "memories")
    assert check(repo, mem_id) is None  # committed, file unchanged since @rev

    write_a(repo, "A = 2\n")  # a work-tree edit is enough
    stale = check(repo, mem_id)
    assert stale is not None and stale["files"] == ["src/a.py"] and stale["commits_since"] == 0
    git(repo, "commit", "-q", "-am", "change a")
    write_a(repo, "A = 3\n")
    git(repo, "commit", "-q", "-am", "change a again")
    stale = check(repo, mem_id)
    assert stale == {"files": ["src/a.py"], "commits_since": 2, "since": stale["since"]}

    write_a(repo)  # back to what the memory saw: no longer stale
    assert check(repo, mem_id) is None


def test_without_rev_the_commit_that_added_the_memory_is_the_base(repo: Path) -> None:
    mem_id = setup_cited(repo, rev=False)
    git(repo, "commit", "-q", "-m", "memories")
    added = git(repo, "rev-parse", "HEAD").strip()
    assert check(repo, mem_id) is None
    (repo / "src" / "other.py").write_text("pass\n")
    git(repo, "add", "src/other.py")
    git(repo, "commit", "-q", "-m", "unrelated")
    assert check(repo, mem_id) is None  # commits that do not touch the file do not matter
    write_a(repo, "A = 5\n")
    git(repo, "commit", "-q", "-am", "change a")
    assert check(repo, mem_id) == {"files": ["src/a.py"], "commits_since": 1, "since": added[:12]}
    (repo / "src" / "a.py").unlink()  # a deleted file is stale too
    assert check(repo, mem_id)["files"] == ["src/a.py"]


def test_results_are_cached_by_head_and_file_signature(repo: Path) -> None:
    mem_id = setup_cited(repo, rev=True)
    git(repo, "commit", "-q", "-m", "memories")
    write_a(repo, "A = 2\n")
    assert check(repo, mem_id) is not None
    cache = json.loads((repo / ".memory" / ".index" / "stale.json").read_text())
    assert cache["head"] == git(repo, "rev-parse", "HEAD").strip() and mem_id in cache["entries"]
    # a cached answer is reused while HEAD and the file's stat are unchanged ...
    cache["entries"][mem_id]["stale"] = {"files": ["from-cache"], "commits_since": 9}
    (repo / ".memory" / ".index" / "stale.json").write_text(json.dumps(cache))
    assert check(repo, mem_id)["files"] == ["from-cache"]
    # ... and dropped when the file changes again or HEAD moves
    write_a(repo, "A = 22\n")
    assert check(repo, mem_id)["files"] == ["src/a.py"]
    git(repo, "commit", "-q", "-am", "move HEAD")
    assert check(repo, mem_id)["commits_since"] == 1


def test_annotate_fills_read_results_in_place(repo: Path) -> None:
    mem_id = setup_cited(repo, rev=True)
    git(repo, "commit", "-q", "-m", "memories")
    write_a(repo, "A = 2\n")
    ws = reopen(repo)
    results = [{"id": mem_id, "scope": "repo", "stale": None}, {"id": "01m7zzzzzzzzzzzzzzzzzzzzzz", "scope": "repo",
                                                                 "stale": None}]
    annotate(ws.repo, results, ws.catalog("repo").memories)
    assert results[0]["stale"]["files"] == ["src/a.py"] and results[1]["stale"] is None


def test_file_refs_parse_only_file_evidence() -> None:
    mem = Memory(id="x", kind="fact", text="t", evidence=["file:a.py@abc123#L1-L2", "file:a.py@abc123", "commit:abc",
                                                          "file:b.py", "file:/abs"])
    assert file_refs(mem) == [("a.py", "abc123"), ("b.py", None)]


def test_a_store_that_is_not_its_repos_memory_folder_is_never_stale(tmp_path: Path,
                                                                    cli: Callable[..., CliResult]) -> None:
    """Issue #12.8: memstore's own checkout marked its bundled example store stale against
    memstore's history. A store is stale only against the repo it is the .memory/ of."""
    from conftest import make_git_repo

    from memstore.store.workspace import open_workspace

    repo = make_git_repo(tmp_path / "checkout")
    (repo / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    example = repo / ".memory-example"
    (example / "facts").mkdir(parents=True)
    (example / "facts" / "01m7qmk1513w2q09vvmz6swwa1-driver.md").write_text(
        "---\nid: 01m7qmk1513w2q09vvmz6swwa1\nkind: fact\nscope: repo\ncreated: 2026-11-18T15:32:15Z\n"
        "evidence: ['file:pyproject.toml', 'file:app/db/session.py']\n---\nThe driver is psycopg 3.\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "example store")
    for n in (1, 2):  # the checkout's own history moves on
        (repo / "pyproject.toml").write_text(f"[project]\nname = 'x'\nversion = '0.{n}'\n")
        git(repo, "commit", "-q", "-am", f"release {n}")

    ws = open_workspace(cwd=repo, store_dir=example)
    results = [{"id": "01m7qmk1513w2q09vvmz6swwa1", "scope": "repo", "stale": None}]
    annotate(ws.repo, results, ws.catalog("repo").memories)
    assert results[0]["stale"] is None
    rc, out, _ = cli("--store", ".memory-example", "check", cwd=repo)
    assert rc == 0 and [p for p in out["problems"] if p["code"] == "stale_evidence"] == []

    # the same memory in the repo's own .memory/ is stale: that is the code it speaks of
    (repo / ".memory-example").rename(repo / ".memory")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "adopt the store")
    (repo / "pyproject.toml").write_text("[project]\nname = 'y'\n")
    ws = open_workspace(cwd=repo)
    annotate(ws.repo, results, ws.catalog("repo").memories)
    assert results[0]["stale"] is not None and results[0]["stale"]["files"] == ["pyproject.toml"]


def test_one_read_s_results_are_checked_together_as_each_alone(repo: Path) -> None:
    """After a commit a read's results are worked out in one batch (one git log, one diff per
    base): each answer must be what that memory alone gets, whatever its neighbours in the batch."""
    src = repo / "src"
    src.mkdir(exist_ok=True)
    for name in ("a", "b", "c", "d"):
        (src / f"{name}.py").write_text(f"{name} = 1\n")
    git(repo, "add", "src")
    git(repo, "commit", "-q", "-m", "code")
    pinned = git(repo, "rev-parse", "HEAD").strip()
    ids = {}
    for name, ref in (("a", "file:src/a.py"), ("b", "file:src/b.py"), ("c", f"file:src/c.py@{pinned[:10]}"),
                      ("cd", "file:src/c.py")):
        refs = [ref, "file:src/d.py"] if name == "cd" else [ref]
        ids[name] = api.write(reopen(repo), write_req("fact", f"Module {name} is set to one.",
                                                       evidence=[*refs, "user:x"]))["id"]
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "memories")
    (src / "c.py").write_text("c = 2\n")
    git(repo, "commit", "-q", "-am", "change c")
    (src / "d.py").write_text("d = 2\n")
    git(repo, "commit", "-q", "-am", "change d")
    (src / "a.py").write_text("a = 2\n")  # a work-tree edit only
    ids["new"] = api.write(reopen(repo), write_req("fact", "Module b is new here.",
                                                   evidence=["file:src/b.py", "user:x"]))["id"]
    git(repo, "commit", "-q", "--allow-empty", "-m", "move HEAD")

    alone = {}
    for key, mem_id in ids.items():
        (repo / ".memory" / ".index" / "stale.json").unlink(missing_ok=True)
        alone[key] = check(repo, mem_id)
    (repo / ".memory" / ".index" / "stale.json").unlink(missing_ok=True)
    ws = reopen(repo)
    results = [{"id": mem_id, "scope": "repo", "stale": None} for mem_id in ids.values()]
    annotate(ws.repo, results, ws.catalog("repo").memories)
    together = dict(zip(ids, (r["stale"] for r in results), strict=True))
    assert together == alone
    assert together["a"]["files"] == ["src/a.py"] and together["a"]["commits_since"] == 0
    assert together["b"] is None and together["new"] is None
    assert together["c"] == {"files": ["src/c.py"], "commits_since": 1, "since": pinned[:12]}
    assert together["cd"]["files"] == ["src/c.py", "src/d.py"] and together["cd"]["commits_since"] == 2


def test_a_read_warns_when_it_serves_a_committed_memory_edited_in_the_work_tree(
        repo: Path, cli: Callable[..., CliResult]) -> None:
    ws = reopen(repo)
    kept = api.write(ws, write_req("fact", "The billing worker retries a failed charge three times."))
    edited = api.write(ws, write_req("fact", "The billing worker sends receipts by email after a charge."))
    git(repo, "commit", "-q", "--no-verify", "-m", "memories")
    rc, out, _ = cli("read", "billing worker charge", cwd=repo)
    assert rc == 0 and not out.get("warnings"), out.get("warnings")
    path = repo / edited["path"]
    path.write_text(path.read_text().replace("by email", "by SMS"))
    rc, out, _ = cli("read", "billing worker charge", cwd=repo)
    assert rc == 0 and {r["id"] for r in out["results"]} >= {kept["id"], edited["id"]}
    warned = [w for w in out.get("warnings", []) if "edited in the work tree" in w]
    assert len(warned) == 1 and edited["id"] in warned[0] and kept["id"] not in warned[0]
    git(repo, "restore", "--source=HEAD", "--staged", "--worktree", "--", edited["path"])
    rc, out, _ = cli("read", "billing worker charge", cwd=repo)
    assert rc == 0 and not out.get("warnings"), out.get("warnings")
