"""The agent loop: guide (and --install), context, reflect, snapshot, write modes. The tests that
read load the real embedding model, so they live together here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CliResult, git, reopen, write_req

from memstore.read.retrieve import read
from memstore.store import episodes
from memstore.verbs import api
from memstore.verbs.guide import BEGIN, END, context, guide_text, install_guide, reflect
from memstore.verbs.snapshot import snapshot, to_markdown


def set_config(repo: Path, text: str) -> None:
    cfg = repo / ".memory" / "config.yaml"
    cfg.write_text(cfg.read_text(encoding="utf-8") + text, encoding="utf-8")


# -- guide ---------------------------------------------------------------------------------------------
def test_guide_text_covers_verbs_kinds_and_the_write_mode(repo: Path, cli: Callable[..., CliResult]) -> None:
    text = guide_text("review")
    for needle in ('"op": "read"', '"op": "write"', '"op": "update"', "memstore context", "memstore reflect",
                   "memstore episode start", "Current code is ground truth", "failed_tactic", "preference"):
        assert needle in text
    assert "**review** mode" in text and "propose" in text
    assert "**autonomous** mode" in guide_text("autonomous")
    code, out, _ = cli("guide", cwd=repo)  # a document: printed as Markdown even when piped
    assert code == 0 and out.startswith("## Long-term memory (memstore)") and "**review** mode" in out
    code, out, _ = cli("guide", "--json-out", cwd=repo, env={"MEMSTORE_WRITE_MODE": "autonomous"})
    assert out["write_mode"] == "autonomous" and "**autonomous** mode" in out["text"]


def test_guide_install_is_idempotent_and_keeps_the_rest(repo: Path, cli: Callable[..., CliResult]) -> None:
    agents = repo / "AGENTS.md"
    agents.write_text("# Agents\n\nUse tabs.\n")
    code, ans, _ = cli("guide", "--install", cwd=repo / "src")  # from a subfolder: the repo root's file
    assert code == 0 and ans["state"] == "added"
    first = agents.read_text()
    assert first.startswith("# Agents\n\nUse tabs.\n\n" + BEGIN) and first.rstrip().endswith(END)
    code, ans, _ = cli("guide", "--install", cwd=repo)
    assert ans["state"] == "unchanged" and agents.read_text() == first
    # text after the section and edits around it survive a refresh in the other write mode
    agents.write_text(first + "\n## Later notes\nKeep me.\n")
    set_config(repo, "write_mode: autonomous\n")
    code, ans, _ = cli("guide", "--install", cwd=repo)
    after = agents.read_text()
    assert ans["state"] == "updated" and after.count(BEGIN) == 1 and "**autonomous** mode" in after
    assert after.startswith("# Agents\n\nUse tabs.\n") and after.endswith("## Later notes\nKeep me.\n")
    ans = install_guide(reopen(repo), cwd=repo)
    assert ans["state"] == "unchanged"
    code, ans, _ = cli("guide", "--install", "--file", "CLAUDE.md", cwd=repo)
    assert ans["state"] == "created" and (repo / "CLAUDE.md").read_text().startswith(BEGIN)


# -- write modes ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("mode", "committed"), [("review", False), ("autonomous", True)])
def test_write_modes(repo: Path, mode: str, committed: bool) -> None:
    set_config(repo, f"write_mode: {mode}\ngit:\n  commit: true\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "layout")
    ans = api.write(reopen(repo), write_req("fact", "Releases are cut on Tuesdays."))
    in_head = ans["path"] in git(repo, "ls-tree", "-r", "--name-only", "HEAD")
    is_staged = ans["path"] in git(repo, "diff", "--cached", "--name-only")
    assert (in_head, is_staged) == (committed, not committed)
    # a global write waits for the user's approval whatever the repo's mode: a repo's config
    # comes with a clone and cannot waive it (the user's own settings can: tests/test_pending.py)
    glob = api.write(reopen(repo), write_req("preference", "Prefer small PRs.", scope="global"))
    home = Path(reopen(repo).global_.root)
    assert Path(glob["path"]).name not in git(home, "ls-tree", "-r", "--name-only", "HEAD")
    assert glob["pending"] is True


# -- snapshot --------------------------------------------------------------------------------------------
def test_snapshot_is_the_derived_top_of_block(repo: Path, cli: Callable[..., CliResult]) -> None:
    ws = reopen(repo)
    old = api.write(ws, write_req("fact", "The database driver is asyncpg."))
    change = api.write(reopen(repo), write_req("change", "Driver moved from asyncpg to psycopg 3.",
                                               links={"change_targets": [old["id"]]}))
    new = api.write(reopen(repo), write_req("fact", "The database driver is psycopg 3.",
                                            links={"supersedes": [old["id"]], "via_change": change["id"]}))
    pref = api.write(reopen(repo), write_req("preference", "Run pytest with -x."))
    solved = api.write(reopen(repo), write_req("problem", "alembic upgrade fails: column already exists"))
    good = api.write(reopen(repo), write_req("solution", "Build the test schema with alembic.",
                                             links={"problem_id": solved["id"]}))
    meh = api.write(reopen(repo), write_req("solution", "Recreate the database.", links={"problem_id": solved["id"]}))
    api.update(reopen(repo), {"op": "update", "type": "utility_vote", "memory_id": good["id"], "vote": 1,
                              "evidence_refs": ["user:it worked"]})
    failed = api.write(reopen(repo), write_req("failed_tactic", "IF NOT EXISTS guards.",
                                               links={"problem_id": solved["id"]}))
    open_ = api.write(reopen(repo), write_req("problem", "The carrier webhook retry test is flaky."))

    snap = snapshot(reopen(repo))
    assert [f["id"] for f in snap["facts"]] == [new["id"]]  # the superseded fact is gone
    assert [p["id"] for p in snap["preferences"]] == [pref["id"]]
    (entry,) = snap["solutions"]
    assert entry["problem"]["id"] == solved["id"] and entry["best_solution"]["id"] == good["id"]
    assert [s["id"] for s in entry["other_solutions"]] == [meh["id"]]
    assert [f["id"] for f in entry["failed_tactics"]] == [failed["id"]]
    assert [p["problem"]["id"] for p in snap["open_problems"]] == [open_["id"]]

    md = to_markdown(snap)
    assert "## Current facts" in md and "The database driver is psycopg 3." in md and "asyncpg." not in md
    assert "- **Solution:** Build the test schema with alembic." in md and "Watch-out (failed)" in md
    before = {p for p in (repo / ".memory").rglob("*") if ".index" not in p.parts}
    code, out, _ = cli("snapshot", "--markdown", cwd=repo)
    assert code == 0 and out.startswith("# Memory snapshot")
    code, _, _ = cli("snapshot", "--markdown", "--out", "docs/MEMORY.md", cwd=repo)
    assert code == 0 and (repo / "docs" / "MEMORY.md").read_text() == md
    code, err, _ = cli("snapshot", "--out", ".memory/facts/snapshot.md", cwd=repo)
    assert code == 2 and err["error"]["code"] == "bad_path"
    assert {p for p in (repo / ".memory").rglob("*") if ".index" not in p.parts} == before  # never written there


def test_snapshot_shows_a_changed_solution_as_no_longer_applying(repo: Path, cli: Callable[..., CliResult]) -> None:
    def write(*args: str, env: dict[str, str] | None = None) -> str:
        code, out, err = cli("write", *args, "--evidence", "user:seen", "--allow-duplicate", cwd=repo, env=env)
        assert code == 0, err
        return out["id"]

    problem = write("--kind", "problem", "--text", "Deploys fail: the CDN returns 403 for new assets.")
    old = write("--kind", "solution", "--problem", problem, "--text", "Purge the CDN cache with cdnctl purge --all.")
    kept = write("--kind", "solution", "--problem", problem, "--text", "Version asset names so no purge is needed.")
    change = write("--kind", "change", "--change-target", old,
                   "--text", "cdnctl was replaced by the provider's API; purge --all no longer exists.")
    lone = write("--kind", "problem", "--text", "Image thumbnails are served stale after upload.")
    gone = write("--kind", "solution", "--problem", lone, "--text", "Run cdnctl purge on the thumbnail path.")
    write("--kind", "change", "--change-target", gone, "--text", "cdnctl is gone: thumbnails need the provider API.")
    pref = write("--kind", "preference", "--scope", "global", "--text", "Prefer small focused commits.",
                 env={"MEMSTORE_WRITE_MODE": "autonomous"})

    code, snap, err = cli("snapshot", cwd=repo)
    assert code == 0, err
    (entry,) = [e for e in snap["solutions"] if e["problem"]["id"] == problem]
    assert entry["best_solution"]["id"] == kept and entry["other_solutions"] == []
    (outdated,) = entry["no_longer_applies"]
    assert outdated["id"] == old and [c["id"] for c in outdated["changed_by"]] == [change]
    # a problem whose only fix was overtaken by a change is open again, with the reason
    (reopened,) = [e for e in snap["open_problems"] if e["problem"]["id"] == lone]
    assert [s["id"] for s in reopened["no_longer_applies"]] == [gone]
    # the global store is covered too
    assert [p["id"] for p in snap["preferences"]] == [pref] and snap["counts"]["global"] == 1

    code, md, err = cli("snapshot", "--markdown", cwd=repo)
    assert code == 0, err
    assert "Also worked: Purge" not in md
    assert "No longer applies (a change targets it): Purge the CDN cache" in md
    assert "changed since: cdnctl was replaced" in md
    assert f"Prefer small focused commits. (`{pref[:10]}`, global)" in md


# -- reads: context, reflect, staleness in answers (real model) ------------------------------------------------
@pytest.mark.model
def test_reflect_lists_what_was_read_during_the_episode(repo: Path) -> None:
    ws = reopen(repo)
    problem = api.write(ws, write_req("problem", "alembic upgrade head fails with DuplicateColumn: column "
                                                 "tracking_code already exists"))
    solution = api.write(reopen(repo), write_req("solution", "Build the test schema with alembic upgrade head "
                                                             "instead of metadata.create_all.",
                                                 links={"problem_id": problem["id"]}))
    pref = api.write(reopen(repo), write_req("preference", "Run pytest with -x so failures stop early."))
    ws = reopen(repo)
    started = episodes.start(ws, agent="claude-code", task="add tracking_code column to shipments")
    episodes.log(ws, "user", "Add tracking_code to shipments; run pytest with -x please")
    failing = episodes.log(ws, "tool", "$ pytest -x\nE DuplicateColumn: column tracking_code already exists\n1 failed")
    answer = read(ws, {"query": "alembic upgrade fails: column tracking_code already exists (DuplicateColumn)"})
    got = [r["id"] for r in answer["results"]]
    assert problem["id"] in got and solution["id"] in got

    ctx = context(reopen(repo))
    assert [p["id"] for p in ctx["preferences"]] == [pref["id"]]
    assert ctx["episode"] == started["episode"] and ctx["write_mode"] == "review"
    assert "tracking_code" in ctx["query"]

    episodes.log(ws, "git", "commit abc1234 fix(tests): build schema with alembic")
    out = reflect(reopen(repo))
    assert out["episode"] == started["episode"]
    read_ids = {r["id"] for r in out["reads"]}
    assert {problem["id"], solution["id"]} <= read_ids
    vote = next(r for r in out["reads"] if r["id"] == solution["id"])["vote"]
    assert vote["type"] == "utility_vote" and vote["memory_id"] == solution["id"]
    assert vote["evidence_refs"][0].startswith(f"event:{started['episode']}:")
    sources = [e["source"] for e in out["events"]]
    assert sources.count("memstore") == 2  # the read and the context's ambient read were logged
    items = {c["item"]: c for c in out["checklist"]}
    assert set(items) == {"problems met", "what worked", "what failed", "what changed", "facts learned",
                          "preferences learned", "candidate lessons", "votes on what you were given", "votes"}
    assert items["problems met"]["template"]["memory"]["evidence_refs"] == [failing["ref"]]
    assert items["what changed"]["template"]["memory"]["evidence_refs"][0].endswith(":5")
    assert "propose" in out["next"]
    # every template's refs validate: a filled-in template is a valid write
    filled = items["what failed"]["template"]
    filled["memory"].update(text="IF NOT EXISTS guards hide the real cause.", links={"problem_id": problem["id"]})
    filled["allow_duplicate"] = True
    assert api.write(reopen(repo), filled)["ok"]


@pytest.mark.model
def test_read_answers_carry_staleness(repo: Path) -> None:
    (repo / "src" / "a.py").write_text("RETRIES = 3\n")
    git(repo, "add", "src/a.py")
    git(repo, "commit", "-q", "-m", "a.py")
    sha = git(repo, "rev-parse", "HEAD").strip()
    mem = api.write(reopen(repo), write_req("fact", "The webhook client retries 3 times (RETRIES in src/a.py).",
                                            evidence=[f"file:src/a.py@{sha[:10]}"]))
    git(repo, "commit", "-q", "-m", "memories")
    query = {"query": "how many times does the webhook client retry"}
    (hit,) = [r for r in read(reopen(repo), query)["results"] if r["id"] == mem["id"]]
    assert hit["stale"] is None
    (repo / "src" / "a.py").write_text("RETRIES = 5\n")
    git(repo, "commit", "-q", "-am", "more retries")
    (hit,) = [r for r in read(reopen(repo), query)["results"] if r["id"] == mem["id"]]
    assert hit["stale"]["files"] == ["src/a.py"] and hit["stale"]["commits_since"] == 1
    ctx = context(reopen(repo), task="how many times does the webhook client retry")
    assert all(r["stale"] for r in ctx["relevant"] if r["id"] == mem["id"])  # ambient reads may stay silent
