"""The rules `check` enforces, one precise assertion each, through the library (`run_check`,
`check_memory`, `name_problem`) on real git repos: what is refused, what passes and what the
finding says. Every test works on a copy of one repo made once for the module (the CLI and the
hook are tested in test_check.py and test_hooks.py); this file is the fast first line of
bench/mutation.py for git/check.py."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import git, make_git_repo
from moduleworld import hermetic_env

from memstore import gitops
from memstore.errors import InvalidFile, NoStore, NotFound
from memstore.git.check import Report, check_memory, name_problem, run_check
from memstore.store.workspace import open_workspace
from memstore.verbs import api

TOKEN = "ghp_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"


def _id(tag: str, n: int) -> str:
    """A 26-character id: 01m7, twenty times ``tag``, two digits."""
    return f"01m7{tag * 20}{n:02d}"


P1, P2, F1, F2, F3, C1, S1 = (_id("p", 1), _id("p", 2), _id("f", 1), _id("f", 2), _id("f", 3), _id("c", 1),
                              _id("s", 1))
G1, G2 = _id("g", 1), _id("g", 2)
E = [_id("e", n) for n in range(1, 20)]
EPISODE = _id("h", 1)


@pytest.fixture(scope="module")
def base_repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A repo with memstore's layout committed, made once: each test gets a copy (``work``)."""
    root = tmp_path_factory.mktemp("check-rules")
    with hermetic_env(root):
        repo = make_git_repo(root / "repo")
        gitops.toplevel.cache_clear()
        api.init(open_workspace(cwd=repo))
        git(repo, "add", ".memory")
        git(repo, "commit", "-q", "-m", "memstore init")
        gitops.toplevel.cache_clear()
    shutil.rmtree(repo / ".memory" / ".index", ignore_errors=True)
    yield repo


@pytest.fixture
def work(base_repo: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "repo"
    shutil.copytree(base_repo, dest, symlinks=True)
    return dest


@pytest.fixture
def home_store(tmp_path: Path) -> Path:
    """The global store (``~/.memory``), created."""
    root = tmp_path / "home" / ".memory"
    api.init(open_workspace(cwd=tmp_path), global_store=True)
    return root


FOLDERS = {"problem": "problems", "solution": "solutions", "failed_tactic": "failed_tactics", "fact": "facts",
           "change": "changes", "preference": "preferences"}


def memory(store: Path, kind: str, mid: str | None, text: str = "Written by hand for review.", *,
           links: str = "", evidence: str | None = "['user:ops']", extra: str = "", scope: str = "repo",
           name: str | None = None) -> str:
    """A hand-written memory file; returns its store-relative path."""
    rel = f"{FOLDERS[kind]}/{name or f'{mid}-hand'}.md"
    head = f"id: {mid}\n" if mid else ""
    head += f"kind: {kind}\nscope: {scope}\ncreated: 2026-11-20T10:00:00Z\n"
    if links:
        head += f"links:\n{links}"
    if evidence is not None:
        head += f"evidence: {evidence}\n"
    path = store / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\n{head}{extra}---\n{text}\n")
    return rel


def event(store: Path, eid: str, body: str) -> str:
    rel = f"events/{eid}.yaml"
    (store / "events").mkdir(exist_ok=True)
    (store / rel).write_text(f"id: {eid}\ncreated: 2026-11-20T11:00:00Z\nauthor: ops\n{body}")
    return rel


def check(repo: Path, **kw: object) -> Report:
    gitops.toplevel.cache_clear()
    return run_check(open_workspace(cwd=repo), **kw)  # type: ignore[arg-type]


def found(report: Report) -> list[tuple[str, str, str]]:
    """(severity, path under the store, code) of every finding, in order."""
    return [(f.severity, f.path.split(".memory/", 1)[-1], f.code) for f in report.problems]


def messages(report: Report, code: str) -> list[str]:
    return [f.message for f in report.problems if f.code == code]


def commit(repo: Path, message: str = "memories") -> None:
    git(repo, "add", "-A", ".memory")
    git(repo, "commit", "-q", "--no-verify", "-m", message)


# -- a clean store ----------------------------------------------------------------------------------

def test_a_valid_store_passes_and_counts_what_it_read(work: Path) -> None:
    store = work / ".memory"
    memory(store, "problem", P1)
    memory(store, "solution", S1, links=f"  problem: {P1}\n")
    event(store, E[0], f"type: utility_vote\nmemory: {S1}\nvote: 1\n")
    report = check(work)
    assert found(report) == [] and report.ok and report.checked == 3
    assert report.to_json() == {"ok": True, "checked": 3, "problems": [], "fixed": []}
    commit(work)
    assert found(check(work, staged=True)) == [] and check(work, staged=True).checked == 3


def test_an_error_makes_the_report_not_ok_a_warning_does_not(work: Path) -> None:
    store = work / ".memory"
    memory(store, "fact", None, name="no-id-yet")  # a warning outside the hook
    report = check(work)
    assert found(report) == [("warning", "facts/no-id-yet.md", "missing_id")] and report.ok
    memory(store, "fact", F1, evidence=None)
    report = check(work)
    assert not report.ok and report.to_json()["ok"] is False
    assert report.to_json()["problems"][0] == {"severity": "error", "path": f".memory/facts/{F1}-hand.md",
                                               "code": "missing_evidence",
                                               "message": "at least one evidence ref is required"}


# -- where there is no store ------------------------------------------------------------------------

def test_no_store_is_a_typed_error(tmp_path: Path) -> None:
    bare = make_git_repo(tmp_path / "bare")
    with pytest.raises(NoStore):
        check(bare)


def test_a_linked_store_folder_is_refused(work: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    shutil.move(work / ".memory", elsewhere)
    (work / ".memory").symlink_to(elsewhere)
    with pytest.raises(InvalidFile) as err:
        check(work)
    assert err.value.code == "not_regular"


def test_the_global_store_is_checked_only_when_asked(work: Path, home_store: Path) -> None:
    memory(home_store, "preference", G1, scope="global", evidence=None)
    assert found(check(work)) == []
    assert found(check(work, include_global=True)) == [("error", f"preferences/{G1}-hand.md",
                                                        "missing_evidence")]


def test_the_global_store_alone_outside_a_repo(tmp_path: Path, home_store: Path) -> None:
    memory(home_store, "preference", G1, scope="global", evidence=None)
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(NoStore):
        check(plain)
    report = check(plain, include_global=True)
    assert [(f.severity, f.code) for f in report.problems] == [("error", "missing_evidence")]
    assert report.checked == 1


# -- immutability of what is committed -------------------------------------------------------------

def test_a_modified_committed_memory_is_refused_naming_its_id(work: Path) -> None:
    store = work / ".memory"
    rel = memory(store, "fact", F1)
    commit(work)
    (store / rel).write_text((store / rel).read_text().replace("by hand", "by a second hand"))
    report = check(work)
    assert found(report) == [("error", rel, "immutable")]
    (message,) = messages(report, "immutable")
    assert "was modified" in message and f"--memory {F1} " in message
    assert f"git restore --source=HEAD --staged --worktree -- .memory/{rel}" in message
    git(work, "add", ".memory")
    assert found(check(work, staged=True)) == [("error", rel, "immutable")]


def test_a_committed_file_not_named_by_its_id_says_id(work: Path) -> None:
    store = work / ".memory"
    rel = memory(store, "fact", F1, name="named-by-hand")
    commit(work)
    (store / rel).write_text((store / rel).read_text() + "More.\n")
    (message,) = messages(check(work), "immutable")
    assert "--memory ID " in message


def test_a_deleted_committed_memory_is_refused(work: Path) -> None:
    store = work / ".memory"
    rel = memory(store, "fact", F1)
    commit(work)
    git(work, "rm", "-q", f".memory/{rel}")
    report = check(work, staged=True)
    assert found(report) == [("error", rel, "immutable")]
    assert "was deleted" in messages(report, "immutable")[0]


def test_a_committed_memory_turned_into_a_link_is_refused(work: Path) -> None:
    store = work / ".memory"
    rel = memory(store, "fact", F1)
    commit(work)
    (store / rel).unlink()
    (store / rel).symlink_to("/etc/hostname")
    git(work, "add", ".memory")
    assert ("error", rel, "immutable") in found(check(work, staged=True))


def test_a_modified_committed_event_says_to_write_a_new_one(work: Path) -> None:
    store = work / ".memory"
    memory(store, "fact", F1)
    rel = event(store, E[0], f"type: utility_vote\nmemory: {F1}\nvote: 1\n")
    commit(work)
    (store / rel).write_text((store / rel).read_text().replace("vote: 1", "vote: -1"))
    report = check(work)
    assert found(report) == [("error", rel, "immutable")]
    assert "a new event (`memstore update`)" in messages(report, "immutable")[0]


def test_what_is_not_a_committed_memory_may_change(work: Path) -> None:
    """A .gitkeep of a kind folder, config.yaml (rewritten, not appended to), a file added
    since the last commit, code outside the store: none is immutable."""
    store = work / ".memory"
    git(work, "rm", "-q", ".memory/facts/.gitkeep")
    config = store / "config.yaml"
    config.write_text(config.read_text().replace("write_mode: review", "write_mode: autonomous"))
    memory(store, "fact", F1)
    (work / "src" / "app.py").write_text("def main():\n    return 43\n")
    git(work, "add", "-A")
    assert found(check(work)) == [] and found(check(work, staged=True)) == []


# -- episodes are append-only ----------------------------------------------------------------------

def _episode(store: Path, rows: int) -> str:
    rel = f"episodes/2026-11/{EPISODE}.jsonl"
    (store / "episodes" / "2026-11").mkdir(parents=True, exist_ok=True)
    (store / rel).write_text("".join(json.dumps({"seq": n, "type": "note", "text": f"row {n}"}) + "\n"
                                     for n in range(1, rows + 1)))
    return rel


def test_an_episode_may_grow_but_not_be_rewritten_or_deleted(work: Path) -> None:
    store = work / ".memory"
    rel = _episode(store, 2)
    commit(work)
    _episode(store, 3)  # appended
    assert found(check(work)) == []
    git(work, "add", ".memory")
    assert found(check(work, staged=True)) == []
    # the staged copy appends; the work tree rewrites: each check judges its own
    (store / rel).write_text('{"seq": 1, "type": "note", "text": "rewritten"}\n')
    assert found(check(work, staged=True)) == []
    report = check(work)
    assert found(report) == [("error", rel, "immutable")]
    assert messages(report, "immutable") == ["episodes are append-only but committed lines were changed"]
    git(work, "rm", "-q", "-f", f".memory/{rel}")
    report = check(work, staged=True)
    assert found(report) == [("error", rel, "immutable")]
    assert "a committed episode was deleted" in messages(report, "immutable")[0]


# -- --base: a branch under review ------------------------------------------------------------------

def test_an_unknown_base_is_a_typed_error(work: Path) -> None:
    with pytest.raises(NotFound) as err:
        check(work, base="no-such-branch")
    assert err.value.code == "unknown_rev" and "no-such-branch" in err.value.message


def test_base_judges_only_what_the_branch_adds(work: Path) -> None:
    store = work / ".memory"
    old = memory(store, "fact", F1, evidence=None)  # committed before the branch: reviewed before
    (store / "facts" / "tab\there.md").write_text("---\nkind: fact\nevidence: ['user:x']\n---\nOld.\n")
    event(store, E[0], "type: archive\nmemory: " + F1 + "\narchived: true\n")
    commit(work)
    git(work, "checkout", "-q", "-b", "topic")
    added = memory(store, "fact", F2, evidence=None)
    commit(work, "topic")
    report = check(work, base="main")
    assert found(report) == [("error", added, "missing_evidence")] and report.checked == 1
    assert ("error", old, "missing_evidence") in found(check(work))


def test_base_compares_against_the_merge_base_not_the_base_tip(work: Path) -> None:
    store = work / ".memory"
    git(work, "checkout", "-q", "-b", "topic")
    added = memory(store, "fact", F2)
    commit(work, "topic")
    git(work, "checkout", "-q", "main")
    memory(store, "fact", F1)  # main moves on after the branch left it
    commit(work, "main moves on")
    git(work, "checkout", "-q", "topic")
    report = check(work, base="main")
    assert found(report) == [] and report.checked == 1
    assert not (store / "facts" / f"{F1}-hand.md").exists()
    assert added


def test_base_strict_ids_a_file_without_id_is_an_error(work: Path) -> None:
    git(work, "checkout", "-q", "-b", "topic")
    rel = memory(work / ".memory", "fact", None, name="no-id")
    commit(work, "topic")
    assert found(check(work, base="main")) == [("error", rel, "missing_id")]


def test_base_names_a_memory_reusing_a_global_id_only_when_added(work: Path, home_store: Path) -> None:
    memory(home_store, "preference", G1, scope="global")
    old = memory(work / ".memory", "fact", G1)
    commit(work)
    git(work, "checkout", "-q", "-b", "topic")
    new = memory(work / ".memory", "fact", G2)
    memory(home_store, "preference", G2, scope="global")
    commit(work, "topic")
    got = found(check(work, base="main"))
    assert got == [("error", new, "id_conflict")], got
    assert sorted(found(check(work))) == sorted([("error", new, "id_conflict"), ("error", old, "id_conflict")])


def test_base_reports_invalid_files_and_events_only_when_added(work: Path) -> None:
    store = work / ".memory"
    (store / "facts" / "broken-old.md").write_text("---\nid: [not\n---\nx\n")
    memory(store, "fact", F1)
    event(store, E[0], "type: utility_vote\nmemory: " + _id("z", 9) + "\nvote: 1\n")
    commit(work)
    git(work, "checkout", "-q", "-b", "topic")
    (store / "facts" / "broken-new.md").write_text("---\nid: [not\n---\nx\n")
    ev = event(store, E[1], "type: utility_vote\nmemory: " + _id("z", 8) + "\nvote: 1\n")
    commit(work, "topic")
    report = check(work, base="main")
    assert sorted(found(report)) == [("error", ev, "dangling_link"), ("error", "facts/broken-new.md", "invalid_file")]
    assert report.checked == 2


def test_base_reports_a_secret_only_in_an_added_file(work: Path) -> None:
    store = work / ".memory"
    memory(store, "fact", F1, extra=f"note: {TOKEN}\n")
    commit(work)
    git(work, "checkout", "-q", "-b", "topic")
    new = memory(store, "fact", F2, extra=f"note: {TOKEN}\n")
    commit(work, "topic")
    assert found(check(work, base="main")) == [("error", new, "secret")]


def test_base_reports_a_dispute_touching_the_branch(work: Path) -> None:
    store = work / ".memory"
    memory(store, "fact", F1)
    commit(work)
    git(work, "checkout", "-q", "-b", "topic")
    assert found(check(work, base="main")) == []
    rel = memory(store, "fact", F2, links=f"  relations: [{{type: contradicts, id: {F1}}}]\n")
    commit(work, "topic")
    assert found(check(work, base="main")) == [("warning", rel, "open_dispute")]


# -- names -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["facts/plain-name.md", "facts/café.md", "facts/a b.md", "facts/a\u00a0b.md"])
def test_names_memstore_or_a_person_would_choose_pass(name: str) -> None:
    assert name_problem(name) is None


@pytest.mark.parametrize(("name", "said"), [
    ("facts/a\tb.md", "'\\t' (U+0009) at position 7"),
    ('facts/a"b.md', "'\"' (U+0022) at position 7"),
    ("facts/a\\b.md", "'\\\\' (U+005C) at position 7"),
    ("facts/a\u202eb.md", "(U+202E) at position 7"),
    ("facts/a\u2028b.md", "(U+2028) at position 7"),
    ("facts/a\x1bb.md", "(U+001B) at position 7"),
])
def test_names_git_quotes_or_that_hide_their_text_are_refused(name: str, said: str) -> None:
    problem = name_problem(name)
    assert problem is not None and said in problem


def test_a_name_that_is_not_utf8_is_refused_as_such() -> None:
    assert name_problem("facts/a" + b"\xff".decode("utf-8", "surrogateescape") + ".md") == \
        "the file name holds a byte that is not UTF-8 at position 7"


def test_a_bad_name_in_the_work_tree_is_refused(work: Path) -> None:
    store = work / ".memory"
    (store / "facts" / "a\tb.md").write_text("---\nkind: fact\nevidence: ['user:x']\n---\nTabbed.\n")
    report = check(work)
    assert ("error", "facts/a\tb.md", "bad_name") in found(report)
    assert "rename it (`git mv`)" in messages(report, "bad_name")[0]


def test_a_bad_name_added_by_a_commit_is_refused_once_committed_it_is_not(work: Path) -> None:
    store = work / ".memory"
    (store / "notes").mkdir()
    (store / "notes" / 'say"what".txt').write_text("any file under the store travels\n")
    git(work, "add", ".memory")
    assert found(check(work, staged=True)) == [("error", 'notes/say"what".txt', "bad_name")]
    commit(work)
    memory(store, "fact", F1)
    git(work, "add", ".memory")
    assert found(check(work, staged=True)) == []


def test_a_first_commit_names_every_staged_file(tmp_path: Path) -> None:
    root = tmp_path / "fresh"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    gitops.toplevel.cache_clear()
    api.init(open_workspace(cwd=root))
    (root / ".memory" / "notes").mkdir()
    (root / ".memory" / "notes" / "a\\b.txt").write_text("x\n")
    rel = memory(root / ".memory", "fact", F1)
    git(root, "add", ".memory")
    report = check(root, staged=True)
    assert found(report) == [("error", "notes/a\\b.txt", "bad_name")] and report.checked == 1
    assert found(check(root)) == []
    assert rel


# -- files git must not carry ----------------------------------------------------------------------

def test_committed_projection_folders_are_refused(work: Path) -> None:
    store = work / ".memory"
    for folder in (".index", ".local"):
        (store / folder).mkdir(exist_ok=True)
        (store / folder / "state.json").write_text("{}\n")
        git(work, "add", "-f", f".memory/{folder}/state.json")
    report = check(work, staged=True)
    assert [(f.path, f.code) for f in report.problems] == [(".memory/.index/state.json", "committed_projection"),
                                                           (".memory/.local/state.json", "committed_projection")]
    assert "git rm -r --cached .memory/.index" in report.problems[0].message


# -- the rules a memory must keep ------------------------------------------------------------------

def test_links_a_kind_needs(work: Path) -> None:
    store = work / ".memory"
    memory(store, "problem", P1)
    memory(store, "fact", F1)
    ok = [memory(store, "solution", S1, links=f"  problem: {P1}\n"),
          memory(store, "failed_tactic", _id("t", 1), links=f"  problem: {P1}\n"),
          memory(store, "change", C1, links=f"  change_targets: [{F1}]\n")]
    bad = [memory(store, "solution", _id("s", 2)), memory(store, "failed_tactic", _id("t", 2)),
           memory(store, "change", _id("c", 2))]
    report = check(work)
    assert sorted(found(report)) == sorted(("error", rel, "missing_link") for rel in bad)
    assert sorted(messages(report, "missing_link")) == ["a change must list change_targets",
                                                        "a failed_tactic must link its problem (links.problem)",
                                                        "a solution must link its problem (links.problem)"]
    assert ok


@pytest.mark.parametrize(("value", "code"), [("0", "low_confidence"), ("0.2", "low_confidence"), ("0.5", None),
                                             ("1", None), ("1.2", "schema"), ("-0.1", "schema")])
def test_confidence_lies_in_0_1(work: Path, value: str, code: str | None) -> None:
    rel = memory(work / ".memory", "fact", F1, extra=f"confidence: {value}\n")
    report = check(work)
    if code == "low_confidence":
        assert found(report) == [("warning", rel, "low_confidence")]
        said = f"written with confidence {float(value):g}, below review.confidence_below 0.5"
        assert said in report.problems[0].message
    elif code == "schema":
        assert [(s, p, c) for s, p, c in found(report) if s == "error"] == [("error", rel, "schema")]
    else:
        assert found(report) == []


def test_a_low_confidence_memory_confirmed_by_a_vote_is_not_flagged(work: Path) -> None:
    store = work / ".memory"
    memory(store, "fact", F1, extra="confidence: 0.2\n")
    event(store, E[0], f"type: utility_vote\nmemory: {F1}\nvote: 1\n")
    assert found(check(work)) == []


def test_text_may_be_as_long_as_the_limit_and_no_longer(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTORE_MAX_TEXT_CHARS", "40")
    store = work / ".memory"
    memory(store, "fact", F1, "x" * 40)
    long = memory(store, "fact", F2, "y" * 41)
    report = check(work)
    assert found(report) == [("error", long, "too_large")]
    assert messages(report, "too_large") == ["text is over 40 characters"]


@pytest.mark.parametrize("where", ["text", "author", "rationale", "evidence", "tags"])
def test_a_control_character_in_any_field_is_refused(work: Path, where: str) -> None:
    esc = "\\x1b[31m"
    text, extra, evidence = "Plain text.", "", "['user:ops']"
    if where == "text":
        text = "Red \x1b[31m text."
    elif where == "evidence":
        evidence = f'["user:ops {esc}"]'
    else:
        extra = f'{where}: {"[" if where == "tags" else ""}"a {esc}"{"]" if where == "tags" else ""}\n'
    rel = memory(work / ".memory", "fact", F1, text, extra=extra, evidence=evidence)
    report = check(work)
    assert found(report) == [("error", rel, "bad_chars")]
    assert report.problems[0].message.endswith("; remove it (terminal escapes, NULs and the like do not belong "
                                               "in a memory)")
    assert "U+001B" in report.problems[0].message or "\\x1b" in report.problems[0].message


def test_link_targets_must_exist_and_be_of_the_right_kind(work: Path) -> None:
    store = work / ".memory"
    memory(store, "problem", P1)
    memory(store, "fact", F1)
    memory(store, "change", C1, links=f"  change_targets: [{F1}]\n")
    good = memory(store, "fact", F2, links=f"  supersedes: [{F1}]\n  via_change: {C1}\n  related: [{P1}]\n")
    wrong = {
        memory(store, "fact", _id("f", 4), links=f"  supersedes: [{P1}]\n"): "links.supersedes points at a problem",
        memory(store, "fact", _id("f", 5), links=f"  supersedes: [{F1}]\n  via_change: {F1}\n"):
            "links.via_change points at a fact",
        memory(store, "solution", S1, links=f"  problem: {F1}\n"): "links.problem points at a fact",
    }
    missing = {
        memory(store, "solution", _id("s", 2), links=f"  problem: {P2}\n"): f"links.problem points at {P2}",
        memory(store, "fact", _id("f", 6), links=f"  related: [{P2}]\n"): f"links.related points at {P2}",
        memory(store, "change", _id("c", 2), links=f"  change_targets: [{P2}]\n"):
            f"links.change_targets points at {P2}",
    }
    report = check(work)
    assert sorted(found(report)) == sorted([*(("error", r, "wrong_kind") for r in wrong),
                                            *(("error", r, "dangling_link") for r in missing)])
    assert sorted(messages(report, "wrong_kind")) == sorted(wrong.values())
    assert all(m.endswith(", which does not exist") for m in messages(report, "dangling_link"))
    assert sorted(m.split(",")[0] for m in messages(report, "dangling_link")) == sorted(missing.values())
    assert good


def test_a_global_memory_may_not_link_a_repo_memory(work: Path, home_store: Path) -> None:
    memory(work / ".memory", "fact", F1)
    memory(home_store, "preference", G2, scope="global")
    rel = memory(home_store, "preference", G1, scope="global", links=f"  related: [{F1}, {G2}]\n")
    rel2 = memory(home_store, "preference", _id("g", 3), scope="global",
                  links=f"  relations: [{{type: depends_on, id: {F1}}}, {{type: depends_on, id: {G2}}}]\n")
    report = check(work, include_global=True)
    assert sorted(found(report)) == sorted([("error", rel, "global_to_repo"),
                                            ("error", rel2, "global_to_repo")])
    assert sorted(messages(report, "global_to_repo")) == [
        f"links.related: a global memory may not link repo memory {F1}",
        f"links.relations: a global memory may not link repo memory {F1}"]


def test_a_repo_memory_may_link_a_global_one(work: Path, home_store: Path) -> None:
    memory(home_store, "preference", G1, scope="global")
    memory(work / ".memory", "fact", F1, links=f"  related: [{G1}]\n  relations: [{{type: depends_on, id: {G1}}}]\n")
    assert found(check(work)) == []


def test_links_to_an_archived_memory_are_warnings(work: Path) -> None:
    store = work / ".memory"
    memory(store, "fact", F1)
    memory(store, "fact", F3)
    event(store, E[0], f"type: archive\nmemory: {F1}\narchived: true\nevidence: ['user:gone']\n")
    both = memory(store, "fact", F2, links=f"  related: [{F1}]\n  relations: [{{type: relates_to, id: {F1}}}]\n")
    typed = memory(store, "fact", _id("f", 4), links=f"  relations: [{{type: depends_on, id: {F1}}}]\n")
    live = memory(store, "fact", _id("f", 5),
                  links=f"  related: [{F3}]\n  relations: [{{type: depends_on, id: {F3}}}]\n")
    report = check(work)
    # relates_to a memory also in links.related is judged once, as links.related
    assert sorted(found(report)) == sorted([("warning", both, "archived_link"), ("warning", typed, "archived_link")])
    assert sorted(messages(report, "archived_link")) == [f"links.related: {F1} is archived",
                                                         f"links.relations: depends_on points at {F1}, which is "
                                                         "archived"]
    assert live


def test_a_relation_to_itself_or_to_nothing_is_refused(work: Path) -> None:
    store = work / ".memory"
    memory(store, "fact", F1)
    own = memory(store, "fact", F2, links=f"  relations: [{{type: depends_on, id: {F2}}}]\n")
    gone = memory(store, "fact", F3, links=f"  relations: [{{type: relates_to, id: {P2}}}]\n")
    report = check(work)
    assert sorted(found(report)) == sorted([("error", own, "self_link"), ("error", gone, "dangling_link")])
    assert messages(report, "self_link") == ["links.relations: depends_on points at the memory itself"]


def test_an_open_dispute_is_a_warning_on_the_newer_side_until_settled(work: Path) -> None:
    store = work / ".memory"
    memory(store, "fact", F1)
    newer = memory(store, "fact", F2, links=f"  relations: [{{type: contradicts, id: {F1}}}]\n")
    report = check(work)
    assert found(report) == [("warning", newer, "open_dispute")]
    assert messages(report, "open_dispute")[0].startswith(f"{F2} and {F1} contradict each other")
    event(store, E[0], f"type: archive\nmemory: {F1}\narchived: true\nevidence: ['user:lost']\n")
    assert found(check(work)) == [("warning", newer, "archived_link")]


def test_a_dispute_between_global_memories_is_reported_by_the_global_store(work: Path, home_store: Path) -> None:
    memory(home_store, "preference", G1, scope="global")
    rel = memory(home_store, "preference", G2, scope="global",
                 links=f"  relations: [{{type: contradicts, id: {G1}}}]\n")
    assert found(check(work)) == []
    assert found(check(work, include_global=True)) == [("warning", rel, "open_dispute")]


# -- evidence --------------------------------------------------------------------------------------

def test_evidence_must_parse_and_resolve(work: Path, home_store: Path) -> None:
    store = work / ".memory"
    _episode(store, 2)
    memory(store, "fact", F1)
    head = git(work, "rev-parse", "HEAD").strip()
    ok = memory(store, "fact", F2, evidence=f"['event:{EPISODE}:2', 'memory:{F1[:10]}', 'file:src/app.py', "
                                            f"'commit:{head}', 'user:ops']")
    rels = {
        memory(store, "fact", _id("f", 4), evidence="['nonsense']"): "bad_evidence",
        memory(store, "fact", _id("f", 5), evidence=f"['event:{EPISODE}:3']"): "dangling_evidence",
        memory(store, "fact", _id("f", 6), evidence=f"['event:{_id('h', 2)}:1']"): "dangling_evidence",
        memory(store, "fact", _id("f", 7), evidence=f"['memory:{P2[:10]}']"): "dangling_evidence",
    }
    stale = {
        memory(store, "fact", _id("f", 8), evidence="['file:src/gone.py']"): "src/gone.py",
        memory(store, "fact", _id("f", 9), evidence=f"['commit:{'e' * 40}']"): "e" * 40,
    }
    report = check(work)
    assert sorted(found(report)) == sorted([*(("error", r, c) for r, c in rels.items()),
                                            *(("stale", r, "stale_evidence") for r in stale)])
    assert sorted(messages(report, "stale_evidence")) == [
        f"commit:{'e' * 40}: the commit is not in this clone", "file:src/gone.py: the file is gone from the work tree"]
    assert sorted(messages(report, "dangling_evidence")) == [
        f"event:{EPISODE}:3: no such episode event", f"event:{_id('h', 2)}:1: no such episode event",
        f"memory:{P2[:10]}: no such memory"]
    assert ok and home_store


def test_global_memories_have_no_work_tree_to_be_stale_against(work: Path, home_store: Path) -> None:
    memory(home_store, "preference", G1, scope="global",
           evidence=f"['file:src/gone.py', 'commit:{'e' * 40}', 'user:ops']")
    assert found(check(work, include_global=True)) == []


# -- events ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("vote", "ok"), [("1", True), ("-1", True), ("0", True), ("1.2", False),
                                          ("-1.2", False), ("null", False)])
def test_a_vote_lies_in_minus_1_1(work: Path, vote: str, ok: bool) -> None:
    store = work / ".memory"
    memory(store, "fact", F1)
    rel = event(store, E[0], f"type: utility_vote\nmemory: {F1}\nvote: {vote}\n")
    report = check(work)
    assert found(report) == ([] if ok else [("error", rel, "schema")])
    if not ok:
        assert messages(report, "schema") == ["vote must be a number in [-1, 1]"]


def test_event_links_must_exist_be_of_the_right_kind_and_stay_in_their_store(work: Path, home_store: Path) -> None:
    store = work / ".memory"
    memory(store, "problem", P1)
    memory(store, "fact", F1)
    memory(store, "fact", F2)
    memory(store, "change", C1, links=f"  change_targets: [{F1}]\n")
    memory(home_store, "preference", G1, scope="global")
    ev = "evidence: ['user:ops']\n"
    good = [event(store, E[0], f"type: utility_vote\nmemory: {F1}\nvote: 1\nproblem: {P1}\n"),
            event(store, E[1], f"type: fact_update_link\nold_fact: {F1}\nchange: {C1}\nnew_fact: {F2}\n{ev}"),
            event(store, E[2], f"type: link\nmemory: {F1}\nrelation: depends_on\ntarget: {F2}\n{ev}"),
            event(store, E[3], f"type: archive\nmemory: {F2}\narchived: false\n{ev}")]
    bad = {
        event(store, E[4], f"type: utility_vote\nmemory: {F1}\nvote: 1\nproblem: {F2}\n"): ("wrong_kind",
                                                                                            "problem points at a fact"),
        event(store, E[5], f"type: fact_update_link\nold_fact: {P1}\nchange: {C1}\nnew_fact: {F2}\n{ev}"):
            ("wrong_kind", "old_fact points at a problem"),
        event(store, E[6], f"type: fact_update_link\nchange: {C1}\nnew_fact: {F2}\n{ev}"):
            ("missing_link", "old_fact is required"),
        event(store, E[7], f"type: link\nmemory: {F1}\nrelation: depends_on\n{ev}"):
            ("missing_link", "target is required"),
        event(store, E[8], f"type: link\nrelation: depends_on\ntarget: {F2}\n{ev}"):
            ("missing_link", "memory is required"),
        event(store, E[9], f"type: link\nmemory: {F1}\nrelation: depends_on\ntarget: {F1}\n{ev}"):
            ("self_link", "target: depends_on points at the memory itself"),
        event(store, E[10], f"type: archive\nmemory: {P2}\narchived: true\n{ev}"):
            ("dangling_link", f"memory points at {P2}, which does not exist"),
        event(store, E[11], f"type: archive\nmemory: {F1}\n{ev}"):
            ("schema", "an archive event needs archived: true|false"),
        event(store, E[12], f"type: archive\nmemory: {F1}\narchived: true\n"):
            ("missing_evidence", "a archive event needs evidence"),
        event(store, E[13], f"type: utility_vote\nmemory: {G1}\nvote: 1\n"): ("scope_crossing", ""),
    }
    report = check(work)
    assert sorted(found(report)) == sorted(("error", r, c) for r, (c, _m) in bad.items()), found(report)
    for rel, (_code, said) in bad.items():
        (finding,) = [f for f in report.problems if f.path.endswith(rel)]
        assert said in finding.message, finding
    assert "is global memory" in messages(report, "scope_crossing")[0]
    assert good


def test_the_fact_update_link_checks_each_side(work: Path) -> None:
    store = work / ".memory"
    memory(store, "fact", F1)
    memory(store, "fact", F2)
    memory(store, "change", C1, links=f"  change_targets: [{F1}]\n")
    ev = "evidence: ['user:ops']\n"
    change = event(store, E[0], f"type: fact_update_link\nold_fact: {F1}\nchange: {F2}\nnew_fact: {F2}\n{ev}")
    new = event(store, E[1], f"type: fact_update_link\nold_fact: {F1}\nchange: {C1}\nnew_fact: {C1}\n{ev}")
    report = check(work)
    assert sorted(found(report)) == sorted([("error", change, "wrong_kind"), ("error", new, "wrong_kind")])
    assert sorted(messages(report, "wrong_kind")) == ["change points at a fact", "new_fact points at a change"]


def test_a_global_event_may_point_at_global_memory_not_at_repo_memory(work: Path, home_store: Path) -> None:
    memory(work / ".memory", "problem", P1)
    memory(home_store, "preference", G1, scope="global")
    memory(home_store, "problem", G2, scope="global")
    event(home_store, E[1], f"type: utility_vote\nmemory: {G1}\nvote: 1\nproblem: {G2}\n")
    assert found(check(work, include_global=True)) == []
    rel = event(home_store, E[0], f"type: utility_vote\nmemory: {G1}\nvote: 1\nproblem: {P1}\n")
    report = check(work, include_global=True)
    assert found(report) == [("error", rel, "global_to_repo")]
    assert messages(report, "global_to_repo") == ["problem: the global store may not point at repo memory"]


def test_a_control_character_in_an_event_is_refused(work: Path) -> None:
    store = work / ".memory"
    memory(store, "fact", F1)
    rel = event(store, E[0], f'type: utility_vote\nmemory: {F1}\nvote: 1\nrationale: "a \\x1b[31m b"\n')
    assert found(check(work)) == [("error", rel, "bad_chars")]


def test_event_evidence_is_checked_like_a_memory_s(work: Path) -> None:
    store = work / ".memory"
    memory(store, "fact", F1)
    rel = event(store, E[0], f"type: archive\nmemory: {F1}\narchived: true\nevidence: ['memory:{P2}']\n")
    assert found(check(work)) == [("error", rel, "dangling_evidence")]


# -- secrets ---------------------------------------------------------------------------------------

def test_a_secret_anywhere_in_a_memory_event_or_config_is_refused(work: Path) -> None:
    store = work / ".memory"
    mem = memory(store, "fact", F1, extra=f"reviewer_note: {TOKEN}\n")
    ev = event(store, E[0], f"type: utility_vote\nmemory: {F1}\nvote: 1\n# {TOKEN}\n")
    config = store / "config.yaml"
    config.write_text(config.read_text() + f"# token {TOKEN}\n")
    report = check(work)
    assert sorted(found(report)) == sorted([("error", mem, "secret"), ("error", ev, "secret"),
                                            ("error", "config.yaml", "secret")])
    assert TOKEN not in json.dumps(report.to_json())
    said = {f.path.rsplit("/", 1)[-1]: f.message for f in report.problems}
    assert "(github_token: ghp_…6789 on line 7); remove it from the file" in said[mem.rsplit("/", 1)[-1]]


def test_the_staged_check_scans_every_staged_file(work: Path) -> None:
    store = work / ".memory"
    rel = _episode(store, 1)
    (store / rel).write_text((store / rel).read_text() + json.dumps({"seq": 2, "text": TOKEN}) + "\n")
    git(work, "add", ".memory")
    assert found(check(work)) == []  # the work tree check reads memories, events and config.yaml
    assert found(check(work, staged=True)) == [("error", rel, "secret")]


def test_the_staged_check_reads_the_staged_copy_not_the_work_tree(work: Path) -> None:
    store = work / ".memory"
    rel = memory(store, "fact", F1, extra=f"note: {TOKEN}\n")
    git(work, "add", ".memory")
    memory(store, "fact", F1)
    assert found(check(work)) == []
    assert found(check(work, staged=True)) == [("error", rel, "secret")]


# -- invalid files and caps ------------------------------------------------------------------------

def test_a_file_that_does_not_parse_is_an_error_with_its_code(work: Path) -> None:
    store = work / ".memory"
    (store / "facts" / "broken.md").write_text("---\nid: [not\n---\nx\n")
    (store / "facts" / "huge.md").write_text("---\nkind: fact\n---\n" + "x" * 300_000 + "\n")
    report = check(work)
    assert sorted(found(report)) == [("error", "facts/broken.md", "invalid_file"), ("error", "facts/huge.md",
                                                                                   "too_large")]
    assert report.checked == 2


def test_files_past_the_cap_are_reported(work: Path) -> None:
    store = work / ".memory"
    config = store / "config.yaml"
    config.write_text(config.read_text() + "limits:\n  max_files: 2\n")
    for n in range(1, 4):
        memory(store, "fact", _id("f", n))
    report = check(work)
    assert found(report) == [("error", ".memory", "too_many_files")] and report.checked == 2
    assert "files past the cap of 2 per store (limits.max_files)" in messages(report, "too_many_files")[0]


def test_a_repo_memory_may_not_reuse_a_global_id(work: Path, home_store: Path) -> None:
    memory(home_store, "preference", G1, scope="global")
    rel = memory(work / ".memory", "fact", G1)
    report = check(work)
    assert found(report) == [("error", rel, "id_conflict")]
    assert messages(report, "id_conflict")[0].startswith(f"id {G1} is global memory ")
    assert found(check(work, include_global=True)) == [("error", rel, "id_conflict")]


# -- --fix -----------------------------------------------------------------------------------------

def test_fix_writes_the_id_and_created_into_a_hand_written_file(work: Path) -> None:
    store = work / ".memory"
    path = store / "facts" / "by-hand.md"
    path.write_text("---\nkind: fact\nauthor: dana\nevidence: ['user:x']\n---\n<!-- guidance -->\nNightly.\n")
    ws = open_workspace(cwd=work)
    (listed,) = ws.catalog("repo").memories.values()
    report = run_check(ws, fix=True)
    assert report.fixed == [{"path": ".memory/facts/by-hand.md", "message": f"wrote id {listed.id} and created"}]
    assert found(report) == [] and report.ok
    text = path.read_text()
    assert text.startswith(f"---\nid: {listed.id}\nkind: fact\nscope: repo\ncreated: ")
    assert "guidance" not in text and "author: dana" in text
    assert ws.catalog("repo").memories[listed.id].id_derived is False
    assert found(check(work)) == []


def test_fix_keeps_a_created_time_already_there(work: Path) -> None:
    path = work / ".memory" / "facts" / "by-hand.md"
    path.write_text("---\nkind: fact\ncreated: 2026-01-02T03:04:05Z\nevidence: ['user:x']\n---\nNightly.\n")
    check(work, fix=True)
    assert "created: '2026-01-02T03:04:05Z'" in path.read_text()


def test_without_fix_nothing_is_written(work: Path) -> None:
    path = work / ".memory" / "facts" / "by-hand.md"
    path.write_text("---\nkind: fact\nevidence: ['user:x']\n---\nNightly.\n")
    before = path.read_text()
    assert found(check(work)) == [("warning", "facts/by-hand.md", "missing_id")]
    assert found(check(work, staged=False)) == [("warning", "facts/by-hand.md", "missing_id")]
    git(work, "add", ".memory")
    report = check(work, staged=True)
    assert found(report) == [("error", "facts/by-hand.md", "missing_id")]
    assert "`git add` the file" in report.problems[0].message
    assert path.read_text() == before and report.fixed == []


def test_fix_on_a_staged_file_writes_the_work_tree_and_still_refuses(work: Path) -> None:
    path = work / ".memory" / "facts" / "by-hand.md"
    path.write_text("---\nkind: fact\nevidence: ['user:x']\n---\nNightly.\n")
    git(work, "add", ".memory")
    staged_blob = git(work, "show", ":.memory/facts/by-hand.md")
    report = check(work, staged=True, fix=True)
    assert found(report) == [("error", "facts/by-hand.md", "missing_id")]
    assert "they are now in the file: `git add .memory/facts/by-hand.md`" in report.problems[0].message
    assert len(report.fixed) == 1 and report.fixed[0]["message"].endswith("into the work tree copy")
    assert path.read_text().startswith("---\nid: ")
    assert git(work, "show", ":.memory/facts/by-hand.md") == staged_blob  # the index is never written


def test_fix_on_a_staged_file_whose_work_tree_copy_differs_writes_nothing(work: Path) -> None:
    path = work / ".memory" / "facts" / "by-hand.md"
    path.write_text("---\nkind: fact\nevidence: ['user:x']\n---\nNightly.\n")
    git(work, "add", ".memory")
    path.write_text("---\nkind: fact\nevidence: ['user:x']\n---\nNightly, edited.\n")
    report = check(work, staged=True, fix=True)
    assert found(report) == [("error", "facts/by-hand.md", "missing_id")]
    assert "the work tree copy differs from it" in report.problems[0].message
    assert report.fixed == [] and path.read_text().endswith("Nightly, edited.\n")


def test_fix_that_cannot_write_says_so(work: Path) -> None:
    folder = work / ".memory" / "facts"
    path = folder / "by-hand.md"
    path.write_text("---\nkind: fact\nevidence: ['user:x']\n---\nNightly.\n")
    folder.chmod(0o500)
    try:
        report = check(work, fix=True)
        git(work, "add", ".memory")
        staged_report = check(work, staged=True, fix=True)
    finally:
        folder.chmod(0o700)
    if os.geteuid() == 0:
        pytest.skip("root writes through folder permissions")
    assert ("error", "facts/by-hand.md", "fix_failed") in found(report) and report.fixed == []
    assert ("error", "facts/by-hand.md", "fix_failed") in found(staged_report) and staged_report.fixed == []


# -- check_memory: one memory, as `new` checks the file it saved ----------------------------------

def test_check_memory_judges_one_memory_with_the_same_rules(work: Path, home_store: Path) -> None:
    store = work / ".memory"
    memory(home_store, "preference", G1, scope="global")
    memory(store, "problem", P1)
    ok = memory(store, "solution", S1, links=f"  problem: {P1}\n  related: [{G1}]\n")
    bad = memory(store, "solution", _id("s", 2), links=f"  problem: {P2}\n", extra=f"note: {TOKEN}\n")
    tabbed = memory(store, "fact", F1, name="tab\tname")
    ws = open_workspace(cwd=work)
    cat = ws.catalog("repo")
    mems = {m.path: m for m in cat.memories.values()}
    assert check_memory(ws, ws.repo, mems[ok]) == []  # type: ignore[arg-type]
    assert sorted((f.severity, f.code) for f in check_memory(ws, ws.repo, mems[bad])) == [  # type: ignore[arg-type]
        ("error", "dangling_link"), ("error", "secret")]
    assert [f.code for f in check_memory(ws, ws.repo, mems[tabbed])] == ["bad_name"]  # type: ignore[arg-type]
    no_id = memory(store, "fact", None, name="no-id")
    ws = open_workspace(cwd=work)
    (mem,) = [m for m in ws.catalog("repo").memories.values() if m.path == no_id]
    assert [(f.severity, f.code) for f in check_memory(ws, ws.repo, mem)] == [("warning", "missing_id")]  # type: ignore[arg-type]
    assert [(f.severity, f.code) for f in check_memory(ws, ws.repo, mem, strict_ids=True)] == [  # type: ignore[arg-type]
        ("error", "missing_id")]


def test_the_staged_check_never_scans_the_work_tree_copy(work: Path) -> None:
    store = work / ".memory"
    rel = memory(store, "fact", F1)
    git(work, "add", ".memory")
    memory(store, "fact", F1, extra=f"note: {TOKEN}\n")  # written after staging: not what the commit holds
    assert found(check(work, staged=True)) == []
    assert found(check(work)) == [("error", rel, "secret")]


def test_the_staged_check_reads_the_global_store_s_work_tree(work: Path, home_store: Path) -> None:
    """--staged is about the repo's commit: the global store is judged as it lies on disk."""
    rel = memory(home_store, "preference", G1, scope="global", evidence=None)
    assert found(check(work, staged=True, include_global=True)) == [("error", rel, "missing_evidence")]


def test_a_typed_relation_to_a_memory_also_in_related_is_still_judged(work: Path) -> None:
    store = work / ".memory"
    memory(store, "fact", F1)
    event(store, E[0], f"type: archive\nmemory: {F1}\narchived: true\nevidence: ['user:gone']\n")
    rel = memory(store, "fact", F2, links=f"  related: [{F1}]\n  relations: [{{type: depends_on, id: {F1}}}]\n")
    report = check(work)
    assert found(report) == [("warning", rel, "archived_link"), ("warning", rel, "archived_link")]


def test_base_reports_a_dispute_whose_older_side_the_branch_adds(work: Path) -> None:
    store = work / ".memory"
    memory(store, "fact", F2, links=f"  relations: [{{type: contradicts, id: {F1}}}]\n", evidence="['user:a']")
    memory(store, "fact", F3, links=f"  relations: [{{type: contradicts, id: {_id('f', 4)}}}]\n")
    memory(store, "fact", _id("f", 4))
    commit(work)  # F3 against f4: a dispute reviewed before the branch
    git(work, "checkout", "-q", "-b", "topic")
    memory(store, "fact", F1)  # the older side (by id, same created time), added by the branch
    commit(work, "topic")
    assert found(check(work, base="main")) == [("warning", f"facts/{F2}-hand.md", "open_dispute")]
