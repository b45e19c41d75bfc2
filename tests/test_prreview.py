"""`memstore review`: what memory says about a pull request, its three formats, posting the one
PR comment through `gh`, and the GitHub workflows `integrate github` writes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CliResult, git, reopen, store_files, write_req

from memstore.surfaces import reviewfmt
from memstore.verbs import api, workflow

APP = "".join(f"def f{i}():\n    return {i}\n\n" for i in range(1, 11))  # 30 lines: f<i> on line 3i-2


def _write(repo: Path, kind: str, text: str, evidence: list[str], **kw: object) -> str:
    return str(api.write(reopen(repo), write_req(kind, text, evidence=evidence, **kw))["id"])


@pytest.fixture
def pr(repo: Path) -> dict[str, object]:
    """main: app.py and memories citing it (one with lines as they were two commits ago); branch
    `pr` rewrites f5's body."""
    (repo / "app.py").write_text(APP)
    (repo / "other.py").write_text("X = 1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "app")
    old = git(repo, "rev-parse", "HEAD").strip()
    ids = {
        "f5": _write(repo, "fact", "f5 returns five and the billing code relies on it", ["file:app.py#L13-L14"]),
        "f1": _write(repo, "fact", "f1 is the entry point", ["file:app.py#L1-L2"]),
        "whole": _write(repo, "fact", "app.py holds every handler", ["file:app.py"]),
        "other": _write(repo, "fact", "other.py holds the constant X", ["file:other.py#L1"]),
        # cited at `old`: f6 was then on lines 16-17; main shifts it down three lines below
        "f6old": _write(repo, "fact", "f6 returns six", [f"file:app.py@{old[:12]}#L16-L17"]),
    }
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "memories")
    (repo / "app.py").write_text("# header\n# more\n# more\n" + APP)
    git(repo, "commit", "-q", "-am", "a header on main")
    git(repo, "checkout", "-q", "-b", "pr")
    text = (repo / "app.py").read_text()
    (repo / "app.py").write_text(text.replace("return 5\n", "return 55\n").replace("return 6\n", "return 66\n"))
    git(repo, "commit", "-q", "-am", "f5 and f6 return more")
    return ids


def _review(cli: Callable[..., CliResult], repo: Path, *args: str) -> dict:
    code, out, err = cli("review", "--base", "main", "--format", "json", *args, cwd=repo)
    assert code == 0, err
    assert isinstance(out, dict)
    return out


def test_review_flags_the_memories_whose_cited_lines_the_pr_rewrites(
        repo: Path, pr: dict[str, str], cli: Callable[..., CliResult]) -> None:
    ans = _review(cli, repo)
    touched = {t["id"]: t for t in ans["sections"]["touched"]}
    assert set(touched) == {pr["f5"], pr["whole"], pr["f6old"]}  # not f1's lines, not other.py
    (f5,) = touched[pr["f5"]]["citations"]
    # base lines: the header moved f5 (cited 13-14 when the memory was committed) to 16-17
    assert f5["lines"] == [16, 17] and f5["overlap"] == [[17, 17]] and f5["head_lines"] == [17, 17]
    assert touched[pr["f5"]]["text"].startswith("f5 returns five")
    (f6,) = touched[pr["f6old"]]["citations"]
    assert f6["lines"] == [19, 20] and f6["overlap"] == [[20, 20]]  # @rev lines carried to the base
    (whole,) = touched[pr["whole"]]["citations"]
    assert whole["lines"] is None and whole["note"].startswith("file-level citation")
    # line citations come first, in a stable order
    assert [t["id"] for t in ans["sections"]["touched"]][-1] == pr["whole"]
    assert ans["nothing_to_say"] is False


def test_markdown_comment_and_github_annotations(repo: Path, pr: dict[str, str],
                                                 cli: Callable[..., CliResult]) -> None:
    code, md, _ = cli("review", "--base", "main", "--link-base", "https://github.com/o/r", cwd=repo)
    assert code == 0 and isinstance(md, str)
    assert md.startswith(reviewfmt.MARKER)
    assert "Memories this change may make stale" in md and pr["f5"] in md
    assert "cites L16-L17; this change rewrites L17" in md
    assert re.search(r"\(https://github\.com/o/r/blob/[0-9a-f]{40}/app\.py#L17-L17\)", md)
    assert re.search(r"\(https://github\.com/o/r/blob/[0-9a-f]{40}/\.memory/facts/" + pr["f5"], md)  # the memory
    assert "Seen before" not in md  # nothing weak is said
    code, gh, _ = cli("review", "--base", "main", "--format", "github", cwd=repo)
    assert code == 0
    assert f"::warning file=app.py,line=17,endLine=17,title=memstore%3A memory {pr['f5']} may be stale::" in gh


def test_memory_text_is_inert_in_the_comment() -> None:
    ans = {"head_sha": "0" * 40, "sections": {"touched": [{
        "id": "01abc", "kind": "fact",
        "text": "@org/team fixes #12 <img src=x> [x](javascript:1) <!-- memstore-review --> log in at "
                "https://evil.example/login",
        "citations": [{"path": "a.py", "lines": None, "overlap": [], "note": "file-level citation"}]}],
        "seen_before": [{"id": "01abd", "kind": "problem", "text": "the login page",
                         "reason": "cites lines 2 from a hunk in www.evil.example.py; shares: login"}]}}
    md = reviewfmt.markdown(ans)
    body = md.split("\n", 1)[1]
    assert "@org" not in md and "#12" not in md and "<img" not in md and reviewfmt.MARKER not in body
    assert "[x](javascript" not in md and "\\[x\\](javascript" in md  # shown as text, not a link
    # GitHub would link a bare URL or www. name by itself: neither stays whole, text or reason
    assert "https://" not in md and "www.evil" not in md and "evil.example/login" in md, md


def test_gh_references_and_commit_shas_are_inert_in_the_comment() -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    text = f"fixed by GH-42 and gh-7 in {sha}, reverted in DEADBEEF12 and a1b2c3d; see commit 9f3e2a1b"
    ans = {"sections": {"seen_before": [{"id": "01abd", "kind": "problem", "text": text,
                                         "reason": f"cites lines 2 from a hunk in a.py; shares: {sha[:12]}"}]}}
    md = reviewfmt.markdown(ans)
    # GitHub links GH-<n> to an issue and 7 to 40 hex digits to a commit: neither stays whole
    assert not re.search(r"(?i)\bgh-\d", md), md
    assert not re.search(r"(?i)(?<![0-9a-z])[0-9a-f]{7,}(?![0-9a-z])", md), md
    shown = md.replace("\u200d", "")
    assert text in shown and f"shares: {sha[:12]}" in shown  # a reader still sees every character


FORGED_PATHS = {  # a path a fork's job could write into the analysis artifact -> what a link may use
    "../../../../attacker/repo/blob/main/x.md": None,
    ".memory/../../../../attacker/x.md": None,
    "/attacker/repo/blob/main/x.md": None,
    "https://evil.example/x.md": None,
    "javascript:alert(1)": None,
    "a//b.md": None,
    "./a.md": None,
    "a\\..\\..\\x.md": None,
    "a\nb.md": None,
    "a\u202eb.md": None,
    "src/app.py": "src/app.py",
    ".memory/facts/01abc-caf\u00e9.md": ".memory/facts/01abc-caf%C3%A9.md",
}


def test_a_forged_path_in_the_analysis_artifact_makes_no_link(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    """Every link the comment makes goes to this repository's blob at the reviewed commit; a path
    that is not plain and relative is shown as text, with no link at all."""
    head, base = "a" * 40, "b" * 40
    touched = [{"id": f"01m{i:03d}", "kind": "fact", "text": "t", "path": path,
                "citations": [{"path": path, "lines": [1, 2], "overlap": [[1, 1]], "head_lines": [1, 1],
                               "file_status": "D" if i % 2 else "M"}]}
               for i, path in enumerate(FORGED_PATHS)]
    forged = tmp_path / "review.json"
    forged.write_text(json.dumps({"head_sha": head, "merge_base": base, "sections": {"touched": touched}}))
    code, md, err = cli("review", "--from", str(forged), "--link-base", "https://github.com/o/r", cwd=tmp_path)
    assert code == 0 and isinstance(md, str), err
    links = re.findall(r"\]\(([^)\s]*)\)", md)
    safe = [p for p in FORGED_PATHS.values() if p]
    assert len(links) == 2 * len(safe), links  # each safe path: its memory and its citation
    for url in links:
        m = re.fullmatch(r"https://github\.com/o/r/blob/([0-9a-f]{40})/([^#?]+)(#L\d+-L\d+)?", url)
        assert m and m.group(1) in (head, base) and m.group(2) in safe, url
    assert "attacker" in md and "attacker" not in "".join(links)  # shown as text, not linked


def test_comment_stays_under_its_budget_and_annotations_are_capped() -> None:
    touched = [{"id": f"01m{i:05d}", "kind": "fact", "text": "x" * 300,
                "citations": [{"path": f"src/f{i}.py", "lines": [1, 2], "overlap": [[1, 1]], "head_lines": [1, 1]}]}
               for i in range(400)]
    ans = {"head_sha": "a" * 40, "sections": {"touched": touched + touched[:5]}}  # the last five repeat
    md = reviewfmt.markdown(ans, budget=20_000)
    assert len(md) <= 20_000 and "more not shown here" in md
    assert md.count("01m00000") == 1
    full = reviewfmt.markdown(ans)
    assert len(full) < 65_536
    gh = reviewfmt.github(ans).splitlines()
    assert len(gh) == 51 and gh[-1].startswith("::notice title=memstore::355 more")


def _proxy_tactic(repo: Path) -> tuple[str, str]:
    """A problem behind the corporate proxy and the failed tactic recorded for it: (problem, tactic)."""
    problem = _write(repo, "problem", "Requests through the corporate proxy fail with SSLError: certificate "
                     "verify failed", ["user:reported by ops"])
    tactic = _write(repo, "failed_tactic", "Setting verify=False on the session to get past the proxy's SSLError "
                    "was tried and reverted: it disabled certificate checks everywhere", ["user:review"],
                    links={"problem_id": problem})
    return problem, tactic


def test_seen_before_finds_a_recorded_failed_tactic(repo: Path, cli: Callable[..., CliResult]) -> None:
    problem, tactic = _proxy_tactic(repo)
    (repo / "net.py").write_text("import requests\n\nSESSION = requests.Session()\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "net")
    git(repo, "checkout", "-q", "-b", "pr")
    (repo / "net.py").write_text("import requests\n\nSESSION = requests.Session()\nSESSION.verify = False\n")
    git(repo, "commit", "-q", "-am", "proxy")
    body = repo.parent / "body.md"
    body.write_text("The corporate proxy breaks TLS, so turn off verify on the session to stop the SSLError.")
    ans = _review(cli, repo, "--title", "Disable certificate verification (verify=False) behind the proxy",
                  "--body-file", str(body))
    seen = {s["id"]: s for s in ans["sections"]["seen_before"]}
    # the failed tactic is the warning, shown with no code anchor; the problem shares words but
    # cites no code the PR touches
    assert tactic in seen and problem not in seen
    assert "failed tactic" in seen[tactic]["reason"]
    code, md, _ = cli("review", "--base", "main", "--title", "Disable certificate verification behind the proxy",
                      "--body-file", str(body), cwd=repo)
    assert code == 0 and "tried before and failed here" in md


def test_seen_before_leaves_out_a_failed_tactic_the_change_only_mentions(
        repo: Path, cli: Callable[..., CliResult]) -> None:
    _, tactic = _proxy_tactic(repo)
    (repo / "README.txt").write_text("Sync\n====\n\nRun `sync` to fetch the day's orders.\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "readme")
    git(repo, "checkout", "-q", "-b", "pr")
    with (repo / "README.txt").open("a") as fh:
        fh.write("\nBehind the corporate proxy, export HTTPS_PROXY before running `sync`.\n")
    git(repo, "commit", "-q", "-am", "proxy docs")
    ans = _review(cli, repo, "--title", "Document the proxy setting for sync")
    # read finds the tactic (the proxy, a setting), but the change repeats nothing of it: its
    # lines set no verify and disable no certificate check
    assert tactic not in {s["id"] for s in ans["sections"].get("seen_before", [])}


def test_a_pr_that_adds_a_memory_shows_it_with_its_author_not_as_stale(
        repo: Path, pr: dict[str, str], cli: Callable[..., CliResult]) -> None:
    new = _write(repo, "fact", "f5 now returns fifty-five", ["file:app.py#L17"])
    git(repo, "commit", "-q", "-m", "memory of the change")
    ans = _review(cli, repo)
    added = ans["sections"]["added"]
    assert [m["id"] for m in added["memories"]] == [new] and added["memories"][0]["author"]
    assert new not in {t["id"] for t in ans["sections"]["touched"]}


def test_nothing_to_say_and_bad_revisions(repo: Path, cli: Callable[..., CliResult]) -> None:
    git(repo, "commit", "-q", "-m", "layout")
    git(repo, "checkout", "-q", "-b", "pr")
    (repo / "README.txt").write_text("hello\n")
    git(repo, "add", "README.txt")
    git(repo, "commit", "-q", "-m", "readme")
    ans = _review(cli, repo)
    assert ans["sections"] == {} and ans["nothing_to_say"] is True
    before = store_files(repo)
    code, err, _ = cli("review", "--base", "no-such-branch", cwd=repo)
    assert code == 3 and err["error"]["code"] == "unknown_rev"
    code, err, _ = cli("review", cwd=repo)
    assert code == 2 and err["error"]["code"] == "usage"
    bad = repo.parent / "bad.json"
    bad.write_text("[1, 2")
    code, err, _ = cli("review", "--from", str(bad), cwd=repo.parent)
    assert code == 2 and err["error"]["code"] == "bad_input"
    assert store_files(repo) == before


# -- posting through a recording `gh` ----------------------------------------------------------------
FAKE_GH = r'''
import json, os, sys
state_path = os.environ["FAKE_GH_STATE"]
state = json.load(open(state_path)) if os.path.exists(state_path) else {"comments": {}, "next": 100, "calls": []}
args = sys.argv[1:]
body = sys.stdin.read() if "--input" in args else None
state["calls"].append({"args": args, "body": json.loads(body) if body else None})
method = args[args.index("-X") + 1] if "-X" in args else "GET"
path = [a for a in args if a.startswith("repos/")][0].split("?")[0]
parts = path.split("/")
out = None
if path.endswith("/comments") and parts[3] == "issues" and method == "GET":
    out = [c for c in state["comments"].values() if c["pr"] == int(parts[4])]
elif method == "POST":
    cid = state["next"]; state["next"] += 1
    state["comments"][str(cid)] = {"id": cid, "pr": int(parts[4]), "body": json.loads(body)["body"],
                                   "user": {"login": "github-actions[bot]", "type": "Bot"}}
    out = state["comments"][str(cid)]
elif method == "PATCH":
    state["comments"][parts[-1]]["body"] = json.loads(body)["body"]
    out = state["comments"][parts[-1]]
elif parts[3] == "pulls":
    out = {"number": int(parts[4]), "head": {"sha": os.environ.get("FAKE_GH_HEAD", "")}}
json.dump(state, open(state_path, "w"))
print(json.dumps(out))
'''


@pytest.fixture
def fake_gh(tmp_path: Path) -> tuple[dict[str, str], Path]:
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    gh = bin_dir / "gh"
    gh.write_text(f"#!{sys.executable}\n{FAKE_GH}")
    gh.chmod(0o755)
    state = tmp_path / "gh-state.json"
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_GH_STATE": str(state)}, state


def _calls(state: Path) -> list[tuple[str, str]]:
    calls = json.loads(state.read_text())["calls"] if state.exists() else []
    return [(c["args"][c["args"].index("-X") + 1] if "-X" in c["args"] else "GET",
             next(a for a in c["args"] if a.startswith("repos/"))) for c in calls]


def test_post_creates_one_comment_then_edits_it_in_place(
        repo: Path, pr: dict[str, str], cli: Callable[..., CliResult],
        fake_gh: tuple[dict[str, str], Path]) -> None:
    env, state = fake_gh
    post = ("review", "--base", "main", "--post", "--repo", "o/r", "--pr", "7")
    code, ans, err = cli(*post, cwd=repo, env=env)
    assert code == 0, err
    assert ans["action"] == "created"
    cid = ans["comment_id"]
    # the next push: the comment is found by its marker and edited, not posted again
    (repo / "app.py").write_text((repo / "app.py").read_text().replace("return 1\n", "return 11\n"))
    git(repo, "commit", "-q", "-am", "f1 too")
    code, ans, err = cli(*post, cwd=repo, env=env)
    assert code == 0 and ans == {"ok": True, "action": "edited", "pr": 7, "comment_id": cid}, err
    comments = json.loads(state.read_text())["comments"]
    assert list(comments) == [str(cid)] and pr["f1"] in comments[str(cid)]["body"]
    assert [m for m, _ in _calls(state)] == ["GET", "POST", "GET", "PATCH"]
    # a later push leaves nothing to say: the comment is marked resolved, nothing new is posted
    git(repo, "reset", "-q", "--hard", "main")
    code, ans, _ = cli(*post, cwd=repo, env=env)
    assert ans["action"] == "resolved"
    assert reviewfmt.RESOLVED in json.loads(state.read_text())["comments"][str(cid)]["body"]


def test_a_pr_with_nothing_to_say_posts_nothing(repo: Path, cli: Callable[..., CliResult],
                                                fake_gh: tuple[dict[str, str], Path]) -> None:
    env, state = fake_gh
    git(repo, "commit", "-q", "-m", "layout")
    git(repo, "checkout", "-q", "-b", "pr")
    (repo / "notes.txt").write_text("hello\n")
    git(repo, "add", "notes.txt")
    git(repo, "commit", "-q", "-m", "notes")
    code, ans, err = cli("review", "--base", "main", "--post", "--repo", "o/r", "--pr", "8", cwd=repo, env=env)
    assert code == 0 and ans["action"] == "none", err
    assert _calls(state) == [("GET", "repos/o/r/issues/8/comments?per_page=100")]


def test_post_from_an_artifact_checks_the_pr_head(repo: Path, pr: dict[str, str], cli: Callable[..., CliResult],
                                                  fake_gh: tuple[dict[str, str], Path], tmp_path: Path) -> None:
    env, state = fake_gh
    artifact = tmp_path / "review.json"
    artifact.write_text(json.dumps(_review(cli, repo)))
    post = ("review", "--from", str(artifact), "--post", "--repo", "o/r", "--pr", "9", "--expect-head", "a" * 40)
    code, err, _ = cli(*post, cwd=tmp_path, env={**env, "FAKE_GH_HEAD": "b" * 40})
    assert code == 2 and err["error"]["code"] == "head_mismatch"
    assert [m for m, _ in _calls(state)] == ["GET"]  # only the PR was asked: nothing posted
    code, ans, _ = cli(*post, cwd=tmp_path, env={**env, "FAKE_GH_HEAD": "a" * 40})
    assert code == 0 and ans["action"] == "created"


# -- integrate github ---------------------------------------------------------------------------------
def _tool(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))


def test_integrate_github_writes_pinned_least_privilege_workflows_and_remove_undoes_it(
        repo: Path, cli: Callable[..., CliResult]) -> None:
    code, ans, err = cli("integrate", "github", cwd=repo)
    assert code == 0, err
    wf = repo / ".github" / "workflows"
    review, post = (wf / "memstore-review.yml").read_text(), (wf / "memstore-review-post.yml").read_text()
    for text in (review, post):
        uses = re.findall(r"uses: (\S+)(.*)", text)
        assert uses and all(re.fullmatch(r"actions/[a-z-]+@[0-9a-f]{40}", u) and re.match(r" # v\d", c)
                            for u, c in uses)
        assert "permissions: {}" in text and f'pip install "{workflow.DIST_NAME}==' in text
    assert "write" not in review.split("permissions: {}")[1]  # the job that runs PR code can write nothing
    assert "pull_request_target" not in review + post and "workflow_run:" in post
    assert "--expect-head" in post and "actions/checkout" not in post
    # posts queue per PR head (fork and branch), not per branch name: forks share main and patch-1
    (group,) = re.findall(r"^  group: (.*)$", post, re.M)
    assert "workflow_run.head_repository.full_name" in group and "workflow_run.head_branch" in group
    assert "~/.cache/memstore/onnx" in review
    zizmor = _tool("zizmor")
    assert zizmor, "zizmor (test extra) is not installed"
    proc = subprocess.run([zizmor, "--offline", "--persona", "pedantic", str(wf)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    actionlint = _tool("actionlint")
    assert actionlint or sys.platform != "linux", "actionlint (test extra on Linux) is not installed"
    if actionlint:
        proc = subprocess.run([actionlint, str(wf / "memstore-review.yml"), str(wf / "memstore-review-post.yml")],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    code, ans, _ = cli("integrate", "github", "--remove", cwd=repo)
    assert code == 0 and {f["state"] for f in ans["files"]} == {"removed"}
    assert not (repo / ".github").exists()


def test_integrate_github_leaves_a_workflow_it_did_not_write(repo: Path, cli: Callable[..., CliResult]) -> None:
    wf = repo / ".github" / "workflows"
    wf.mkdir(parents=True)
    (wf / "memstore-review.yml").write_text("name: mine\n")
    code, err, _ = cli("integrate", "github", cwd=repo)
    assert code == 2 and err["error"]["code"] == "bad_agent_file"
    assert (wf / "memstore-review.yml").read_text() == "name: mine\n"
    assert not (wf / "memstore-review-post.yml").exists()


def test_lines_rewritten_before_the_base_are_not_the_prs_doing() -> None:
    from memstore.git.prreview import FileChange, Hunk, _overlaps, carry_lines

    # between the memory's commit and the base: 3 lines inserted after line 2, line 8 rewritten
    between = [Hunk(2, 0, 3, 3), Hunk(8, 1, 11, 1)]
    assert carry_lines(between, range(1, 10)) == {1: 1, 2: 2, 3: 6, 4: 7, 5: 8, 6: 9, 7: 10, 9: 12}
    text = [f"line {n}" for n in range(1, 21)]
    text[9] = ""  # base line 10 is blank

    def change(*hunks: Hunk, added: tuple[str, ...] = ("new",)) -> FileChange:
        return FileChange("a.py", "M", list(hunks), list(added))

    # the PR rewrites base line 11 (what replaced old line 8): no line the memory cited
    assert _overlaps(change(Hunk(11, 1, 11, 1)), {1, 2, 6, 7, 8, 9, 12}, text) == []
    # an insertion between two cited lines counts; one after the last, or next to a blank, does not
    assert _overlaps(change(Hunk(7, 0, 8, 2)), {6, 7, 8}, text) == [(7, 7)]
    assert _overlaps(change(Hunk(8, 0, 9, 2)), {6, 7, 8}, text) == []
    assert _overlaps(change(Hunk(9, 0, 10, 1)), {8, 9, 11}, text) == []
    # a cited line deleted here and added again elsewhere in the file is moved, not rewritten
    assert _overlaps(change(Hunk(6, 1, 5, 0), added=("line 6",)), {6, 7}, text) == []
    assert _overlaps(change(Hunk(6, 1, 5, 0)), {6, 7}, text) == [(6, 6)]
    assert _overlaps(change(Hunk(6, 1, 6, 2), added=("try:", "    line 6")), {6, 7}, text) == [(6, 6)]  # reindented


def test_a_memory_citing_two_billion_lines_is_reviewed_by_the_lines_that_exist(
        repo: Path, pr: dict[str, str], cli: Callable[..., CliResult]) -> None:
    """A memory from a clone or a PR is hostile input: a huge line range is capped at the file's
    end (not a list of two billion lines), a range past the end cites nothing."""
    git(repo, "checkout", "-q", "main")
    huge = _write(repo, "fact", "f5 to the end of the file", ["file:app.py#L16-L17"])
    past = _write(repo, "fact", "past the end of the file", ["file:app.py#L30-L31"])
    for path in (repo / ".memory").rglob("*.md"):
        text = path.read_text()
        path.write_text(text.replace("#L16-L17", "#L16-L2000000000").replace("#L13-L14", "#L13-L2000000000")
                        .replace("#L30-L31", "#L90-L2000000000"))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-verify", "-m", "hand-written memories")
    git(repo, "checkout", "-q", "pr")
    git(repo, "rebase", "-q", "main")
    touched = {t["id"]: t for t in _review(cli, repo)["sections"]["touched"]}
    for mid in (huge, pr["f5"]):  # f5 cited L13-L14 before the header moved it down three lines
        (c,) = touched[mid]["citations"]
        assert c["lines"] == [16, 32] and c["overlap"] == [[17, 17], [20, 20]], c
    (c,) = touched[pr["f6old"]]["citations"]  # cited at an older commit: carried to the base
    assert c["lines"] == [19, 32] and c["overlap"] == [[20, 20]], c
    assert past not in touched and pr["f1"] not in touched


def test_the_review_step_takes_a_pr_title_that_starts_with_a_dash(
        repo: Path, pr: dict[str, str], cli: Callable[..., CliResult], tmp_path: Path) -> None:
    """The workflow passes PR data as --opt="$VALUE": a title "-WIP" is the title, not an option.
    The Review step's script, run as written with a `memstore` on PATH."""
    import yaml

    code, _, err = cli("integrate", "github", cwd=repo)
    assert code == 0, err
    wf = repo / ".github" / "workflows"
    for name in ("memstore-review.yml", "memstore-review-post.yml"):
        assert not re.search(r'--[a-z-]+ "\$', (wf / name).read_text()), name  # every value as --opt="$X"
    steps = yaml.safe_load((wf / "memstore-review.yml").read_text())["jobs"]["review"]["steps"]
    (script,) = [s["run"] for s in steps if s.get("name") == "Review"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "memstore").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m memstore "$@"\n')
    (bin_dir / "memstore").chmod(0o755)
    runner = tmp_path / "runner"
    runner.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "RUNNER_TEMP": str(runner),
           "BASE_SHA": git(repo, "rev-parse", "main").strip(), "PR_TITLE": "-WIP", "PR_BODY": "--body",
           "PR_NUMBER": "3"}
    proc = subprocess.run(["bash", "-e", "-c", script], cwd=repo, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert pr["f5"] in proc.stdout  # the ::warning annotations
    ans = json.loads((runner / "memstore-review" / "review.json").read_text())
    assert pr["f5"] in {t["id"] for t in ans["sections"]["touched"]}
    code, ans, err = cli("review", "--base", "HEAD", "--title=-WIP", "--format", "json", cwd=repo)
    assert code == 0 and ans["nothing_to_say"] is True, err


def test_review_reads_file_names_git_quotes_and_sql_comments_in_hunks(
        repo: Path, cli: Callable[..., CliResult]) -> None:
    """Names with a space (git ends them with a TAB), past ASCII, with a quote or a tab (git
    C-quotes them), and a hunk that removes a ``-- comment`` line (``--- comment`` in the diff, not a
    file header) are each read as the file they are."""
    names = ["my file.py", "café.py", 'say "hi".py', "a\tb.py"]
    for name in names:
        (repo / name).write_text("A = 1\nB = 2\n")
    (repo / "schema.sql").write_text("-- old comment\nCREATE TABLE t (a int);\n\n\nSELECT 1;\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "files")
    ids = {name: _write(repo, "fact", f"{name} sets A to one", [f"file:{name}#L1"]) for name in names}
    ids["sql"] = _write(repo, "fact", "the schema ends with a probe query", ["file:schema.sql#L5"])
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "memories")
    git(repo, "checkout", "-q", "-b", "pr")
    for name in names:
        (repo / name).write_text("A = 11\nB = 2\n")
    (repo / "schema.sql").write_text("-- new comment\nCREATE TABLE t (a int);\n\n\nSELECT 2;\n")
    git(repo, "commit", "-q", "-am", "change them")
    touched = {t["id"]: t for t in _review(cli, repo)["sections"]["touched"]}
    assert set(touched) == set(ids.values())
    for name in names:
        (c,) = touched[ids[name]]["citations"]
        assert c["path"] == name and c["overlap"] == [[1, 1]]
    (c,) = touched[ids["sql"]]["citations"]
    assert c["path"] == "schema.sql" and c["overlap"] == [[5, 5]]


def test_diff_lines_that_look_like_file_headers_are_hunk_lines() -> None:
    from memstore.git.prreview import parse_diff

    diff = ('diff --git a/s.sql b/s.sql\n--- a/s.sql\n+++ b/s.sql\n@@ -1 +1 @@\n--- old comment\n+++ counter\n'
            '@@ -5 +5 @@\n-SELECT 1;\n+SELECT 2;\n'
            'diff --git "a/caf\\303\\251 \\"q\\".py" "b/caf\\303\\251 \\"q\\".py"\n'
            '--- "a/caf\\303\\251 \\"q\\".py"\n+++ "b/caf\\303\\251 \\"q\\".py"\n@@ -1 +1 @@\n-A = 1\n+A = 11\n')
    files = parse_diff(diff)
    assert set(files) == {"s.sql", 'café "q".py'}
    sql = files["s.sql"]
    assert (len(sql.hunks), sql.removed, sql.added) == (2, ["-- old comment", "SELECT 1;"], ["++ counter", "SELECT 2;"])


def test_a_review_answer_with_bad_line_ranges_is_refused_and_nothing_is_posted(
        repo: Path, pr: dict[str, str], cli: Callable[..., CliResult], fake_gh: tuple[dict[str, str], Path],
        tmp_path: Path) -> None:
    """An artifact from a fork's job is hostile input: a line range that is not [first, last]
    is bad_input in every format, and the post path posts nothing."""
    env, state = fake_gh
    good = _review(cli, repo)
    for bad in ([5], ["x", 2], [9, 3], [True, 2]):
        ans = json.loads(json.dumps(good))
        for t in ans["sections"]["touched"]:
            for c in t["citations"]:
                c["head_lines"] = bad
        artifact = tmp_path / "review.json"
        artifact.write_text(json.dumps(ans))
        for args in (("--format", "markdown"), ("--format", "github"),
                     ("--post", "--repo", "o/r", "--pr", "9", "--expect-head", good["head_sha"])):
            code, err, _ = cli("review", "--from", str(artifact), *args, cwd=tmp_path,
                               env={**env, "FAKE_GH_HEAD": good["head_sha"]})
            assert code == 2 and err["error"]["code"] == "bad_input", (bad, args, err)
    assert [m for m, _ in _calls(state) if m != "GET"] == []  # nothing posted


# -- seen before: about the changed code, or not shown ----------------------------------------------------
CLIENT = ('"""The HTTP client."""\nimport time\n\nfrom net import ReadTimeout\n\nRETRIES = 3\n\n\n'
          "def fetch(session, url):\n"                                  # line 9
          "    for attempt in range(RETRIES):\n"
          "        try:\n"
          "            return session.get(url, timeout=10)\n"
          "        except ConnectionError:\n"                             # line 13: the PR rewrites it
          "            time.sleep(2 ** attempt)\n"
          "    raise ConnectionError(url)\n"
          + "".join(f"\n\ndef helper{i}(x):\n    return x + {i}\n" for i in range(1, 21))  # to line 95
          + "\n\ndef parse_charset(content_type):\n"                    # line 97
          "    _, _, params = content_type.partition(';')\n"
          "    return params.split('=')[-1].strip() or 'latin-1'\n")


def client_pr(repo: Path, *, about: bool) -> dict[str, str]:
    """main: client.py and past problems citing it (with or without one about the lines the PR
    changes); branch `pr` makes fetch retry on ReadTimeout."""
    (repo / "client.py").write_text(CLIENT)
    (repo / "other.py").write_text("".join(f"V{i} = {i}\n" for i in range(40)))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "client")
    ids = {
        # beside the change, but all it shares with it is the file's name and words most memories
        # here hold ("fix", "retry")
        "filename": _write(repo, "problem", "Fix retry in client.py", ["file:client.py#L16-L18"]),
        # about ReadTimeout, but of code eighty lines away
        "far": _write(repo, "problem", "parse_charset raised on a ReadTimeout page with no charset: fix the "
                      "fallback", ["file:client.py#L97-L99"]),
    }
    if about:
        # the lines just above the changed except clause, and about what it catches
        ids["about"] = _write(repo, "problem", "fetch gave up at the first ReadTimeout: its except clause caught "
                              "only ConnectionError, so a slow server failed the sync instead of being retried",
                              ["file:client.py#L9-L11"])
    for i, what in enumerate(["the import job", "a flaky test", "the release upload", "the docs build"]):
        _write(repo, "problem", f"Fix the retry of {what}", [f"file:other.py#L{i * 5 + 1}-L{i * 5 + 2}"])
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "memories")
    git(repo, "checkout", "-q", "-b", "pr")
    (repo / "client.py").write_text(CLIENT.replace("except ConnectionError:", "except (ConnectionError, ReadTimeout):"))
    git(repo, "commit", "-q", "-am", "retry on ReadTimeout")
    return ids


def test_seen_before_shows_a_past_problem_about_the_changed_lines_and_why(
        repo: Path, cli: Callable[..., CliResult]) -> None:
    ids = client_pr(repo, about=True)
    ans = _review(cli, repo, "--title", "Fix fetch: retry on ReadTimeout as well")
    assert "touched" not in ans["sections"]  # the cited lines stand: nothing is made stale
    seen = {s["id"]: s for s in ans["sections"]["seen_before"]}
    assert ids["about"] in seen
    reason = seen[ids["about"]]["reason"]
    assert "client.py" in reason and "readtimeout" in reason.lower()
    code, md, _ = cli("review", "--base", "main", "--title", "Fix fetch: retry on ReadTimeout as well", cwd=repo)
    assert code == 0 and "fetch gave up at the first ReadTimeout" in md and "why: cites lines" in md


def test_seen_before_leaves_out_a_memory_sharing_only_the_file_or_far_from_the_change(
        repo: Path, cli: Callable[..., CliResult]) -> None:
    ids = client_pr(repo, about=False)
    # read's gate lets both through: the title names client.py, the far one holds ReadTimeout
    ans = _review(cli, repo, "--title", "client.py: retry fetch on ReadTimeout as well")
    seen = {s["id"] for s in ans["sections"].get("seen_before", [])}
    # beside the change but sharing only the file's name and words most memories hold
    assert ids["filename"] not in seen
    # sharing ReadTimeout, but about lines eighty lines from any hunk
    assert ids["far"] not in seen
