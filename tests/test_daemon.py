"""The daemon as agents meet it: a real `memstore serve` subprocess, real watchdog events, real
Unix socket. One daemon serves the module (the model takes seconds to load); the life-cycle test
starts its own in a separate runtime directory. Every wait is a bounded poll."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from daemonworld import WAIT, Env, _git, _poll, _seed, running_world

from memstore import gitops
from memstore.read import retrieve
from memstore.store.workspace import open_workspace
from memstore.surfaces import client
from memstore.verbs import api

pytestmark = [pytest.mark.model, pytest.mark.slow]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    yield from running_world(tmp_path_factory, "daemon", {"repo_a": "alpha", "repo_b": "beta"})


def _ids(answer: dict[str, Any]) -> list[tuple[str, float]]:
    return [(r["id"], r["score"]) for r in answer["results"]]


def _texts(answer: dict[str, Any]) -> list[str]:
    return [r["text"] for r in answer.get("results", [])]


# -- the socket -------------------------------------------------------------------------------------
def test_socket_0600_in_a_0700_directory(world: Env) -> None:
    assert stat.S_IMODE(world.rdir.stat().st_mode) == 0o700
    sock = world.rdir / client.SOCKET_NAME
    assert stat.S_ISSOCK(sock.stat().st_mode)
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600
    assert (world.rdir / client.LOG_NAME).exists()


def test_cli_read_is_answered_by_the_daemon(world: Env) -> None:
    before = world.status()["requests"]
    rc, out, err = world.cli("read", "sqlite", "migration", "column", "already", "exists", cwd=world.repo_a)
    assert rc == 0, err
    assert world.ids_a["problem"] in [r["id"] for r in out["results"]]
    assert world.status()["requests"] >= before + 1
    assert str(world.repo_a / ".memory") in world.status()["watched"]


def test_cli_call_through_the_daemon_imports_almost_nothing(world: Env) -> None:
    """The point of the daemon: a forwarded call costs an interpreter start and a round trip,
    not the CLI's parser, the library, or torch/faiss/Whoosh/numpy/yaml."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "memstore", "read", "sqlite", "migration"],
                          cwd=world.repo_a, env=world.env(), capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0 and json.loads(proc.stdout)["results"], proc.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "memstore.surfaces.entry" in imported
    # json's Python half imports `re` (~6 ms): the wire uses the C encoder and scanner alone
    heavy = {"memstore.surfaces.cli", "memstore.surfaces.client", "memstore.errors", "json", "re",
             "argparse", "typing", "pathlib", "socket", "torch", "faiss", "whoosh", "numpy", "yaml", "git"}
    assert not heavy & imported, sorted(heavy & imported)


def test_any_text_crosses_the_wire_unchanged(world: Env) -> None:
    """The client encodes argv and decodes the answer with json's C halves alone: text beyond
    ASCII and the BMP, controls and bidi characters, a quote and a backslash, and argv bytes
    that are not UTF-8 come back exactly as the in-process CLI answers them."""
    text = 'Zürich 東京 🚀 build: a "quoted" C:\\path\ttab and \u202eRLO end, from the data team'
    rc, wrote, err = world.cli("write", "--kind", "fact", "--text", text, "--evidence", "user:said", cwd=world.repo_b)
    assert rc == 0, err
    for args in (("show", wrote["id"]), ("read", "Zürich", "東京", "🚀", "build"), ("list", "--kind", "fact")):
        via = subprocess.run([sys.executable, "-m", "memstore", *args], cwd=world.repo_b, env=world.env(),
                             capture_output=True, timeout=180, stdin=subprocess.DEVNULL)
        local = subprocess.run([sys.executable, "-m", "memstore", *args], cwd=world.repo_b,
                               env=world.env(MEMSTORE_DAEMON="0"), capture_output=True, timeout=180,
                               stdin=subprocess.DEVNULL)
        assert via.returncode == local.returncode == 0, via.stderr
        if args[0] == "read":
            assert json.loads(via.stdout)["results"][0]["text"] == text
            assert _ids(json.loads(via.stdout)) == _ids(json.loads(local.stdout))
        else:
            assert via.stdout == local.stdout, args
    assert json.loads(subprocess.run([sys.executable, "-m", "memstore", "show", wrote["id"]], cwd=world.repo_b,
                                     env=world.env(), capture_output=True, timeout=180,
                                     stdin=subprocess.DEVNULL).stdout)["memory"]["text"] == text
    before = world.status()["requests"]
    argv = [sys.executable.encode(), b"-m", b"memstore", b"read", b"caf\xe9", b"\xff\xfe"]
    via = subprocess.run(argv, cwd=world.repo_b, env=world.env(), capture_output=True, timeout=180,
                         stdin=subprocess.DEVNULL)
    local = subprocess.run(argv, cwd=world.repo_b, env=world.env(MEMSTORE_DAEMON="0"), capture_output=True,
                           timeout=180, stdin=subprocess.DEVNULL)
    assert world.status()["requests"] >= before + 1  # sent to the daemon, not answered in-process
    assert (via.returncode, via.stdout, via.stderr) == (local.returncode, local.stdout, local.stderr)


def test_errors_and_exit_codes_match_in_process(world: Env) -> None:
    for args in (("show", "zzzzzzzz"), ("read", "--json", "-"), ("show", "01"), ("read", "q", "--limit", "x"),
                 ("list", "--kind", "nonsense"), ("--store", "no-such-store", "list"), ("list", "--bogus")):
        rc_d, out_d, err_d = world.cli(*args, cwd=world.repo_a)
        rc_p, out_p, err_p = world.cli(*args, cwd=world.repo_a, MEMSTORE_DAEMON="0")
        assert (rc_d, out_d, err_d) == (rc_p, out_p, err_p), args
        assert rc_d in (2, 3) and err_d.startswith(("memstore: ", "usage: memstore")), err_d


def test_cli_stdin_and_relative_files_reach_the_daemon(world: Env) -> None:
    """The CLI sends its argv to the daemon: `-` must carry the client's stdin and a relative
    --json FILE must be read from the client's working directory, not the daemon's."""
    sub = world.repo_b / "sub"
    sub.mkdir(exist_ok=True)
    request = {"op": "write", "memory": {"kind": "fact", "scope": "repo", "evidence_refs": ["user:said"],
                                         "text": "beta: the nightly export job writes to the archive bucket"}}
    (sub / "req.json").write_text(json.dumps(request))
    before = world.status()["requests"]
    rc, from_file, err = world.cli("write", "--json", "req.json", cwd=sub)
    assert rc == 0, err
    piped = {**request, "memory": {**request["memory"], "text": "beta: exports are retried three times"}}
    rc, from_stdin, err = run_cli(["write", "--json", "-"], cwd=sub, env=world.env(), input=json.dumps(piped))
    assert rc == 0, err
    rc, from_text, err = run_cli(["write", "--kind", "preference", "--text", "-", "--evidence", "user:said"],
                                 cwd=sub, env=world.env(), input="beta: keep export logs for 30 days\n")
    assert rc == 0, err
    assert world.status()["requests"] >= before + 3  # answered by the daemon, not in-process
    for answer, text in ((from_file, request["memory"]["text"]), (from_stdin, piped["memory"]["text"]),
                         (from_text, "beta: keep export logs for 30 days")):
        shown = world.forward("show", world.repo_b, args={"id": answer["id"]})["answer"]
        assert shown["memory"]["text"] == text
        assert (world.repo_b / answer["path"]).is_file()
    # a missing relative file is the client's missing file: a clear error, nothing written
    files = sorted((world.repo_b / ".memory").rglob("*.md"))
    rc, out, err = world.cli("write", "--json", "nope.json", cwd=sub)
    assert rc == 2 and out["error"]["code"] == "bad_input" and "nope.json" in err
    assert sorted((world.repo_b / ".memory").rglob("*.md")) == files


def test_answers_identical_in_process_and_via_daemon(world: Env) -> None:
    queries = ["sqlite migration fails: column already exists", "where are the API server settings",
               "how should tests be written"]
    gitops.toplevel.cache_clear()
    ws = open_workspace(cwd=world.repo_a, env=world.env())
    for q in queries:
        req = {"op": "read", "query": q}
        via = world.forward("read", world.repo_a, request=req)["answer"]
        local = retrieve.read(ws, req)
        assert _ids(via) == _ids(local), q
        for a in (via, local):
            a["stats"].pop("elapsed_ms")
        assert via == local
    assert world.forward("show", world.repo_a, args={"id": world.ids_a["fact"]})["answer"] == api.show(
        ws, world.ids_a["fact"])
    lst = {"kind": None, "scope": None, "all": False, "limit": None}
    assert world.forward("list", world.repo_a, args=lst)["answer"] == api.list_memories(ws)
    # and end to end through two real CLI processes, one of them loading the model itself
    rc_d, out_d, _ = world.cli("read", "sqlite", "migration", "column", cwd=world.repo_a)
    rc_p, out_p, _ = world.cli("read", "sqlite", "migration", "column", cwd=world.repo_a, MEMSTORE_DAEMON="0")
    assert rc_d == rc_p == 0
    assert _ids(out_d) == _ids(out_p)


def _hand_write(repo: Path, name: str, text: str) -> None:
    path = repo / ".memory" / "facts" / name
    path.write_text(f"---\nkind: fact\n---\n{text}\n")


def test_hand_written_file_appears_through_the_watcher(world: Env) -> None:
    text = "The quuxotic frobnicator cache lives in var/frob/quux.db"
    world.forward("read", world.repo_a, request={"op": "read", "query": "warm up"})
    _hand_write(world.repo_a, "frob.md", text)
    found = _poll(lambda: text in _texts(world.forward("read", world.repo_a, request={
        "op": "read", "query": "quuxotic frobnicator cache"})["answer"]))
    assert found, world.log()
    # the watcher, not only the per-read stat walk, saw it: a background refresh ran
    assert _poll(lambda: "refreshed " + str(world.repo_a / ".memory") in (world.rdir / "daemon.log").read_text()
                 ), world.log()
    # an edit and a delete are seen too
    _hand_write(world.repo_a, "frob.md", "The zorblax widget cache lives in var/zorb/cache.db")
    assert _poll(lambda: any("zorblax" in t for t in _texts(world.forward("read", world.repo_a, request={
        "op": "read", "query": "zorblax widget cache"})["answer"]))), world.log()
    (world.repo_a / ".memory" / "facts" / "frob.md").unlink()
    assert _poll(lambda: not any("zorblax" in t for t in _texts(world.forward("read", world.repo_a, request={
        "op": "read", "query": "zorblax widget cache"})["answer"]))), world.log()


def test_two_stores_watched_at_once(world: Env) -> None:
    for repo in (world.repo_a, world.repo_b):
        assert world.forward("read", repo, request={"op": "read", "query": "sqlite"})["answer"]["ok"]
    watched = world.status()["watched"]
    assert str(world.repo_a / ".memory") in watched and str(world.repo_b / ".memory") in watched
    text = "The grommet scheduler retries jobs three times in beta"
    _hand_write(world.repo_b, "grommet.md", text)
    req = {"op": "read", "query": "grommet scheduler retries"}
    assert _poll(lambda: text in _texts(world.forward("read", world.repo_b, request=req)["answer"])), world.log()
    # repo stores stay isolated
    assert text not in _texts(world.forward("read", world.repo_a, request=req)["answer"])


def test_git_checkout_is_seen(world: Env) -> None:
    repo = world.repo_b
    _git(repo, "add", "-A", ".memory")
    _git(repo, "commit", "-q", "-m", "memories")
    _git(repo, "checkout", "-q", "-b", "feature")
    _hand_write(repo, "flange.md", "The flange compactor must run before the nightly export")
    _git(repo, "add", "-A", ".memory")
    _git(repo, "commit", "-q", "-m", "flange")
    req = {"op": "read", "query": "flange compactor nightly export"}
    assert _poll(lambda: any("flange" in t for t in _texts(world.forward("read", repo, request=req)["answer"])))
    _git(repo, "checkout", "-q", "main")
    assert _poll(lambda: not any("flange" in t for t in _texts(world.forward("read", repo, request=req)["answer"]))
                 ), world.log()


def test_write_through_daemon_is_visible_to_the_next_read(world: Env) -> None:
    rc, out, err = world.cli("write", "--kind", "fact", "--text", "The sprocket service listens on port 7311",
                             "--evidence", "user:told", cwd=world.repo_a)
    assert rc == 0, err
    assert (world.repo_a / out["path"]).is_file()
    rc, again, _ = world.cli("read", "sprocket", "service", "port", cwd=world.repo_a)
    assert out["id"] in [r["id"] for r in again["results"]]
    # the duplicate gate runs in the daemon too, with the same error and exit code
    rc, dup, _ = world.cli("write", "--kind", "fact", "--text", "The sprocket service listens on port 7311",
                           "--evidence", "user:told", cwd=world.repo_a)
    assert rc == 4 and dup["error"]["code"] == "duplicate"


def test_a_contradicting_pair_comes_back_as_a_dispute_through_the_daemon(world: Env) -> None:
    """Both sides written and linked by the CLI through the daemon (the link as an update event
    its warm graph takes in), then read back as one dispute."""
    before = world.status()["requests"]
    rc, utc, err = world.cli("write", "--kind", "fact", "--text", "gamma: the ledger service stores amounts in "
                             "integer cents", "--evidence", "user:read the schema", cwd=world.repo_b)
    assert rc == 0, err
    rc, cents, err = world.cli("write", "--kind", "fact", "--text", "gamma: the ledger service stores amounts as "
                               "floating point dollars", "--evidence", "user:saw a float column", cwd=world.repo_b)
    assert rc == 0, err
    rc, out, _ = world.cli("read", "gamma", "ledger", "service", "amounts", cwd=world.repo_b)
    assert {utc["id"], cents["id"]} <= {r["id"] for r in out["results"]} and out["disputes"] == []
    rc, linked, err = world.cli("update", "--type", "link", "--memory", cents["id"], "--link",
                                f"contradicts:{utc['id']}", "--evidence", "user:they disagree", cwd=world.repo_b)
    assert rc == 0 and linked["type"] == "link", err
    rc, out, _ = world.cli("read", "gamma", "ledger", "service", "amounts", cwd=world.repo_b)
    assert rc == 0
    assert [d["ids"] for d in out["disputes"]] == [[utc["id"], cents["id"]]]
    assert [s["evidence"] for s in out["disputes"][0]["sides"]] == [["user:read the schema"],
                                                                    ["user:saw a float column"]]
    assert world.status()["requests"] >= before + 5  # every call was the daemon's


def test_survives_clients_that_die_mid_request(world: Env) -> None:
    path = str(world.rdir / client.SOCKET_NAME)
    # 1. half a request, then the connection closes
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall(b'{"verb": "read", "requ')
    s.close()
    # 2. a whole request, then gone before the answer
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    msg = {"verb": "read", "version": client.code_version(), "cwd": str(world.repo_a),
           "env": client.forwarded_env(world.env()), "request": {"op": "read", "query": "sqlite migration"}}
    s.sendall(json.dumps(msg).encode() + b"\n")
    s.close()
    # 3. a client process killed while it waits
    code = ("import socket,sys,time; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
            "s.sendall(b'{\"verb\": \"ping\"'); print('ready', flush=True); time.sleep(60)")
    with subprocess.Popen([sys.executable, "-c", code, path], stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        proc.kill()
        proc.wait(timeout=10)
    # 4. garbage
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall(b"not json\n")
    bad = json.loads(client._recv_line(s))
    s.close()
    assert bad["exit_code"] == 2
    assert world.forward("read", world.repo_a, request={"op": "read", "query": "sqlite"})["answer"]["ok"]


def test_concurrent_clients(world: Env) -> None:
    from concurrent.futures import ThreadPoolExecutor

    req = {"op": "read", "query": "sqlite migration fails because column already exists"}
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda i: world.forward("read", (world.repo_a, world.repo_b)[i % 2], request=req),
                                range(12)))
    assert all(a["answer"]["ok"] for a in answers)
    assert len({json.dumps(_ids(a["answer"])) for a in answers[::2]}) == 1


# -- life cycle (own runtime dir, own daemons) -----------------------------------------------------------
def test_stale_socket_autostart_version_restart_idle_exit(tmp_path: Path) -> None:
    life = Env(tmp_path / "life")
    try:
        with life.environ():
            repo = life.make_repo("repo")
            _seed(life, repo, "gamma")
        # A socket file left by a killed daemon: nobody listens on it.
        client.ensure_runtime_dir(life.env())
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stale.bind(str(life.rdir / client.SOCKET_NAME))
        stale.close()
        # The CLI answers in-process and starts a daemon for next time.
        rc, out, err = life.cli("read", "sqlite", "migration", cwd=repo)
        assert rc == 0 and out["ok"], err
        assert client.wait_until_up(WAIT, env=life.env()), life.log()
        first = life.status()
        # it answers on the very path the stale file held (a bind fails while that file exists)
        assert first["running"] and first["socket"] == str(life.rdir / client.SOCKET_NAME)
        # A client of another version asks it to make way; the next CLI call starts a fresh one.
        msg = {"verb": "read", "version": "0.0.0+old", "cwd": str(repo), "env": client.forwarded_env(life.env()),
               "request": {"op": "read", "query": "x"}}
        assert life.call(msg).get("restart") is True
        assert _poll(lambda: not client.daemon_running(life.env()), 30), life.log()
        rc, out, err = life.cli("read", "sqlite", "migration", cwd=repo, MEMSTORE_DAEMON_IDLE="3")
        assert rc == 0, err
        assert client.wait_until_up(WAIT, env=life.env()), life.log()
        second = life.status()
        assert second["pid"] != first["pid"] and second["idle_seconds"] == 3
        # ... and that one leaves by itself once idle, taking its socket with it.
        assert _poll(lambda: not client.daemon_running(life.env()), 40), life.log()
        assert not (life.rdir / client.SOCKET_NAME).exists()
        assert "idle for 3.0s: exiting" in (life.rdir / "daemon.log").read_text()
    finally:
        life.cleanup()


def test_daemon_start_starts_one_leaves_a_running_one_and_restart_replaces_it(tmp_path: Path) -> None:
    life = Env(tmp_path / "start")
    try:
        rc, out, err = life.cli("daemon", "start", cwd=life.home)
        assert rc == 0 and out["ok"] and out["was_running"] is False, (out, err)
        first = life.status()
        assert first["running"] and out["pid"] == first["pid"]
        rc, again, err = life.cli("daemon", "start", cwd=life.home)
        assert rc == 0 and again["was_running"] is True and again["pid"] == first["pid"], (again, err)
        rc, fresh, err = life.cli("daemon", "restart", cwd=life.home)
        assert rc == 0 and fresh["was_running"] is True and fresh["pid"] != first["pid"], (fresh, err)
        rc, stopped, err = life.cli("daemon", "stop", cwd=life.home)
        assert rc == 0 and stopped["stopped"], (stopped, err)
        assert not client.daemon_running(life.env())
    finally:
        life.cleanup()


def test_daemon_start_waits_out_a_daemon_on_its_way_out(tmp_path: Path) -> None:
    """A daemon that is exiting holds its lifetime lock after its socket is gone, while it saves:
    `daemon start` then starts one as soon as the lock is free, not never."""
    life = Env(tmp_path / "leaving")
    try:
        rdir = client.ensure_runtime_dir(life.env())
        fd = os.open(rdir / client.LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)  # the leaving daemon's lock, and no socket
        threading.Timer(3.0, os.close, (fd,)).start()
        t0 = time.monotonic()
        rc, out, err = life.cli("daemon", "start", cwd=life.home)
        assert rc == 0 and out["ok"] and out["was_running"] is True and out["pid"], (out, err)
        assert time.monotonic() - t0 < 40, "it waited for its whole timeout"
    finally:
        life.cleanup()


def test_daemon_off_never_spawns(tmp_path: Path) -> None:
    life = Env(tmp_path / "off")
    try:
        rc, _, err = life.cli("list", cwd=life.home, MEMSTORE_DAEMON="0")
        assert rc in (0, 3), err
        time.sleep(0.3)
        assert not client.daemon_running(life.env())
        assert not (life.rdir / client.SOCKET_NAME).exists()
    finally:
        life.cleanup()


def test_an_idle_daemon_fills_the_neighbour_lists(world: Env) -> None:
    """In a pause the daemon works ahead for the association chain: every row's kept neighbour
    list gets filled (reads then never read the whole matrix for a hop)."""
    repo = world.make_repo("repo_fill")
    for i in range(40):
        _hand_write(repo, f"part{i}.md", f"Warehouse bin {i} holds spare part P-{i * 37 % 101} for the conveyor motor")
    assert world.forward("read", repo, request={"op": "read", "query": "spare part for the conveyor",
                                              "expand": {"semantic_hops": 2}})["answer"]["ok"]
    key = str((repo / ".memory").resolve())

    def lists() -> dict[str, int] | None:
        return next((ws.get("neighbour_lists") for ws in world.status()["workspaces"] if ws["repo"] == key), None)

    first = lists()
    assert first is not None and first["rows"] >= 40 and first["filled"] < first["rows"]
    # Each status call is a request, which interrupts the idle work: look every 6 s (idle after 5).
    got = _poll(lambda: (n := lists()) is not None and n["filled"] == n["rows"] and n, timeout=40, every=6)
    assert got and got["rows"] == first["rows"], world.log()
    assert "neighbour lists in" in world.log()

@contextlib.contextmanager
def own_daemon(tmp_path: Path, label: str, topic: str, **variables: str) -> Iterator[tuple[Env, Path]]:
    """A daemon of this test's own (``variables`` in its environment) serving one seeded repo."""
    life = Env(tmp_path / label)
    life.vars.update(variables)
    proc = None
    try:
        with life.environ():
            repo = life.make_repo("repo")
            _seed(life, repo, topic)
        proc = life.start("--idle", "600")
        yield life, repo
    finally:
        life.cleanup()
        if proc is not None:
            proc.wait(timeout=30)


def test_an_unused_workspace_is_evicted_and_reopened(tmp_path: Path) -> None:
    """A daemon serves every repo the user opens for hours: a workspace unused for
    `daemon.evict_seconds` is dropped with its indexes (and its stores unwatched), `daemon
    status` says so, and the next read opens it again and answers as before."""
    with own_daemon(tmp_path, "evict", "delta", MEMSTORE_DAEMON_EVICT="3") as (life, repo):
        req = {"op": "read", "query": "sqlite migration fails: column already exists"}
        first = life.forward("read", repo, request=req)["answer"]
        assert first["ok"] and first["results"], first
        store = str((repo / ".memory").resolve())
        status = life.status()
        assert status["evict_seconds"] == 3 and status["evicted"] == 0
        assert [ws["repo"] for ws in status["workspaces"]] == [store] and status["workspaces"][0]["idle_s"] >= 0
        assert store in status["watched"]
        # The first request of a workspace ran with the cyclic GC off; once answered, the GC is
        # on again with what the load made frozen, and an eviction unfreezes it.
        def gc_settled() -> bool:
            state = life.status()["gc"]
            return state["enabled"] and state["frozen_objects"] > 0

        assert _poll(gc_settled, timeout=20, every=0.2), life.status()["gc"]
        # Each status call is a request; the daemon looks for unused workspaces between requests.
        gone = _poll(lambda: (s := life.status())["evicted"] == 1 and s, timeout=30, every=1)
        assert gone and gone["workspaces"] == [] and store not in gone["watched"], life.log()
        assert gone["gc"] == {"enabled": True, "frozen_objects": 0}
        assert "workspace evicted after" in life.log()
        again = life.forward("read", repo, request=req)["answer"]
        assert _ids(again) == _ids(first)
        back = life.status()
        assert [ws["repo"] for ws in back["workspaces"]] == [store] and store in back["watched"]
        assert back["evicted"] == 1
        assert _poll(gc_settled, timeout=20, every=0.2), life.status()["gc"]


def test_the_daemon_runs_blas_on_one_thread(tmp_path: Path) -> None:
    """A read's matrix passes are one query against the rows: split over two BLAS threads on a
    busy 2-core machine they waited for a descheduled worker (16 ms against 0.7 ms at 10k
    memories). The daemon's start-up (`warm_up`, what `serve` runs before binding) leaves every
    BLAS library loaded (numpy's, faiss's) on one thread. On a 1-core machine this holds anyway."""
    code = ("import json, sys; from pathlib import Path; from threadpoolctl import threadpool_info; "
            "from memstore.surfaces.daemon import Daemon; d = Daemon(Path(sys.argv[1]), 60); d.warm_up(); "
            "d.watcher.stop(); print(json.dumps([i['num_threads'] for i in threadpool_info() "
            "if i['user_api'] == 'blas']))")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    threads = json.loads(proc.stdout.strip().splitlines()[-1])
    assert threads and set(threads) == {1}, threads


def test_a_long_answer_arrives_whole_and_its_reader_may_leave_early(world: Env) -> None:
    """The client leaves without the interpreter's teardown once the daemon's answer is written:
    an answer larger than a pipe's buffer still arrives whole, byte for byte the in-process one,
    and a reader that stops after the first bytes (`memstore list | head -c 100`) costs no
    traceback and no error exit."""
    repo = world.make_repo("repo_long")
    for i in range(400):
        _hand_write(repo, f"rack{i:03d}.md", f"Rack {i} in hall {i % 7} holds the spare fan tray FT-{i:04d}")
    args = [sys.executable, "-m", "memstore", "list", "--limit", "1000"]
    before = world.status()["requests"]
    via = subprocess.run(args, cwd=repo, env=world.env(), capture_output=True, timeout=180, stdin=subprocess.DEVNULL)
    local = subprocess.run(args, cwd=repo, env=world.env(MEMSTORE_DAEMON="0"), capture_output=True, timeout=180,
                           stdin=subprocess.DEVNULL)
    assert world.status()["requests"] >= before + 1
    assert via.returncode == local.returncode == 0, via.stderr
    assert len(via.stdout) > 64 * 1024 and len(json.loads(via.stdout)["memories"]) == 400
    assert (via.stdout, via.stderr) == (local.stdout, local.stderr)
    with subprocess.Popen(args, cwd=repo, env=world.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.read(100)
        proc.stdout.close()
        assert proc.wait(timeout=180) == 0
        assert first == via.stdout[:100] and proc.stderr.read() == b""
    assert world.status()["requests"] >= before + 2


def test_a_config_edit_counts_from_the_next_request(world: Env) -> None:
    """The daemon keys a request's workspace without opening it again while nothing it rests on
    changed: an edit of the repo's or the global config.yaml, made right before a request
    (before any watcher event), still decides that request."""
    repo = world.make_repo("repo_conf")
    rc, _, err = world.cli("init", cwd=repo)
    assert rc == 0, err
    config = repo / ".memory" / "config.yaml"
    original = config.read_text()
    text = "The conveyor belt in hall seven is serviced on Mondays"  # 54 characters
    req = {"op": "write", "mode": "dry_run", "memory": {"kind": "fact", "scope": "repo", "text": text,
                                                        "evidence_refs": ["user:said"]}}

    def code() -> str | None:
        answer = world.forward("write", repo, request=req)["answer"]
        return None if answer["ok"] else answer["error"]["code"]

    assert code() is None and code() is None
    config.write_text(original + "\nlimits:\n  max_text_chars: 40\n")
    assert code() == "too_large"
    config.write_text(original)
    assert code() is None
    glob = world.home / ".memory"
    made = not glob.exists()
    glob.mkdir(exist_ok=True)
    try:
        (glob / "config.yaml").write_text("limits:\n  max_text_chars: 30\n")
        assert code() == "too_large"
        (glob / "config.yaml").unlink()
        assert code() is None
    finally:
        (glob / "config.yaml").unlink(missing_ok=True)
        if made:  # with the .index/ a daemon makes in an existing global store
            shutil.rmtree(glob)


def test_an_edited_config_replaces_its_workspace_and_the_index_stays_whole(tmp_path: Path) -> None:
    """Workspaces are kept per effective config: after an edit of config.yaml the daemon opened a
    second one on the same store and kept the first until it idled out, and both kept the same
    .index/ current, each taking the other's writes for damage ("keyword index was damaged ...
    rebuilt" on reads, rebuilds each time). The old workspace now goes when the new one opens."""
    with own_daemon(tmp_path, "reconfig", "epsilon") as (life, repo):
        req = {"op": "read", "query": "sqlite migration fails: column already exists"}
        first = life.forward("read", repo, request=req)["answer"]
        assert first["results"], first
        config = repo / ".memory" / "config.yaml"
        config.write_text(config.read_text() + "duplicates:\n  candidates: 6\n")
        # another agent session (an episode of its own) reads the edited store
        life.vars["MEMSTORE_EPISODE"] = "01m8zzzzzzzzzzzzzzzzzzzzzz"
        second = life.forward("read", repo, request=req)["answer"]
        assert _ids(second) == _ids(first)
        store = str((repo / ".memory").resolve())
        status = life.status()
        assert [ws["repo"] for ws in status["workspaces"]] == [store] and status["evicted"] == 1, status
        for text in ("epsilon: the staging database is reset every Sunday night by the ops cron job",
                     "epsilon: release tags are signed with the team's GPG key before the upload",
                     "epsilon: the mobile build needs Xcode 16 and a provisioning profile from ops"):
            rc, _, err = life.cli("write", "--kind", "fact", "--evidence", "user:ops", "--text", text, cwd=repo)
            assert rc == 0, err
            time.sleep(1.5)  # the watcher's refresh of every workspace that holds the store
            again = life.forward("read", repo, request=req)["answer"]
            assert not [w for w in again.get("warnings", []) if "damaged" in w], again["warnings"]


def test_workspaces_that_share_a_store_share_its_index(tmp_path: Path) -> None:
    """Every repo's workspace reads the global store, and two shells with different settings
    variables make two workspaces of one repo: each kept its own index of the same .index/, took
    the other's saves for damage and rebuilt ("keyword index was damaged"). One catalog and one
    index per store now serve every workspace that reads it, whatever BM25 constants each reads
    with."""
    with own_daemon(tmp_path, "sharing", "zeta") as (life, repo):
        with life.environ():
            other = life.make_repo("other")
        config = other / ".memory" / "config.yaml"  # another repo reads with other BM25 constants
        config.write_text(config.read_text() + "read:\n  bm25_b: 0.6\n")
        notes = ["zeta-global: run ripgrep with --hidden to search dotfiles in every repository",
                 "zeta-global: format YAML with two spaces of indentation in every project",
                 "zeta-global: prefer uv for throwaway virtualenvs on laptops",
                 "zeta-global: sign tags with the hardware key, never with a file key"]
        # Autonomous: a global write in review mode waits for `memstore approve`.
        auto = {"MEMSTORE_WRITE_MODE": "autonomous"}
        for i, text in enumerate(notes):
            rc, _, err = life.cli("write", "--kind", "preference", "--scope", "global", "--evidence", "user:me",
                                  "--text", text, cwd=repo if i % 2 == 0 else other, **auto)
            assert rc == 0, err
            for cwd, env in ((repo, {}), (other, {}), (repo, auto), (other, auto)):
                rc, out, err = life.cli("read", "how do I search dotfiles with ripgrep", cwd=cwd, **env)
                assert rc == 0, err
                assert not [w for w in out.get("warnings", []) if "damaged" in w], (cwd, env, out["warnings"])
                assert any("ripgrep" in r["text"] for r in out["results"]), out
        assert len(life.status()["workspaces"]) == 4  # each repo, with and without the other settings


def test_a_bad_value_added_to_config_is_named_by_the_next_read_and_gone_once_fixed(world: Env) -> None:
    """A value memstore cannot use leaves the settings as they were (its default applies), so
    the workspace kept for those settings answered without the warning, and kept warning after
    the line was fixed."""
    config = world.repo_b / ".memory" / "config.yaml"
    good = config.read_text()
    req = {"op": "read", "query": "sqlite migration fails: column already exists"}
    try:
        assert not world.forward("read", world.repo_b, request=req)["answer"].get("warnings")
        config.write_text(good + "duplicates:\n  threshold: high\n")
        warned = world.forward("read", world.repo_b, request=req)["answer"].get("warnings", [])
        assert any("duplicates.threshold: expected a number, not 'high'" in w for w in warned), warned
    finally:
        config.write_text(good)
    assert not world.forward("read", world.repo_b, request=req)["answer"].get("warnings")


def test_a_write_waiting_for_another_process_holds_up_no_other_repo(world: Env) -> None:
    """A write through the daemon whose store another process is writing to (its write lock
    held) waits for it without holding the stores it shares with other workspaces (the global
    one): a file hook in another repo answers with its injection meanwhile, within its budget."""
    from memstore.store.files import file_lock

    repo_a, repo_b = world.repo_a, world.repo_b  # type: ignore[attr-defined]
    (repo_b / "src").mkdir(exist_ok=True)
    (repo_b / "src" / "ledger.py").write_text("def post():\n    return 1\n")
    rc, out, err = world.cli("write", "--kind", "problem", "--evidence", "file:src/ledger.py", "--text",
                             "beta: ledger postings are doubled when the nightly job is retried", cwd=repo_b)
    assert rc == 0, err
    mid = out["id"]
    payload = {"session_id": "wait1", "cwd": str(repo_b), "hook_event_name": "PreToolUse", "tool_name": "Read",
               "tool_input": {"file_path": str(repo_b / "src" / "ledger.py")}}
    with file_lock(repo_a / ".memory" / ".index" / "write.lock"):  # another process is writing there
        before = world.status()["requests"]
        writer = subprocess.Popen([sys.executable, "-m", "memstore", "write", "--kind", "fact", "--evidence",
                                   "user:seen", "--text", "alpha: the ledger service runs on port 8081",
                                   "--json-out"], cwd=repo_a, env=world.env(), stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert _poll(lambda: world.status()["requests"] >= before + 2, timeout=60), world.log()
        hook = subprocess.run([sys.executable, "-m", "memstore", "integrate", "claude", "--hook", "file"],
                              input=json.dumps(payload), capture_output=True, text=True, cwd=repo_b,
                              env=world.env(), check=False, timeout=120)
        assert hook.returncode == 0 and mid in hook.stdout, (hook.stdout, hook.stderr, world.log())
        assert writer.poll() is None  # still waiting for the other process
    out, err = writer.communicate(timeout=180)
    assert writer.returncode == 0 and json.loads(out)["ok"], (out, err)
