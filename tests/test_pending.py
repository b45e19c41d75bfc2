"""A global memory written in review mode waits for the user's approval: proposed (on disk, never
committed, never read), listed by `memstore pending` and `reflect`, committed by `memstore
approve`, discarded by `memstore drop`. Autonomous mode commits at once. Through the CLI."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CliResult, git

PREF = "The user wants every shell script to start with set -euo pipefail."


def _home() -> Path:
    return Path(os.environ["MEMSTORE_HOME"])


def _global_files() -> set[str]:
    root = _home()
    return {p.relative_to(root).as_posix() for p in root.rglob("*.md")
            if p.is_file() and not {".index", ".git"} & set(p.relative_to(root).parts)}


def _commits() -> list[str]:
    return git(_home(), "log", "--format=%s").splitlines() if (_home() / ".git").exists() else []


def _propose(cli: Callable[..., CliResult], repo: Path, text: str = PREF) -> dict:
    rc, out, err = cli("write", "--kind", "preference", "--scope", "global", "--text", text,
                       "--evidence", "user:always use strict mode", "--allow-duplicate", cwd=repo)
    assert rc == 0, err
    return out


def test_a_global_write_in_review_mode_waits_for_approval(repo: Path, cli: Callable[..., CliResult]) -> None:
    out = _propose(cli, repo)
    assert out["pending"] is True and out["mode"] == "review"
    assert not [f for f in _global_files() if not f.startswith(".local/")]  # not in the store
    assert not [c for c in _commits() if "preference" in c]  # not committed
    assert Path(out["path"]).is_file()  # but kept on disk: nothing is lost
    rc, found, err = cli("read", "shell script strict mode", cwd=repo)
    assert rc == 0 and out["id"] not in [r["id"] for r in found["results"]], err or found

    rc, listed, err = cli("pending", cwd=repo)
    assert rc == 0, err
    assert [(p["id"], p["text"]) for p in listed["pending"]] == [(out["id"], PREF)]
    rc, _, err = cli("episode", "start", "--agent", "tester", "--task", "scripts", cwd=repo)
    assert rc == 0, err
    rc, refl, err = cli("reflect", cwd=repo)
    assert rc == 0 and [p["id"] for p in refl["pending"]] == [out["id"]], err or refl

    rc, approved, err = cli("approve", out["id"][:10], cwd=repo)
    assert rc == 0 and approved["approved"] is True, err
    assert any(out["id"][:10] in c for c in _commits())  # committed to the global store now
    assert f"preferences/{Path(out['path']).name}" in _global_files()
    assert not Path(out["path"]).exists()
    rc, listed, _ = cli("pending", cwd=repo)
    assert listed["pending"] == []
    rc, found, err = cli("read", "shell script strict mode", cwd=repo)
    assert rc == 0 and out["id"] in [r["id"] for r in found["results"]], err or found


def test_a_dropped_proposal_never_reaches_the_global_store(repo: Path, cli: Callable[..., CliResult]) -> None:
    out = _propose(cli, repo)
    commits = _commits()
    rc, dropped, err = cli("drop", out["id"], cwd=repo)
    assert rc == 0 and dropped["dropped"] is True, err
    assert _commits() == commits and not Path(out["path"]).exists()
    assert not [f for f in _global_files() if f.endswith(".md") and not f.startswith(".local/")]
    rc, err_out, _ = cli("approve", out["id"], cwd=repo)  # gone: nothing to approve
    assert rc == 3 and err_out["error"]["code"] == "not_found"


def test_bad_ids_are_refused_and_nothing_changes(repo: Path, cli: Callable[..., CliResult]) -> None:
    out = _propose(cli, repo)
    before, commits = _global_files(), _commits()
    for args, code in ((("approve", "01zzzzzzzzzz"), 3), (("drop", "01zzzzzzzzzz"), 3), (("approve", "01"), 2)):
        rc, err_out, _ = cli(*args, cwd=repo)
        assert rc == code and err_out["ok"] is False and err_out["error"]["message"], (args, err_out)
    assert _global_files() == before and _commits() == commits
    assert Path(out["path"]).is_file()


def test_autonomous_mode_commits_a_global_write_at_once(repo: Path, cli: Callable[..., CliResult]) -> None:
    rc, out, err = cli("write", "--kind", "preference", "--scope", "global", "--text", PREF,
                       "--evidence", "user:always", "--allow-duplicate", cwd=repo,
                       env={"MEMSTORE_WRITE_MODE": "autonomous"})
    assert rc == 0 and "pending" not in out, err
    assert any(out["id"][:10] in c for c in _commits())


def test_a_repos_config_cannot_waive_the_approval_the_users_own_can(repo: Path,
                                                                    cli: Callable[..., CliResult]) -> None:
    config = repo / ".memory" / "config.yaml"
    config.write_text(config.read_text().replace("write_mode: review", "write_mode: autonomous"))
    out = _propose(cli, repo)  # a cloned repo says autonomous: the global memory still waits
    assert out["pending"] is True and not any(out["id"][:10] in c for c in _commits())
    (_home() / "config.yaml").write_text("write_mode: autonomous\n")  # the user's own setting
    out = _propose(cli, repo, "The user wants type hints on every public function.")
    assert "pending" not in out and any(out["id"][:10] in c for c in _commits())


def test_a_repo_write_in_review_mode_is_staged_as_before(repo: Path, cli: Callable[..., CliResult]) -> None:
    rc, out, err = cli("write", "--kind", "fact", "--text", "Scripts live in tools/.", "--evidence", "user:x",
                       "--allow-duplicate", cwd=repo)
    assert rc == 0 and "pending" not in out, err
    assert out["path"] in git(repo, "diff", "--cached", "--name-only")


def _blocked_on(lock: Path) -> int:
    """How many processes wait for the flock on ``lock`` (Linux's /proc/locks marks a waiter ->)."""
    inode = f":{os.stat(lock).st_ino} "
    return sum(1 for line in Path("/proc/locks").read_text().splitlines() if "->" in line and inode in line)


def test_approve_and_drop_of_one_proposal_never_both_succeed(repo: Path, cli: Callable[..., CliResult]) -> None:
    """In turn: whichever comes second finds nothing. At once (both waiting on the store's write
    lock): one wins, the other is not_found, and the store holds what the winner said."""
    import json
    import subprocess
    import sys
    import time

    from memstore.store.workspace import open_workspace

    first = _propose(cli, repo)
    rc, _, err = cli("approve", first["id"], cwd=repo)
    assert rc == 0, err
    rc, out, _ = cli("drop", first["id"], cwd=repo)
    assert rc == 3 and out["error"]["code"] == "not_found"
    assert f"preferences/{Path(first['path']).name}" in _global_files()
    second = _propose(cli, repo, "The user wants tabs, never spaces, in Makefiles.")
    rc, _, err = cli("drop", second["id"], cwd=repo)
    assert rc == 0, err
    rc, out, _ = cli("approve", second["id"], cwd=repo)
    assert rc == 3 and out["error"]["code"] == "not_found"
    assert not any(Path(second["path"]).name in f for f in _global_files())

    third = _propose(cli, repo, "The user wants commit messages in the imperative mood.")
    store = open_workspace(cwd=repo).global_
    with store.write_lock():
        procs = {verb: subprocess.Popen([sys.executable, "-m", "memstore", verb, third["id"]], cwd=repo,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for verb in ("approve", "drop")}
        deadline = time.monotonic() + 120
        while _blocked_on(store.index_dir / "write.lock") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    outs = {verb: p.communicate(timeout=120)[0] for verb, p in procs.items()}
    answers = {verb: (procs[verb].returncode, json.loads(out)) for verb, out in outs.items()}
    ok = [verb for verb, (rc, _) in answers.items() if rc == 0]
    assert len(ok) == 1, answers
    (loser,) = set(answers) - set(ok)
    assert answers[loser][1]["error"]["code"] == "not_found"
    stored = any(Path(third["path"]).name in f for f in _global_files())
    assert stored == (ok == ["approve"])


GH_TOKEN = "ghp_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"
STRIPE_KEY = "sk_live_" + "51HqLyjWDarjtT1zdp7dcXYZabc123"
SSH_KEY = ("-----BEGIN OPENSSH " + "PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH "
           + "PRIVATE KEY-----")

# (how the proposal file is edited by hand, the error approve gives)
HAND_EDITS = {
    "token_in_a_yaml_comment": (lambda t: t.replace("kind: preference", f"kind: preference  # {GH_TOKEN}"),
                                "secret"),
    "stripe_key_as_a_tag": (lambda t: t.replace("kind: preference", f"kind: preference\ntags: [{STRIPE_KEY}]"),
                            "secret"),
    "private_key_in_the_body": (lambda t: t + f"\nThe deploy key:\n{SSH_KEY}\n", "secret"),
    "escape_in_the_body": (lambda t: t + "\x1b]0;owned\x07 \x1b[2J\n", "bad_chars"),
    "escape_in_a_yaml_comment": (lambda t: t.replace("kind: preference", "kind: preference  # \x1b]0;hi\x07"),
                                 "invalid_file"),
    "a_link_key_no_write_makes": (lambda t: t.replace("kind: preference", "kind: preference\nlinks: {owner: x}"),
                                  "schema"),
    "text_over_the_cap": (lambda t: t + "x" * 20_000, "too_large"),
}


@pytest.mark.parametrize("edit", list(HAND_EDITS))
def test_approve_refuses_a_proposal_edited_to_fail_a_write_gate(repo: Path, cli: Callable[..., CliResult],
                                                                  edit: str) -> None:
    """A proposal is read again, as hostile input, when it is approved: an edit no write would
    pass is refused with the write's error, nothing is committed and the proposal waits on."""
    out = _propose(cli, repo)
    path = Path(out["path"])
    change, code = HAND_EDITS[edit]
    path.write_text(change(path.read_text()))
    edited, files, commits = path.read_bytes(), _global_files(), _commits()

    rc, refused, err = cli("approve", out["id"], cwd=repo)
    assert rc == 2 and refused["ok"] is False and refused["error"]["code"] == code, (refused, err)
    for secret in (GH_TOKEN, STRIPE_KEY, "b3BlbnNzaC1rZXktdjEAAAAA"):
        assert secret not in refused["error"]["message"]  # named, never echoed
    assert _commits() == commits and _global_files() == files
    assert git(_home(), "status", "--porcelain", "--untracked-files=all").strip() == ""
    assert path.read_bytes() == edited
    rc, listed, _ = cli("pending", cwd=repo)  # still waiting (as unreadable when it no longer parses)
    assert [p["path"] for p in listed["pending"] + listed["unreadable"]] == [out["path"]]


def test_approve_refuses_a_proposal_replaced_by_a_link_and_drop_removes_the_link(
        repo: Path, tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    out = _propose(cli, repo)
    path = Path(out["path"])
    outside = tmp_path / "elsewhere.md"
    outside.write_text(path.read_text())
    path.unlink()
    path.symlink_to(outside)
    commits = _commits()
    rc, refused, err = cli("approve", out["id"], cwd=repo)
    assert rc == 2 and refused["error"]["code"] == "not_regular", (refused, err)
    assert _commits() == commits and path.is_symlink()
    rc, missing, err = cli("drop", "0000000000", cwd=repo)  # another id never names the unreadable one
    assert rc == 3 and missing["error"]["code"] == "not_found" and path.is_symlink(), (missing, err)
    rc, dropped, err = cli("drop", out["id"], cwd=repo)
    assert rc == 0 and dropped["dropped"] is True and dropped["id"] == out["id"], (dropped, err)
    assert not path.is_symlink() and outside.read_text()  # the link went, its target stays


def test_a_prefix_two_proposals_share_is_ambiguous_and_an_unknown_one_not_found(
        repo: Path, cli: Callable[..., CliResult]) -> None:
    """Ids made in the same second share their first characters: such a prefix names neither
    proposal (approve and drop refuse it, nothing moves); an id no proposal holds is not found."""
    def common(a: str, b: str) -> str:
        n = next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(a))
        return a[:n]

    first = _propose(cli, repo)
    second = _propose(cli, repo, "The user wants every Python script to run under python3 -X dev.")
    if len(common(first["id"], second["id"])) < 6:  # the two fell either side of a 262 s boundary
        cli("drop", second["id"], cwd=repo)
        second = _propose(cli, repo, "The user wants every Python script to run under python3 -X dev.")
    shared = common(first["id"], second["id"])
    assert len(shared) >= 6, (first["id"], second["id"])
    commits = _commits()
    for verb in ("approve", "drop"):
        rc, out, err = cli(verb, shared[:6], cwd=repo)
        assert rc == 2 and out["error"]["code"] == "ambiguous_id", (out, err)
        rc, out, err = cli(verb, "0000000000", cwd=repo)
        assert rc == 3 and out["error"]["code"] == "not_found", (out, err)
    assert _commits() == commits and Path(first["path"]).is_file() and Path(second["path"]).is_file()


def test_proposals_behind_a_linked_pending_folder_are_never_read(repo: Path, tmp_path: Path,
                                                                  cli: Callable[..., CliResult]) -> None:
    """A pull may bring `.local/pending` as a link to a folder holding proposal files: `pending`
    lists none of them and `approve` finds none (nothing is read or committed through a link)."""
    out = _propose(cli, repo)
    path = Path(out["path"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / path.name).write_text(path.read_text())
    folder = path.parent
    path.unlink()
    folder.rmdir()
    folder.symlink_to(elsewhere)
    commits = _commits()
    rc, listed, err = cli("pending", cwd=repo)
    assert rc == 0 and listed["pending"] == [] and listed["unreadable"] == [], (listed, err)
    rc, refused, err = cli("approve", out["id"], cwd=repo)
    assert rc == 3 and refused["error"]["code"] == "not_found", (refused, err)
    assert _commits() == commits and (elsewhere / path.name).is_file()
