"""Episodes: the SPEC §2 file format, refs that writes can cite, truncation, concurrent loggers,
local-only storage and the per-clone current episode."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CliResult, git, reopen, write_req

from memstore.errors import Conflict, InvalidRequest, NotFound
from memstore.store import episodes
from memstore.verbs import api


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def set_config(repo: Path, text: str) -> None:
    cfg = repo / ".memory" / "config.yaml"
    cfg.write_text(cfg.read_text(encoding="utf-8") + text, encoding="utf-8")


def test_file_format_follows_the_spec(repo: Path, cli: Callable[..., CliResult]) -> None:
    code, started, _ = cli("episode", "start", "--agent", "claude-code", "--task", "add tracking_code", cwd=repo)
    assert code == 0 and started["ok"]
    ep = started["episode"]
    code, first, _ = cli("episode", "log", "--source", "user", "--content", "run pytest with -x", cwd=repo)
    assert code == 0 and first["ref"] == f"event:{ep}:1"
    code, second, _ = cli("episode", "log", "--source", "tool", "--content-file", "-", cwd=repo,
                          input="$ pytest -x\n1 failed\n")
    assert code == 0 and second["seq"] == 2
    code, ended, _ = cli("episode", "end", "--outcome", "success", cwd=repo)
    assert code == 0 and ended["events"] == 2

    path = repo / started["path"]
    assert path.parent.parent == repo / ".memory" / "episodes" and path.name == f"{ep}.jsonl"
    assert path.parent.name == started["path"].split("/")[2] and len(path.parent.name) == 7  # YYYY-MM
    header, e1, e2, last = rows(path)
    assert list(header) == ["episode", "repo", "agent", "task", "started"]
    assert header["episode"] == ep and header["agent"] == "claude-code" and header["task"] == "add tracking_code"
    assert header["repo"] == "repo"
    assert list(e1) == ["seq", "ts", "source", "content"] and e1["source"] == "user"
    assert e2["content"] == "$ pytest -x\n1 failed\n"
    assert list(last) == ["ended", "outcome"] and last["outcome"] == "success"
    # committed episodes go to git for review like memories (staged in review mode)
    assert f".memory/episodes/{path.parent.name}/{ep}.jsonl" in git(repo, "diff", "--cached", "--name-only")
    # closed: no longer current, and further logging is refused
    assert episodes.current_id(reopen(repo).store("repo")) is None
    code, err, _ = cli("episode", "log", "--episode", ep, "--source", "note", "--content", "late", cwd=repo)
    assert code == 4 and err["error"]["code"] == "episode_ended"
    code, shown, _ = cli("episode", "show", ep[:8], cwd=repo)
    assert code == 0 and [e["seq"] for e in shown["events"]] == [1, 2] and shown["ended"]["outcome"] == "success"
    code, listed, _ = cli("episode", "list", cwd=repo)
    assert listed["count"] == 1 and listed["episodes"][0]["events"] == 2


def test_logged_ref_can_be_cited_by_a_write(repo: Path, cli: Callable[..., CliResult]) -> None:
    cli("episode", "start", "--task", "t", cwd=repo)
    code, logged, _ = cli("episode", "log", "--source", "user", "--content", "Always run pytest with -x", cwd=repo)
    assert code == 0
    ans = api.write(reopen(repo), write_req("preference", "Run pytest with -x.", evidence=[logged["ref"]]))
    assert ans["ok"]
    memory = (repo / ans["path"]).read_text(encoding="utf-8")
    assert logged["ref"] in memory
    # a seq that was never logged is refused (the validator reads the episode file)
    bad = logged["ref"].rsplit(":", 1)[0] + ":99"
    with pytest.raises(InvalidRequest, match="no event 99"):
        api.write(reopen(repo), write_req("preference", "Something else entirely.", evidence=[bad]))


def test_logging_without_an_open_episode_is_a_clear_error(repo: Path, cli: Callable[..., CliResult]) -> None:
    code, err, stderr = cli("episode", "log", "--source", "note", "--content", "x", cwd=repo)
    assert code == 3 and err["error"]["code"] == "not_found" and "episode start" in stderr
    with pytest.raises(NotFound):
        episodes.end(reopen(repo))


def test_bad_source_and_empty_content_are_refused(repo: Path) -> None:
    ws = reopen(repo)
    episodes.start(ws)
    with pytest.raises(InvalidRequest, match="source"):
        episodes.log(ws, "robot", "hi")
    with pytest.raises(InvalidRequest, match="empty"):
        episodes.log(ws, "note", "   ")


def test_content_over_the_cap_is_truncated_with_its_hash(repo: Path) -> None:
    set_config(repo, "episodes:\n  max_event_chars: 100\n")
    ws = reopen(repo)
    started = episodes.start(ws)
    big = "x" * 250 + "END"
    ans = episodes.log(ws, "tool", big)
    assert ans["truncated"] and ans["sha256"] == hashlib.sha256(big.encode()).hexdigest()
    row = rows(repo / started["path"])[-1]
    assert row["content"] == "x" * 100 and row["truncated"] is True and row["chars"] == 253
    assert row["sha256"] == hashlib.sha256(big.encode()).hexdigest()
    small = episodes.log(ws, "tool", "short")
    assert "truncated" not in small and "truncated" not in rows(repo / started["path"])[-1]


def test_concurrent_loggers_get_distinct_seqs_and_whole_lines(repo: Path) -> None:
    ws = reopen(repo)
    started = episodes.start(ws)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            mine = reopen(repo)  # one workspace per logger, as separate processes would have
            for i in range(25):
                episodes.log(mine, "tool", f"worker {n} line {i} " + "y" * 500)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    events = rows(repo / started["path"])[1:]
    assert [e["seq"] for e in events] == list(range(1, 151))
    assert sorted(e["content"].split(" y")[0] for e in events) == sorted(
        f"worker {n} line {i}" for n in range(6) for i in range(25))


def test_local_only_episodes_are_not_tracked_by_git(repo: Path, cli: Callable[..., CliResult]) -> None:
    set_config(repo, "episodes:\n  local_only: true\n")
    code, started, _ = cli("episode", "start", "--task", "private", cwd=repo)
    assert code == 0 and started["local_only"]
    assert started["path"].startswith(".memory/.local/episodes/")
    code, logged, _ = cli("episode", "log", "--source", "user", "--content", "prefer tabs", cwd=repo)
    assert code == 0
    path = repo / started["path"]
    assert path.is_file()
    git(repo, "add", "-A")
    tracked = git(repo, "ls-files", "--cached", "--others", "--exclude-standard")
    assert ".local" not in tracked and started["episode"] not in tracked
    # refs into a local-only episode still validate in this clone
    assert api.write(reopen(repo), write_req("preference", "Prefer tabs.", evidence=[logged["ref"]]))["ok"]
    # --local on the command line does the same without the config
    code, other, _ = cli("episode", "start", "--local", cwd=repo)
    assert other["local_only"]


def test_current_episode_is_per_clone_and_replace_takes_it_over(repo: Path) -> None:
    ws = reopen(repo)
    first = episodes.start(ws, task="one")
    second = episodes.start(ws, task="two", replace=True)
    assert second["previous"] == first["episode"]
    assert episodes.current_id(ws.store("repo")) == second["episode"]
    assert (repo / ".memory" / ".local" / "current_episode").read_text().strip() == second["episode"]
    assert git(repo, "check-ignore", ".memory/.local/current_episode").strip()
    # the replaced episode stays open and can still be logged to by id (the full id: ids made
    # in the same millisecond are monotonic and can share all but their last character)
    assert episodes.log(ws, "note", "late note", episode_id=first["episode"])["seq"] == 1
    episodes.end(ws, outcome="done")
    with pytest.raises(Conflict):
        episodes.end(ws, episode_id=second["episode"])


def test_reads_are_logged_only_while_an_episode_is_open(repo: Path) -> None:
    """log_read is what retrieve.read calls; exercised here without loading the model."""
    ws = reopen(repo)
    answer = {"results": [{"id": "01m7qmgvt9txwmxsa4g8kr1ap8", "kind": "problem"}]}
    episodes.log_read(ws, {"query": "q", "mode": "targeted"}, answer)  # no episode: nothing happens
    started = episodes.start(ws)
    episodes.log_read(ws, {"query": "column already exists"}, answer)
    row = rows(repo / started["path"])[-1]
    assert row["source"] == "memstore" and row["op"] == "read"
    assert row["query"] == "column already exists" and row["results"] == ["01m7qmgvt9txwmxsa4g8kr1ap8"]
    assert "problem 01m7qmgvt9" in row["content"]


SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfi" + "CYzz3kLmQp9"  # assembled so scanners leave this file alone
AWS_ID = "AKIA" + "Q3EGRAV7PLM2XT5B"


def test_secrets_in_episode_logs_are_redacted_before_they_reach_git(repo: Path, cli: Callable[..., CliResult],
                                                                     ) -> None:
    """Issue #12.4: the event is kept (a log must not fail a session), the key is not."""
    code, started, _ = cli("episode", "start", "--task", f"rotate {AWS_ID}", cwd=repo)
    assert code == 0 and started["redacted"][0]["kind"] == "aws_access_key"
    code, logged, _ = cli("episode", "log", "--source", "tool", "--content",
                          f"exported AWS_SECRET_ACCESS_KEY={SECRET_KEY}", cwd=repo)
    assert code == 0 and logged["ref"].endswith(":1")
    assert [r["kind"] for r in logged["redacted"]] == ["secret_assignment"]
    assert SECRET_KEY not in json.dumps(logged)
    code, _, _ = cli("episode", "end", "--outcome", f"done with {AWS_ID}", cwd=repo)
    assert code == 0
    text = (repo / started["path"]).read_text(encoding="utf-8")
    assert SECRET_KEY not in text and AWS_ID not in text
    assert "AWS_SECRET_ACCESS_KEY=[REDACTED:secret_assignment]" in text
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "session")
    assert SECRET_KEY not in git(repo, "log", "-p") and AWS_ID not in git(repo, "log", "-p")


def test_a_private_key_is_redacted_to_its_end_line(repo: Path) -> None:
    ws = reopen(repo)
    episodes.start(ws, task="keys")
    pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----"
    ans = episodes.log(ws, "tool", f"cat id_ed25519\n{pem}\ndone")
    _, events, _ = episodes.read_rows(episodes.find_episode(ws, ans["episode"])[1])
    assert events[-1]["content"] == "cat id_ed25519\n[REDACTED:private_key]\ndone"


def test_an_episode_id_is_never_a_pattern_or_a_path(repo: Path, cli: Callable[..., CliResult]) -> None:
    """An id reaches a glob over episodes/: `*` would match an episode it does not name and `..`
    a file outside the store. Both come from agents' arguments and from cloned evidence refs."""
    cli("episode", "start", "--task", "t", cwd=repo)
    code, logged, _ = cli("episode", "log", "--source", "user", "--content", "Use uv, not pip", cwd=repo)
    assert code == 0
    seq = logged["ref"].rsplit(":", 1)[1]
    # A file shaped like an episode, outside the store, reachable from episodes/<month>/ by `..`.
    outside = repo / "outside"
    outside.mkdir()
    planted = outside / "01jzzzzzzzzzzzzzzzzzzzzzzz.jsonl"
    planted.write_text('{"episode": "01jzzzzzzzzzzzzzzzzzzzzzzz", "seq": 1}\n')
    before = {p.name for p in (repo / ".memory").rglob("*") if p.is_file()}
    episode = logged["ref"].split(":")[1]
    for bad in (episode[:6] + "*", episode[:6] + "[0-9a-z]*", "../../../outside/01jzzz"):
        code, out, _ = cli("episode", "show", bad, cwd=repo)
        assert code == 2 and out["error"]["code"] == "bad_id", (bad, out)
        code, out, _ = cli("write", "--kind", "fact", "--text", f"Cited through {bad}.",
                             "--evidence", f"event:{bad}:{seq}", "--allow-duplicate", cwd=repo)
        assert code == 2 and "evidence_refs" in out["error"]["field"], (bad, out)
    assert {p.name for p in (repo / ".memory").rglob("*") if p.is_file()} == before
