"""check: the example store passes; immutability, dangling links, --fix and --base for PR review."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import EXAMPLE_STORE, CliResult, git, make_git_repo, write_req

from memstore.store.files import parse_markdown
from memstore.store.workspace import open_workspace
from memstore.surfaces.output import pretty
from memstore.verbs import api


@pytest.fixture
def example_repo(tmp_path: Path) -> Path:
    """A fresh repo whose committed .memory/ is a copy of the example store."""
    root = make_git_repo(tmp_path / "example")
    shutil.copytree(EXAMPLE_STORE, root / ".memory", ignore=shutil.ignore_patterns(".index"))
    git(root, "add", ".memory")
    git(root, "commit", "-q", "-m", "add memories")
    return root


def _errors(out: dict) -> list[dict]:
    return [p for p in out["problems"] if p["severity"] == "error"]


def test_example_store_passes(example_repo: Path, cli: Callable[..., CliResult]) -> None:
    rc, out, _ = cli("check", cwd=example_repo)
    assert rc == 0, out
    assert out["ok"] is True and _errors(out) == []
    store = example_repo / ".memory"
    assert out["checked"] == len(list(store.glob("*/*.md"))) + len(list(store.glob("events/*.yaml")))
    # Its file: evidence points into a codebase this repo does not have: stale, never an error.
    stale = [p for p in out["problems"] if p["severity"] == "stale"]
    assert stale and all(p["code"] == "stale_evidence" for p in stale)


def test_modified_committed_memory_is_an_error(example_repo: Path, cli: Callable[..., CliResult]) -> None:
    target = next((example_repo / ".memory" / "facts").glob("*.md"))
    target.write_text(target.read_text().replace("\n---\n", "\n---\nEdited: ", 1))
    rel = target.relative_to(example_repo).as_posix()
    rc, out, _ = cli("check", cwd=example_repo)
    assert rc == 2 and out["ok"] is False
    assert [(p["path"], p["code"]) for p in _errors(out)] == [(rel, "immutable")]
    git(example_repo, "add", rel)
    rc, out, _ = cli("check", "--staged", cwd=example_repo)
    assert rc == 2
    assert [(p["path"], p["code"]) for p in _errors(out)] == [(rel, "immutable")]


def test_deleted_committed_memory_is_an_error(example_repo: Path, cli: Callable[..., CliResult]) -> None:
    target = next((example_repo / ".memory" / "preferences").glob("*.md"))
    rel = target.relative_to(example_repo).as_posix()
    git(example_repo, "rm", "-q", rel)
    rc, out, _ = cli("check", "--staged", cwd=example_repo)
    assert rc == 2
    assert [(p["path"], p["code"]) for p in _errors(out)] == [(rel, "immutable")]
    assert "deleted" in _errors(out)[0]["message"]


def test_dangling_link_in_hand_written_file(repo: Path, cli: Callable[..., CliResult]) -> None:
    (repo / ".memory" / "solutions" / "hand.md").write_text(
        "---\nkind: solution\nlinks:\n  problem: 01zzzzzzzzzzzzzzzzzzzzzzzz\nevidence: [user:x]\n---\nDo the thing.\n")
    rc, out, _ = cli("check", cwd=repo)
    assert rc == 2
    codes = {(p["path"], p["code"]) for p in _errors(out)}
    assert codes == {(".memory/solutions/hand.md", "dangling_link")}


def test_wrong_kind_and_missing_evidence_in_hand_written_file(repo: Path, cli: Callable[..., CliResult]) -> None:
    ws = open_workspace(cwd=repo)
    fact = api.write(ws, write_req("fact", "Uses Postgres 16"))["id"]
    (repo / ".memory" / "failed_tactics" / "hand.md").write_text(
        f"---\nkind: failed_tactic\nlinks:\n  problem: {fact}\n---\nTried X.\n")
    rc, out, _ = cli("check", cwd=repo)
    assert rc == 2
    assert {p["code"] for p in _errors(out)} == {"wrong_kind", "missing_evidence"}


def test_fix_writes_the_listed_id_and_created(repo: Path, cli: Callable[..., CliResult]) -> None:
    path = repo / ".memory" / "facts" / "hand-written.md"
    path.write_text("---\nkind: fact\nauthor: dana\nevidence: [\"user:told me\"]\n---\n"
                    "<!-- guidance -->\nThe staging DB is refreshed nightly.\n")
    rc, out, _ = cli("list", cwd=repo)
    (listed,) = out["memories"]
    rc, out, _ = cli("check", cwd=repo)
    assert rc == 0 and [p["code"] for p in out["problems"]] == ["missing_id"]  # a warning outside the hook
    git(repo, "add", ".memory")
    rc, out, _ = cli("check", "--staged", cwd=repo)
    assert rc == 2 and [p["code"] for p in _errors(out)] == ["missing_id"]
    rc, out, _ = cli("check", "--staged", "--fix", cwd=repo)
    assert rc == 2, out  # the staged copy still has no id: the commit it guards must wait
    assert out["fixed"] == [{"path": ".memory/facts/hand-written.md",
                             "message": f"wrote id {listed['id']} and created into the work tree copy"}]
    meta, body = parse_markdown(path.read_text())
    assert meta["id"] == listed["id"]
    assert meta["created"].endswith("Z") and meta["author"] == "dana"
    assert body == "The staging DB is refreshed nightly."
    # the fix is not staged (the hook stages nothing); the person reviews and stages it
    assert listed["id"] not in git(repo, "show", ":.memory/facts/hand-written.md")
    git(repo, "add", ".memory/facts/hand-written.md")
    rc, out, _ = cli("check", "--staged", cwd=repo)
    assert rc == 0 and out["problems"] == []
    rc, out, _ = cli("show", listed["id"], cwd=repo)
    assert rc == 0 and "id_is_provisional" not in out["memory"]["derived"]


def test_base_review_of_a_branch(repo: Path, cli: Callable[..., CliResult]) -> None:
    git(repo, "add", ".memory")
    git(repo, "commit", "-q", "-m", "memstore init")
    ws = open_workspace(cwd=repo)
    # A branch adding only valid memories passes.
    git(repo, "checkout", "-q", "-b", "good")
    api.write(ws, write_req("fact", "Releases are cut from main on Tuesdays."))
    git(repo, "commit", "-q", "-m", "add fact")
    rc, out, _ = cli("check", "--base", "main", cwd=repo)
    assert rc == 0 and out["ok"] is True and out["checked"] == 1
    # A branch adding an invalid memory fails, naming the file.
    git(repo, "checkout", "-q", "-b", "bad", "main")
    bad = repo / ".memory" / "problems" / "bad.md"
    bad.write_text("---\nid: 01m80aaaaaaaaaaaaaaaaaaaaa\nkind: problem\ncreated: 2026-11-20T10:00:00Z\n---\n"
                   "A problem with no evidence.\n")
    git(repo, "add", ".memory")
    git(repo, "commit", "-q", "-m", "add bad problem")
    rc, out, _ = cli("check", "--base", "main", cwd=repo)
    assert rc == 2 and out["ok"] is False
    assert [(p["path"], p["code"]) for p in _errors(out)] == [(".memory/problems/bad.md", "missing_evidence")]
    # the readable report (what a person sees in CI on a terminal) names the file and the rule
    report = pretty(out, "check")
    assert "error: .memory/problems/bad.md: at least one evidence ref is required" in report
    assert "1 error(s)" in report


def test_base_that_does_not_resolve(repo: Path, cli: Callable[..., CliResult]) -> None:
    rc, out, err = cli("check", "--base", "no-such-branch", cwd=repo)
    assert rc == 3 and out["error"]["code"] == "unknown_rev" and "no-such-branch" in out["error"]["message"]
    assert "Traceback" not in err


def test_a_non_finite_confidence_in_a_file_is_invalid_and_output_stays_json(repo: Path,
                                                                            cli: Callable[..., CliResult]) -> None:
    """Issue #13: `confidence: .nan` in a hand-written file came out as NaN, which is not JSON."""
    path = repo / ".memory" / "facts" / "nan.md"
    path.write_text("---\nkind: fact\nconfidence: .nan\nevidence: ['user:x']\n---\nThe cache is warm.\n")
    proc = subprocess.run([sys.executable, "-m", "memstore", "list"], cwd=repo, capture_output=True, text=True,
                          check=False, stdin=subprocess.DEVNULL)
    answer = json.loads(proc.stdout, parse_constant=lambda name: pytest.fail(f"{name} in the output"))
    assert answer["count"] == 0 and answer["invalid"][0]["path"].endswith("nan.md")
    rc, out, _ = cli("check", cwd=repo)
    assert rc == 2 and [p["code"] for p in out["problems"]] == ["schema"]  # a number that is not finite


def test_check_scans_the_whole_text_of_memory_event_and_config_files(repo: Path,
                                                                      cli: Callable[..., CliResult]) -> None:
    """Without --staged (a work tree, or a PR checkout with --base), a token under a key memstore
    does not parse or in a comment is reported like one in the text."""
    token = "ghp_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"
    git(repo, "commit", "-q", "-m", "layout")
    git(repo, "checkout", "-q", "-b", "pr")
    fact = repo / ".memory" / "facts" / "01m7eeeeeeeeeeeeeeeeeeeeee-ci.md"
    fact.write_text("---\nid: 01m7eeeeeeeeeeeeeeeeeeeeee\nkind: fact\ncreated: 2026-11-20T10:00:00Z\n"
                    f"evidence: ['user:ops']\nreviewer_note: {token}\n---\nCI runs on Python 3.11.\n")
    config = repo / ".memory" / "config.yaml"
    config.write_text(config.read_text() + f"# token {token}\n")
    code, out, _ = cli("check", cwd=repo)
    assert code != 0
    assert {(p["path"].rsplit("/", 1)[-1], p["code"]) for p in _errors(out)} == {
        ("01m7eeeeeeeeeeeeeeeeeeeeee-ci.md", "secret"), ("config.yaml", "secret")}
    assert token not in json.dumps(out)
    git(repo, "add", ".memory")
    git(repo, "commit", "-q", "--no-verify", "-m", "pr")
    code, out, _ = cli("check", "--base", "main", cwd=repo)  # the reviewer's run: the added file
    assert code != 0 and [p["code"] for p in _errors(out)] == ["secret"], out


def _hand_written(repo: Path, folder: str, mid: str, kind: str, links: str) -> str:
    rel = f".memory/{folder}/{mid}-hand.md"
    (repo / rel).write_text(f"---\nid: {mid}\nkind: {kind}\nscope: repo\ncreated: 2026-11-20T10:00:00Z\n"
                            f"links:\n{links}evidence: ['user:ops']\n---\nWritten by hand for review.\n")
    return rel


def test_check_refuses_wrong_kind_links_and_a_repo_memory_reusing_a_global_id(repo: Path, cli: Callable[..., CliResult],
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """What `write` refuses, a hand-written or cloned file must not slip past `check` with: a
    fact superseding a problem, a via_change that is no change, a solution whose problem is a
    fact, a repo memory taking a global memory's id."""
    monkeypatch.setenv("MEMSTORE_WRITE_MODE", "autonomous")  # a global write in review mode waits for approval
    ws = open_workspace(cwd=repo)
    problem = api.write(ws, write_req("problem", "Webhook retries pile up"))["id"]
    fact = api.write(ws, write_req("fact", "Webhooks retry three times"))["id"]
    change = api.write(ws, write_req("change", "Retries moved to the queue", links={"change_targets": [fact]}))["id"]
    global_id = api.write(ws, write_req("preference", "Prefer small commits", scope="global"))["id"]
    code, out, _ = cli("check", cwd=repo)
    assert code == 0, out
    bad = {
        _hand_written(repo, "facts", "01m7ffffffffffffffffffff01", "fact", f"  supersedes: [{problem}]\n"):
            ("wrong_kind", "links.supersedes points at a problem"),
        _hand_written(repo, "facts", "01m7ffffffffffffffffffff02", "fact",
                      f"  supersedes: [{fact}]\n  via_change: {fact}\n"):
            ("wrong_kind", "links.via_change points at a fact"),
        _hand_written(repo, "solutions", "01m7ffffffffffffffffffff03", "solution", f"  problem: {fact}\n"):
            ("wrong_kind", "links.problem points at a fact"),
        _hand_written(repo, "facts", global_id, "fact", f"  related: [{fact}]\n"):
            ("id_conflict", f"id {global_id} is global memory"),
    }
    good = _hand_written(repo, "facts", "01m7ffffffffffffffffffff04", "fact",
                         f"  supersedes: [{fact}]\n  via_change: {change}\n")
    code, out, _ = cli("check", cwd=repo)
    assert code != 0
    found = {(p["path"].removeprefix(".memory/"), p["code"]): p["message"] for p in _errors(out)}
    for rel, (err, message) in bad.items():
        assert message in found.pop((rel.removeprefix(".memory/"), err)), out
    assert not found, found  # nothing else, and nothing on the good file
    assert not any(good.removeprefix(".memory/") in p["path"] for p in out["problems"] if p["severity"] == "error")


def test_stale_evidence_is_exactly_what_the_clone_no_longer_has(repo: Path, cli: Callable[..., CliResult]) -> None:
    """Evidence whose file left the work tree or whose commit is not in the clone is stale (a
    warning for a person, not an error); evidence that still resolves is not reported at all."""
    head = git(repo, "rev-parse", "HEAD").strip()
    (repo / "src" / "gone.py").write_text("x = 1\n")
    ws = open_workspace(cwd=repo)
    mid = api.write(ws, write_req("fact", "The app's entry point returns 42", evidence=[
        "file:src/app.py", "file:src/gone.py", f"commit:{head}", "user:the lead"]))["id"]
    (repo / "src" / "gone.py").unlink()
    path = next((repo / ".memory" / "facts").glob(f"{mid}-*.md"))
    path.write_text(path.read_text().replace(f"commit:{head}", f"commit:{head}', 'commit:{'e' * 40}"))
    code, out, _ = cli("check", cwd=repo)
    assert code == 0 and _errors(out) == [], out
    assert sorted(p["message"].split(":", 2)[1] for p in out["problems"] if p["severity"] == "stale") == [
        "e" * 40, "src/gone.py"], out
    assert len(out["problems"]) == 2, out


def test_typed_relations_between_repo_memories_are_checked_not_refused(repo: Path,
                                                                       cli: Callable[..., CliResult]) -> None:
    """A repo memory may relate to another repo memory (a dispute is a warning to settle, not an
    error); a relation to itself or to nothing is an error."""
    ws = open_workspace(cwd=repo)
    fact = api.write(ws, write_req("fact", "Webhooks retry three times"))["id"]
    other = "01m7ffffffffffffffffffff11"
    ok = _hand_written(repo, "facts", other, "fact", f"  relations: [{{type: contradicts, id: {fact}}}]\n")
    code, out, _ = cli("check", cwd=repo)
    assert code == 0 and _errors(out) == [], out
    assert [(p["code"], p["severity"]) for p in out["problems"]] == [("open_dispute", "warning")], out
    (repo / ok).unlink()
    _hand_written(repo, "facts", other, "fact", f"  relations: [{{type: contradicts, id: {other}}}, "
                  "{type: relates_to, id: 01m7zzzzzzzzzzzzzzzzzzzz99}]\n")
    code, out, _ = cli("check", cwd=repo)
    assert code != 0 and sorted(p["code"] for p in _errors(out)) == ["dangling_link", "self_link"], out


def test_check_refuses_votes_out_of_range_and_events_acting_on_another_store(repo: Path, cli: Callable[..., CliResult],
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A vote must lie in [-1, 1]; a repo event may not act on a global memory (it would be
    ignored, so check says so rather than let it look effective)."""
    monkeypatch.setenv("MEMSTORE_WRITE_MODE", "autonomous")  # a global write in review mode waits for approval
    ws = open_workspace(cwd=repo)
    fact = api.write(ws, write_req("fact", "Webhooks retry three times"))["id"]
    global_id = api.write(ws, write_req("preference", "Prefer small commits", scope="global"))["id"]
    events = repo / ".memory" / "events"
    events.mkdir(exist_ok=True)

    def vote(eid: str, memory: str, value: str) -> str:
        (events / f"{eid}.yaml").write_text(f"id: {eid}\ntype: utility_vote\nmemory: {memory}\nvote: {value}\n"
                                            "created: 2026-11-20T11:00:00Z\nauthor: ops\n")
        return f"events/{eid}.yaml"

    vote("01m7gggggggggggggggggggg01", fact, "1")
    vote("01m7gggggggggggggggggggg02", fact, "-1")
    code, out, _ = cli("check", cwd=repo)
    assert code == 0 and _errors(out) == [], out
    high = vote("01m7gggggggggggggggggggg03", fact, "5")
    crossing = vote("01m7gggggggggggggggggggg04", global_id, "1")
    code, out, _ = cli("check", cwd=repo)
    assert code != 0
    assert sorted((p["path"].rsplit("/", 2)[-2] + "/" + p["path"].rsplit("/", 1)[-1], p["code"])
                  for p in _errors(out)) == sorted([(high, "schema"), (crossing, "scope_crossing")]), out


def test_the_global_store_is_checked_only_when_asked(repo: Path, tmp_path: Path,
                                                     cli: Callable[..., CliResult]) -> None:
    """`check` in a repo judges the repo's store; `check --global` adds the global store (whose
    memories are not compared with themselves for reused ids)."""
    ws = open_workspace(cwd=repo)
    api.write(ws, write_req("preference", "Prefer small commits", scope="global"))
    code, out, _ = cli("check", "--global", cwd=repo)
    assert code == 0 and _errors(out) == [], out
    broken = tmp_path / "home" / ".memory" / "preferences" / "01m7hhhhhhhhhhhhhhhhhhhh01-broken.md"
    broken.write_text("---\nid: [not, an, id\n---\nbroken\n")
    code, out, _ = cli("check", cwd=repo)
    assert code == 0 and _errors(out) == [], out
    code, out, _ = cli("check", "--global", cwd=repo)
    assert code != 0 and [p["path"].rsplit("/", 1)[-1] for p in _errors(out)] == [broken.name], out
