"""The git half of `memstore review`, one precise assertion per rule, through the library on a
real repo made once for the module (each test works on a copy): which memories a change's hunks
touch, how cited lines are carried to the base, what each citation says, how far a memory lies
from the change, and how git's diff output (quoted names, header-like hunk lines, binary files)
is read. The CLI, the comment and posting are tested in test_prreview.py; this file is the fast
first line of bench/mutation.py for git/prreview.py."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import git, make_git_repo
from moduleworld import hermetic_env

from memstore import gitops
from memstore.errors import NotFound, StoreError
from memstore.git.prreview import (
    Change,
    FileChange,
    Hunk,
    change,
    distance,
    hunk_text,
    parse_diff,
    resolve,
    touched,
    unquote_path,
)
from memstore.store.workspace import Workspace, open_workspace
from memstore.verbs import api

APP = "".join(f"def f{i}():\n    return {i}\n\n" for i in range(1, 11))  # 30 lines: f<i> on line 3i-2
HEADER = "# header\n# more\n# more\n"  # main puts it on top after the memories: +3 lines


def _id(tag: str, n: int) -> str:
    return f"01m7{tag * 20}{n:02d}"


# The memories, committed after app.py; each cites app.py as it was then (line numbers of APP).
CITES = {
    "f5": (_id("a", 1), "file:app.py#L13-L14"),  # f5: the PR rewrites its return
    "f1": (_id("a", 2), "file:app.py#L1-L2"),  # f1: untouched
    "whole": (_id("a", 3), "file:app.py"),  # file-level
    "other": (_id("a", 4), "file:other.py#L1"),  # a file the PR leaves alone
    "f6old": (_id("a", 5), None),  # cited at the first commit: filled in by the fixture
    "archived": (_id("a", 6), "file:app.py#L13-L14"),  # archived: never reported
    "f9": (_id("a", 7), "file:app.py#L25-L26"),  # main rewrote f9 before the PR: stale already
    "blank": (_id("a", 8), "file:app.py#L15"),  # a blank line cites nothing
    "gone": (_id("a", 9), "file:gone.py#L1-L2"),  # the PR deletes gone.py
    "part": (_id("b", 1), "file:app.py#L22-L25"),  # f8 and f9's def: main rewrote the latter
    "multi": (_id("b", 2), "file:app.py#L1-L2', 'file:app.py#L28-L29"),  # two ranges, neither touched
    "badrev": (_id("b", 3), "file:app.py@0000000#L13-L14"),  # a rev this clone lacks: the adding commit
    "huge": (_id("b", 4), "file:app.py#L28-L2000000000"),  # hostile: capped at the file's end
    "past": (_id("b", 5), "file:app.py#L90-L95"),  # past the end: cites nothing
    "f6def": (_id("b", 6), "file:app.py#L16"),  # f6's def: the line after it is rewritten, not it
}
ID = {k: v[0] for k, v in CITES.items()}


def _memory(repo: Path, mid: str, evidence: str, text: str = "What the code does here.") -> None:
    path = repo / ".memory" / "facts" / f"{mid}-x.md"
    path.write_text(f"---\nid: {mid}\nkind: fact\nscope: repo\ncreated: 2026-11-20T10:00:00Z\n"
                    f"evidence: ['{evidence}']\n---\n{text}\n")


@pytest.fixture(scope="module")
def base_repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """main: app.py (APP), other.py, gone.py; the memories; then a header on top of app.py and
    f9 rewritten. Branch ``pr`` rewrites f5's, f6's and f8's returns, deletes gone.py, adds
    new.py, a memory and a file whose name starts like the store's folder."""
    root = tmp_path_factory.mktemp("prreview-rules")
    with hermetic_env(root):
        repo = make_git_repo(root / "repo")
        gitops.toplevel.cache_clear()
        api.init(open_workspace(cwd=repo))
        (repo / "app.py").write_text(APP)
        (repo / "other.py").write_text("X = 1\n")
        (repo / "gone.py").write_text("G = 1\nH = 2\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "app")
        first = git(repo, "rev-parse", "HEAD").strip()
        for key, (mid, ev) in CITES.items():
            _memory(repo, mid, ev or f"file:app.py@{first[:12]}#L16-L17", f"The memory {key}.")
        (repo / ".memory" / "events" / f"{_id('e', 1)}.yaml").write_text(
            f"id: {_id('e', 1)}\ntype: archive\nmemory: {ID['archived']}\narchived: true\n"
            "created: 2026-11-20T11:00:00Z\nevidence: ['user:gone']\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "memories")
        (repo / "app.py").write_text(HEADER + APP.replace("def f9():\n    return 9\n", "def nine():\n    return 99\n"))
        git(repo, "commit", "-q", "-am", "a header on main; f9 renamed")
        git(repo, "checkout", "-q", "-b", "pr")
        text = (repo / "app.py").read_text()
        for n in (5, 6, 8):
            text = text.replace(f"return {n}\n", f"return {n}{n}\n")
        (repo / "app.py").write_text(text)
        (repo / "gone.py").unlink()
        (repo / "new.py").write_text("N = 1\n")
        (repo / ".memoryish.txt").write_text("not the store\n")
        _memory(repo, _id("c", 1), "file:app.py#L17", "Added by the PR.")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "the PR")
        git(repo, "checkout", "-q", "main")  # a reviewer's checkout: the PR is named by --head
        gitops.toplevel.cache_clear()
    shutil.rmtree(repo / ".memory" / ".index", ignore_errors=True)
    yield repo


@pytest.fixture
def work(base_repo: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "repo"
    shutil.copytree(base_repo, dest, symlinks=True)
    gitops.toplevel.cache_clear()
    return dest


def _ws(repo: Path) -> Workspace:
    gitops.toplevel.cache_clear()
    return open_workspace(cwd=repo)


def _change(repo: Path) -> tuple[Workspace, Change]:
    ws = _ws(repo)
    assert ws.repo is not None
    return ws, change(ws.repo, "main", "pr")


# Pure readings first: a mutant of them dies before any repo is copied.

# -- reading git's diff ----------------------------------------------------------------------------

@pytest.mark.parametrize(("quoted", "plain"), [
    ("app.py", "app.py"),
    ('"a/caf\\303\\251.py"', "a/café.py"),
    ('"a/say \\"hi\\".py"', 'a/say "hi".py'),
    ('"a/a\\tb\\\\c\\nd"', "a/a\tb\\c\nd"),
    ('"a/bell\\a\\b\\v\\f\\r"', "a/bell\a\b\v\f\r"),
    ('"a/odd\\q"', "a/oddq"),  # an escape git never writes: the character itself
    ('"a/end\\"', "a/end\\"),  # a lone backslash at the end stays
    ('"', '"'),
    ('"a', '"a'),
    ('a"', 'a"'),
    ('""', ""),
])
def test_unquote_path_reads_git_s_c_quoting(quoted: str, plain: str) -> None:
    assert unquote_path(quoted) == plain


def test_a_name_that_is_not_utf8_survives_unquoting() -> None:
    assert unquote_path('"a/x\\377.py"') == "a/x" + b"\xff".decode("utf-8", "surrogateescape") + ".py"


def test_parse_diff_reads_headers_statuses_and_hunks() -> None:
    diff = ("diff --git a/m.py b/m.py\nindex 1..2 100644\n--- a/m.py\n+++ b/m.py\n@@ -3,2 +3,0 @@\n-x\n-y\n"
            "@@ -9 +7,3 @@\n-z\n+a\n+b\n+c\n"
            "diff --git a/new.py b/new.py\nnew file mode 100644\n--- /dev/null\n+++ b/new.py\n@@ -0,0 +1 @@\n+n\n"
            "diff --git a/old.py b/old.py\ndeleted file mode 100644\n--- a/old.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-o\n"
            "diff --git a/my file.py b/my file.py\n--- a/my file.py\t\n+++ b/my file.py\t\n@@ -1 +1 @@\n-p\n+q\n")
    files = parse_diff(diff)
    assert {p: f.status for p, f in files.items()} == {"m.py": "M", "new.py": "A", "old.py": "D", "my file.py": "M"}
    assert files["m.py"].hunks == [Hunk(3, 2, 3, 0), Hunk(9, 1, 7, 3)]
    assert (files["m.py"].removed, files["m.py"].added) == (["x", "y", "z"], ["a", "b", "c"])
    assert files["new.py"].hunks == [Hunk(0, 0, 1, 1)] and files["new.py"].added == ["n"]
    assert files["old.py"].hunks == [Hunk(1, 1, 0, 0)] and files["old.py"].removed == ["o"]
    assert (files["my file.py"].removed, files["my file.py"].added) == (["p"], ["q"])


def test_parse_diff_reads_binary_files() -> None:
    diff = ("diff --git a/a.png b/a.png\nnew file mode 100644\nBinary files /dev/null and b/a.png differ\n"
            "diff --git a/b.png b/b.png\ndeleted file mode 100644\nBinary files a/b.png and /dev/null differ\n"
            "diff --git a/c.png b/c.png\nBinary files a/c.png and b/c.png differ\n"
            'diff --git "a/\\303\\251.png" "b/\\303\\251.png"\n'
            'Binary files "a/\\303\\251.png" and "b/\\303\\251.png" differ\n'
            "diff --git a/d.png b/d.png\nBinary files a/d.png and b/d.png are alike\n")
    files = parse_diff(diff)
    assert {p: (f.status, f.hunks) for p, f in files.items()} == {
        "a.png": ("A", []), "b.png": ("D", []), "c.png": ("M", []), "é.png": ("M", [])}


def test_lines_outside_a_file_s_hunks_are_no_one_s() -> None:
    diff = ("+stray\n-stray\n@@ -1 +1 @@\n"
            "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n--- x\n+++ y\n"
            "diff --git a/n.py b/n.py\nBinary files a/n.py and b/n.py differ\n+not a line\n")
    files = parse_diff(diff)
    assert (files["m.py"].removed, files["m.py"].added) == (["-- x"], ["++ y"])
    assert files["n.py"].added == [] and files["n.py"].hunks == []
    assert set(files) == {"m.py", "n.py"}


# -- the text the "seen before" read searches ------------------------------------------------------

def test_hunk_text_keeps_each_distinct_line_once_in_file_order() -> None:
    ch = Change("a", "b", "c", {
        "b.py": FileChange("b.py", "M", added=["  second()", "abc", "abcd"], removed=["first()"]),
        "a.py": FileChange("a.py", "M", added=["first()", "   ", "x"], removed=["  second()  "]),
    })
    assert hunk_text(ch) == "first()\nsecond()\nabcd"


def test_hunk_text_stops_at_its_limit() -> None:
    ch = Change("a", "b", "c", {"a.py": FileChange("a.py", "M", added=["aaaa", "bbbb", "cccc"])})
    assert hunk_text(ch, limit=9) == "aaaa\nbbbb"
    assert hunk_text(ch, limit=8) == "aaaa"
    assert hunk_text(ch, limit=4) == "aaaa"
    assert hunk_text(ch, limit=3) == ""
    assert hunk_text(ch, limit=14) == "aaaa\nbbbb\ncccc"
    assert hunk_text(ch, limit=13) == "aaaa\nbbbb"


def test_hunk_text_is_cut_at_6000_characters() -> None:
    def one(n: int) -> Change:
        return Change("a", "b", "c", {"a.py": FileChange("a.py", "M", added=["x" * n])})

    assert hunk_text(one(6000)) == "x" * 6000
    assert hunk_text(one(6001)) == ""


# -- the change -------------------------------------------------------------------------------------

def test_the_change_is_merge_base_to_head_outside_the_store(work: Path) -> None:
    ch = _change(work)[1]
    assert ch.base == git(work, "rev-parse", "main").strip() and ch.head == git(work, "rev-parse", "pr").strip()
    assert ch.merge_base == ch.base
    assert {p: fc.status for p, fc in ch.files.items()} == {"app.py": "M", "gone.py": "D", "new.py": "A",
                                                           ".memoryish.txt": "A"}
    app = ch.files["app.py"]
    assert app.hunks == [Hunk(17, 1, 17, 1), Hunk(20, 1, 20, 1), Hunk(26, 1, 26, 1)]
    assert (app.removed, app.added) == (["    return 5", "    return 6", "    return 8"],
                                        ["    return 55", "    return 66", "    return 88"])
    assert ch.files["gone.py"].hunks == [Hunk(1, 2, 0, 0)] and ch.files["gone.py"].removed == ["G = 1", "H = 2"]


def test_head_defaults_to_the_checked_out_commit(work: Path) -> None:
    git(work, "checkout", "-q", "pr")
    ws = _ws(work)
    assert ws.repo is not None
    b, h, mb = resolve(ws.repo, "main", None)
    assert h == git(work, "rev-parse", "pr").strip() and mb == b
    git(work, "checkout", "-q", "-b", "later", "main")
    (work / "later.py").write_text("L = 1\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "main moves on")
    b, h, mb = resolve(ws.repo, "later", "pr")  # the merge-base, not the base's tip
    assert b == git(work, "rev-parse", "later").strip() and mb == git(work, "rev-parse", "main").strip()
    assert "later.py" not in change(ws.repo, "later", "pr").files


@pytest.mark.parametrize(("base", "head", "flag"), [("nope", None, "base"), ("main", "nope", "head")])
def test_a_revision_that_does_not_resolve_is_named(work: Path, base: str, head: str | None, flag: str) -> None:
    ws = _ws(work)
    assert ws.repo is not None
    with pytest.raises(NotFound) as err:
        resolve(ws.repo, base, head)
    assert err.value.code == "unknown_rev" and err.value.field == flag
    assert err.value.message == f"--{flag} 'nope' does not resolve to a commit"


def test_a_repo_without_commits_has_nothing_to_review(tmp_path: Path) -> None:
    root = tmp_path / "fresh"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    ws = _ws(root)
    api.init(ws)
    assert ws.repo is not None
    with pytest.raises(StoreError) as err:
        resolve(ws.repo, "main", None)
    assert "no commits yet" in err.value.message


# -- touched: the memories whose cited lines the change rewrites -----------------------------------

def test_touched_names_exactly_the_memories_the_hunks_reach(work: Path) -> None:
    ws, ch = _change(work)
    got = touched(ws, ch)
    line_level = sorted([ID["f5"], ID["f6old"], ID["gone"], ID["part"], ID["badrev"]])
    assert [t["id"] for t in got] == [*line_level, ID["whole"]]
    by = {t["id"]: t for t in got}
    assert by[ID["f5"]]["citations"] == [{
        "path": "app.py", "evidence": "file:app.py#L13-L14", "file_status": "M", "lines": [16, 17],
        "overlap": [[17, 17]], "head_lines": [17, 17]}]
    assert by[ID["f5"]]["path"] == f".memory/facts/{ID['f5']}-x.md" and by[ID["f5"]]["kind"] == "fact"
    assert by[ID["f5"]]["text"] == "The memory f5." and by[ID["f5"]]["created"] == "2026-11-20T10:00:00Z"
    (f6,) = by[ID["f6old"]]["citations"]
    assert (f6["lines"], f6["overlap"], f6["head_lines"]) == ([19, 20], [[20, 20]], [20, 20])
    assert by[ID["badrev"]]["citations"][0]["lines"] == [16, 17]  # carried from the commit that added it
    (gone,) = by[ID["gone"]]["citations"]
    assert gone == {"path": "gone.py", "evidence": "file:gone.py#L1-L2", "file_status": "D", "lines": [1, 2],
                    "overlap": [[1, 2]], "head_lines": None}
    (part,) = by[ID["part"]]["citations"]
    assert (part["lines"], part["overlap"]) == ([25, 26], [[26, 26]])
    assert part["note"] == "some cited lines had already changed before this change; the others are compared"
    assert by[ID["whole"]]["citations"] == [{
        "path": "app.py", "evidence": "file:app.py", "file_status": "M", "lines": None, "overlap": [],
        "head_lines": None, "note": "file-level citation: the file changed (3 hunks)"}]


def test_touched_leaves_out_what_it_is_told_to(work: Path) -> None:
    ws, ch = _change(work)
    got = [t["id"] for t in touched(ws, ch, exclude={ID["f5"], ID["whole"]})]
    assert ID["f5"] not in got and ID["whole"] not in got and ID["f6old"] in got


def test_a_file_level_citation_of_a_one_hunk_file_says_hunk(work: Path) -> None:
    ws = _ws(work)
    ch = Change("x", "y", git(work, "rev-parse", "main").strip(),
                {"app.py": FileChange("app.py", "M", [Hunk(17, 1, 17, 1)], ["    return 55"], ["    return 5"])})
    (whole,) = [t for t in touched(ws, ch) if t["id"] == ID["whole"]]
    assert whole["citations"][0]["note"] == "file-level citation: the file changed (1 hunk)"


def test_no_changed_files_touch_nothing(work: Path) -> None:
    ws = _ws(work)
    empty = Change("a", "b", git(work, "rev-parse", "main").strip(), {})
    assert touched(ws, empty) == [] and distance(ws, empty, list(ws.catalog("repo").memories.values())) == {}
    other = Change("a", "b", empty.merge_base, {"unrelated.py": FileChange("unrelated.py", "M", [Hunk(1, 1, 1, 1)])})
    assert touched(ws, other) == []
    assert distance(ws, other, list(ws.catalog("repo").memories.values())) == {}


def test_an_uncommitted_memory_speaks_of_the_base(work: Path) -> None:
    """Written against the work tree of the base, never committed: no commit to carry from."""
    _memory(work, _id("d", 1), "file:app.py#L17", "Cites f5's return at the base.")
    _memory(work, _id("d", 2), "file:app.py#L14", "Cites f5's return as APP had it.")
    _memory(work, _id("d", 6), "file:app.py#L16", "Cites f5's def at the base.")
    ws, ch = _change(work)
    by = {t["id"]: t for t in touched(ws, ch)}
    assert by[_id("d", 1)]["citations"][0]["overlap"] == [[17, 17]]
    assert by[_id("d", 1)]["citations"][0]["lines"] == [17, 17]
    assert _id("d", 6) not in by  # the line after it is rewritten, not it
    assert _id("d", 2) not in by  # base line 14 is f4's return: the header moved f5 down


def test_a_memory_committed_at_the_base_is_not_carried(work: Path) -> None:
    _memory(work, _id("d", 3), "file:app.py#L19-L20", "Cites f6 at the base.")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "a memory on main")
    git(work, "branch", "-f", "pr2", "main")
    git(work, "checkout", "-q", "pr2")
    (work / "app.py").write_text((work / "app.py").read_text().replace("return 6\n", "return 66\n"))
    git(work, "commit", "-q", "-am", "f6")
    ws = _ws(work)
    assert ws.repo is not None
    ch = change(ws.repo, "main", "pr2")
    by = {t["id"]: t for t in touched(ws, ch)}
    assert by[_id("d", 3)]["citations"][0]["lines"] == [19, 20]
    assert by[_id("d", 3)]["citations"][0]["overlap"] == [[20, 20]]
    assert "note" not in by[_id("d", 3)]["citations"][0]


def test_a_cited_file_added_since_the_memory_cites_nothing_of_it(work: Path) -> None:
    """new.py did not exist when the memory was committed: its lines then were another file's."""
    _memory(work, _id("d", 4), "file:new.py#L1", "A new.py line it could not have seen.")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "memory first")
    (work / "new.py").write_text("N = 0\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "then new.py")
    git(work, "checkout", "-q", "-b", "pr3")
    (work / "new.py").write_text("N = 2\n")
    git(work, "commit", "-q", "-am", "change new.py")
    ws = _ws(work)
    assert ws.repo is not None
    ch = change(ws.repo, "main", "pr3")
    assert "new.py" in ch.files
    assert _id("d", 4) not in {t["id"] for t in touched(ws, ch)}
    assert _id("d", 4) not in distance(ws, ch, list(ws.catalog("repo").memories.values()))


def test_a_huge_cited_range_is_capped_at_the_file_s_end(work: Path) -> None:
    git(work, "checkout", "-q", "-b", "pr4", "main")
    (work / "app.py").write_text((work / "app.py").read_text().replace("return 10\n", "return 1010\n"))
    git(work, "commit", "-q", "-am", "f10")
    ws = _ws(work)
    assert ws.repo is not None
    by = {t["id"]: t for t in touched(ws, change(ws.repo, "main", "pr4"))}
    (huge,) = by[ID["huge"]]["citations"]
    assert (huge["lines"], huge["overlap"], huge["head_lines"]) == ([31, 32], [[32, 32]], [32, 32])
    assert "note" not in huge
    assert ID["past"] not in by


# -- distance: how far a memory's cited lines lie from the change ---------------------------------

def test_distance_is_the_fewest_base_lines_to_a_hunk(work: Path) -> None:
    ws, ch = _change(work)
    mems = list(ws.catalog("repo").memories.values())
    assert distance(ws, ch, mems) == {
        ID["f5"]: ("app.py", 0), ID["archived"]: ("app.py", 0), ID["badrev"]: ("app.py", 0),
        ID["f6old"]: ("app.py", 0), ID["part"]: ("app.py", 0), ID["gone"]: ("gone.py", 0),
        ID["f1"]: ("app.py", 12),  # base lines 4-5, the first hunk at 17
        ID["f6def"]: ("app.py", 1),  # base line 19, the hunk at 20
        ID["multi"]: ("app.py", 5),  # its nearer range: base 31-32, five past the hunk at 26
        ID["huge"]: ("app.py", 5),
    }


def test_distance_of_a_pure_insertion_counts_from_its_line(work: Path) -> None:
    ws = _ws(work)
    mb = git(work, "rev-parse", "main").strip()
    ins = Change("a", "b", mb, {"app.py": FileChange("app.py", "M", [Hunk(10, 0, 11, 2)], ["x = 1", "y = 2"])})
    mems = [m for m in ws.catalog("repo").memories.values() if m.id in (ID["f5"], ID["f1"])]
    assert distance(ws, ins, mems) == {ID["f5"]: ("app.py", 6), ID["f1"]: ("app.py", 5)}
    none = Change("a", "b", mb, {"app.py": FileChange("app.py", "M", [])})  # a mode change: no hunks
    assert distance(ws, none, mems) == {}


# -- overlaps: rewritten, moved, inserted ----------------------------------------------------------

def _fake(ws: Workspace, work: Path, *hunks: Hunk, added: tuple[str, ...] = ()) -> list[dict]:
    mb = git(work, "rev-parse", "main").strip()
    ch = Change("a", "b", mb, {"app.py": FileChange("app.py", "M", list(hunks), list(added))})
    return [t for t in touched(ws, ch) if t["id"] in (ID["f5"], ID["part"])]


def test_an_insertion_counts_only_between_two_cited_lines(work: Path) -> None:
    ws = _ws(work)
    (f5,) = _fake(ws, work, Hunk(16, 0, 17, 1), added=("    log()",))
    assert f5["citations"][0]["overlap"] == [[16, 16]] and f5["citations"][0]["head_lines"] == [17, 17]
    assert _fake(ws, work, Hunk(17, 0, 18, 1), added=("    log()",)) == []  # after the last cited line
    assert _fake(ws, work, Hunk(15, 0, 16, 1), added=("    log()",)) == []  # before the first


def test_a_line_deleted_and_added_again_is_moved_not_rewritten(work: Path) -> None:
    ws = _ws(work)
    assert _fake(ws, work, Hunk(17, 1, 16, 0), Hunk(30, 0, 30, 1), added=("    return 5",)) == []
    (f5,) = _fake(ws, work, Hunk(17, 1, 16, 0), Hunk(30, 0, 30, 1), added=("        return 5",))  # reindented
    assert f5["citations"][0]["overlap"] == [[17, 17]]
    assert f5["citations"][0]["head_lines"] == [16, 16]  # a deletion: points at the line before, at least 1


def test_head_lines_of_a_deletion_at_the_top_point_at_line_one(work: Path) -> None:
    ws = _ws(work)
    mb = git(work, "rev-parse", "main").strip()
    _memory(work, _id("d", 5), "file:app.py#L1-L2", "The header.")
    ws = _ws(work)
    ch = Change("a", "b", mb, {"app.py": FileChange("app.py", "M", [Hunk(1, 2, 0, 0)], [])})
    (t,) = [t for t in touched(ws, ch) if t["id"] == _id("d", 5)]
    assert t["citations"][0]["overlap"] == [[1, 2]] and t["citations"][0]["head_lines"] == [1, 1]


def test_head_lines_follow_the_first_hunk_that_overlaps(work: Path) -> None:
    ws = _ws(work)
    (part,) = [t for t in _fake(ws, work, Hunk(10, 1, 10, 1), Hunk(25, 2, 25, 3), added=("a", "b", "c"))
               if t["id"] == ID["part"]]
    assert part["citations"][0]["overlap"] == [[25, 26]] and part["citations"][0]["head_lines"] == [25, 27]


def test_a_diff_git_cannot_make_is_no_change(work: Path) -> None:
    ws = _ws(work)
    assert ws.repo is not None
    from memstore.git.prreview import _diff

    assert _diff("0" * 40, "HEAD", work) == {}


def test_a_store_that_is_not_the_repo_s_own_speaks_of_other_code(work: Path) -> None:
    """A store elsewhere in the checkout (``--store``) describes some other code base: none of
    its citations is compared with this change."""
    shutil.copytree(work / ".memory", work / "fixtures" / "store")
    gitops.toplevel.cache_clear()
    ws = open_workspace(cwd=work, store_dir=work / "fixtures" / "store")
    assert ws.repo is not None and ws.catalog("repo").memories
    ch = change(ws.repo, "main", "pr")
    assert "app.py" in ch.files
    assert touched(ws, ch) == []
    assert distance(ws, ch, list(ws.catalog("repo").memories.values())) == {}


def test_branches_without_common_history_are_compared_with_the_base(work: Path) -> None:
    git(work, "checkout", "-q", "--orphan", "unrelated")
    git(work, "rm", "-q", "-r", "-f", ".")
    (work / "solo.py").write_text("S = 1\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "no shared history")
    ws = _ws(work)
    assert ws.repo is not None
    b, h, mb = resolve(ws.repo, "main", "unrelated")
    assert mb == b == git(work, "rev-parse", "main").strip() and h != b


def test_head_lines_skip_a_hunk_that_ends_just_above_the_overlap(work: Path) -> None:
    ws = _ws(work)
    (part,) = [t for t in _fake(ws, work, Hunk(24, 1, 24, 1), Hunk(25, 2, 25, 3), added=("a", "b", "c", "d"))
               if t["id"] == ID["part"]]
    assert part["citations"][0]["overlap"] == [[25, 26]] and part["citations"][0]["head_lines"] == [25, 27]


def test_a_citation_at_a_rev_speaks_of_that_rev_not_of_the_commit_adding_it(work: Path) -> None:
    """Committed at the base but citing app.py as the first commit had it (f5 on lines 13-14):
    the lines are carried from that commit, past the header main added since."""
    first = git(work, "rev-list", "--max-parents=0", "main").split()[0]
    app_first = git(work, "log", "--format=%H", "--diff-filter=A", "--", "app.py").split()[0]
    assert first != app_first
    _memory(work, _id("d", 7), f"file:app.py@{app_first[:12]}#L13-L14", "f5 as it was.")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "a memory citing an older rev")
    git(work, "checkout", "-q", "-b", "pr5")
    (work / "app.py").write_text((work / "app.py").read_text().replace("return 5\n", "return 55\n"))
    git(work, "commit", "-q", "-am", "f5")
    ws = _ws(work)
    assert ws.repo is not None
    by = {t["id"]: t for t in touched(ws, change(ws.repo, "main", "pr5"))}
    (cite,) = by[_id("d", 7)]["citations"]
    assert (cite["lines"], cite["overlap"]) == ([16, 17], [[17, 17]])
