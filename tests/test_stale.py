"""Staleness of `file:` evidence, computed against real git history (no model needed: the read
pipeline's use of it is covered in test_agent_loop)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
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
    assert stale == {"files": ["src/a.py"], "evidence": [f"file:src/a.py@{stale['since'][:10]}"], "commits_since": 2,
                     "since": stale["since"]}

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
    assert check(repo, mem_id) == {"files": ["src/a.py"], "evidence": ["file:src/a.py#L1-L1"], "commits_since": 1,
                                   "since": added[:12]}
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
    assert file_refs(mem) == [("a.py", "abc123", (1, 2), "file:a.py@abc123#L1-L2"),
                              ("a.py", "abc123", None, "file:a.py@abc123"), ("b.py", None, None, "file:b.py")]


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
    assert together["c"] == {"files": ["src/c.py"], "evidence": [f"file:src/c.py@{pinned[:10]}"], "commits_since": 1,
                             "since": pinned[:12]}
    assert together["cd"]["files"] == ["src/c.py", "src/d.py"] and together["cd"]["commits_since"] == 2


def _cite(repo: Path, text: str, ref: str) -> str:
    return api.write(reopen(repo), write_req("fact", text, evidence=[ref, "user:x"]))["id"]


def test_a_line_citation_is_stale_only_when_its_own_lines_change(repo: Path) -> None:
    """The audit's cases: a change on line 5 leaves a citation of L7-L8 current, one line added
    at the top leaves L126-L180 current; a change inside either, or a line inserted between two
    cited lines, makes it stale. Work-tree edits count, and so do commits since."""
    src = repo / "src"
    lines = [f"line_{n} = {n}" for n in range(1, 201)]
    (src / "big.py").write_text("\n".join(lines) + "\n")
    git(repo, "add", "src/big.py")
    git(repo, "commit", "-q", "-m", "big")
    near = _cite(repo, "Lines seven and eight of big.py set the two flags.", "file:src/big.py#L7-L8")
    far = _cite(repo, "The block at L126-L180 of big.py is the table.", "file:src/big.py#L126-L180")
    whole = _cite(repo, "big.py is the module of numbered lines.", "file:src/big.py")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "memories")

    def edit(change: Callable[[list[str]], list[str]]) -> None:
        (src / "big.py").write_text("\n".join(change(list(lines))) + "\n")

    def stale() -> dict[str, bool]:
        return {k: check(repo, m) is not None for k, m in (("near", near), ("far", far), ("whole", whole))}

    edit(lambda ls: [*ls[:4], "line_5 = 'five'", *ls[5:]])  # line 5 only
    assert stale() == {"near": False, "far": False, "whole": True}
    edit(lambda ls: ["import os", *ls])  # one line above everything
    assert stale() == {"near": False, "far": False, "whole": True}
    edit(lambda ls: [*ls[:149], "line_150 = 'changed'", *ls[150:]])  # inside L126-L180
    assert stale() == {"near": False, "far": True, "whole": True}
    edit(lambda ls: [*ls[:7], "inserted = True", *ls[7:]])  # between L7 and L8
    assert stale() == {"near": True, "far": False, "whole": True}
    edit(lambda ls: ls[:120])  # the end of the file deleted: L126-L180 are gone
    assert stale() == {"near": False, "far": True, "whole": True}

    # committed, the same answers: the lines are carried from the memory's commit to the work tree
    edit(lambda ls: ["import os", "import sys", *ls])
    git(repo, "commit", "-q", "-am", "imports on top")
    assert stale() == {"near": False, "far": False, "whole": True}
    edit(lambda ls: ["import os", "import sys", *ls[:6], "line_7 = 'seven'", *ls[7:]])
    got = check(repo, near)
    assert got is not None and got["evidence"] == ["file:src/big.py#L7-L8"] and got["commits_since"] == 1
    assert check(repo, far) is None


def test_a_warm_check_runs_no_git(repo: Path, monkeypatch: Any) -> None:
    """The answer is kept per memory (and the hunks per memory commit and file) until HEAD or a
    cited file's stat changes."""
    (repo / "src" / "big.py").write_text("".join(f"x{n} = {n}\n" for n in range(40)))
    git(repo, "add", "src/big.py")
    git(repo, "commit", "-q", "-m", "big")
    mem_id = _cite(repo, "x3 and x4 are the pair.", "file:src/big.py#L4-L5")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "memories")
    (repo / "src" / "big.py").write_text("y = 0\n" + "".join(f"x{n} = {n}\n" for n in range(40)))
    assert check(repo, mem_id) is None
    from memstore import gitops

    calls: list[list[str]] = []
    real = gitops.run
    monkeypatch.setattr(gitops, "run", lambda args, *a, **k: calls.append(args) or real(args, *a, **k))
    assert check(repo, mem_id) is None
    assert [c for c in calls if "diff" in c or "log" in c or "rev-list" in c] == []


@pytest.mark.parametrize("name", ["café.py", 'say "hi".py', "tab\there.py", "new\nline.py", "a*b?.py"])
def test_names_git_quotes_are_found(repo: Path, name: str) -> None:
    """git C-quotes a name holding a byte past ASCII, a quote, a backslash or a control
    character in its diff headers and log: the cited lines are still found and carried."""
    path = repo / "src" / name
    path.write_text("".join(f"v{n} = {n}\n" for n in range(1, 11)))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "code")
    mem_id = "01m7qmk1513w2q09vvmz6swwb1"
    ref = json.dumps(f"file:src/{name}#L4-L5")
    (repo / ".memory" / "facts" / f"{mem_id}-quoted.md").write_text(
        f"---\nid: {mem_id}\nkind: fact\nscope: repo\ncreated: 2026-11-18T15:32:15Z\n"
        f"evidence: [{ref}]\n---\nv4 and v5 are the pair.\n", encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "memory")
    assert memory(repo, mem_id).file_evidence()[0].path == f"src/{name}"
    path.write_text("top = 0\n" + "".join(f"v{n} = {n}\n" for n in range(1, 11)))
    assert check(repo, mem_id) is None  # shifted, not changed
    path.write_text("".join(f"v{n} = {n * (n == 5) + 1}\n" for n in range(1, 11)))
    got = check(repo, mem_id)
    assert got is not None and got["files"] == [f"src/{name}"]


def test_git_s_quoting_of_every_awkward_name_is_matched(repo: Path) -> None:
    """Evidence reads a backslash as a folder separator, so no memory cites such a name; the
    diff's sections are still matched to the names asked about, as git quotes them."""
    from memstore import gitops
    from memstore.git.stale import split_patch

    names = ["café.py", 'say "hi".py', "back\\slash.py", "tab\there.py", "new\nline.py", "plain name.py"]
    for name in names:
        (repo / name).write_text("a\nb\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "names")
    for name in names:
        (repo / name).write_text("a\nB\n")
    proc = gitops.run(["-c", "core.quotePath=true", "diff", "-U0", "HEAD", "--", *names], repo)
    found = split_patch(proc.stdout, names)
    assert sorted(found) == sorted(names)
    assert all([(h.old_start, h.old_count) for h in d.hunks] == [(2, 1)] for d in found.values())


def test_a_hostile_citation_of_two_billion_lines_is_answered_from_the_hunks(repo: Path) -> None:
    """A memory from a clone or a PR may cite L1-L2000000000: the answer comes from the diff's
    hunks, never from a walk over the lines (which would not end)."""
    (repo / "src" / "big.py").write_text("".join(f"v{n} = {n}\n" for n in range(1, 21)))
    git(repo, "add", "src/big.py")
    git(repo, "commit", "-q", "-m", "code")
    mem_id = "01m7qmk1513w2q09vvmz6swwc1"  # hand-written: a write refuses lines past the end
    (repo / ".memory" / "facts" / f"{mem_id}-huge.md").write_text(
        f"---\nid: {mem_id}\nkind: fact\nscope: repo\ncreated: 2026-11-18T15:32:15Z\n"
        "evidence: ['file:src/big.py#L5-L2000000000']\n---\nThe whole of big.py is one table of values.\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "memory")
    (repo / "src" / "big.py").write_text("".join(f"v{n} = {n}\n" for n in range(1, 21)) + "v21 = 21\n")
    assert check(repo, mem_id) is not None  # a line added inside the cited range
    (repo / "src" / "big.py").write_text("top = 0\n" + "".join(f"v{n} = {n}\n" for n in range(1, 21)))
    assert check(repo, mem_id) is None  # only shifted


def test_many_memories_are_asked_about_in_runs_of_bounded_size(repo: Path, monkeypatch: Any) -> None:
    """A snapshot asks about every memory it lists: git gets the paths in runs (it takes no list
    on stdin for diff and log), and the answers are those of one run."""
    from memstore.git import stale

    src = repo / "src"
    for i in range(5):
        (src / f"m{i}.py").write_text("".join(f"v{n} = {n}\n" for n in range(1, 11)))
    git(repo, "add", "src")
    git(repo, "commit", "-q", "-m", "code")
    ids = [_cite(repo, f"Module m{i} sets v3 and v4 to their own numbers.", f"file:src/m{i}.py#L3-L4")
           for i in range(5)]
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "memories")
    for i in (0, 2, 4):
        (src / f"m{i}.py").write_text("".join(f"v{n} = {n * 2 if (n == 3 and i != 2) else n}\n" for n in range(1, 11)))
    monkeypatch.setattr(stale, "PATHS_PER_RUN", 2)
    ws = reopen(repo)
    found = stale.stale_of(ws.repo, [ws.catalog("repo").memories[m] for m in ids])
    assert [found[m] is not None for m in ids] == [True, False, False, False, True]


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
