"""macOS paths, run here: the Linux-only names removed (SO_PEERCRED), the platform said to be
darwin, and paths reported as macOS's FSEvents reports them, so a break only macOS would meet
fails on Linux too."""

from __future__ import annotations

import _socket
import os
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from daemonworld import Env, _seed
from watchdog.events import FileCreatedEvent

from memstore.store.watch import Watcher, _Handler
from memstore.surfaces import daemon, daemon_status, wire

# Deletes the Linux-only names at interpreter start, before memstore imports anything.
SITECUSTOMIZE = """\
import _socket, socket
for _mod in (_socket, socket):
    if hasattr(_mod, "SO_PEERCRED"):
        delattr(_mod, "SO_PEERCRED")
"""


def _without_peercred(monkeypatch: pytest.MonkeyPatch) -> None:
    for mod in (socket, _socket):
        monkeypatch.delattr(mod, "SO_PEERCRED", raising=False)


def test_the_daemon_serves_the_cli_on_a_platform_without_so_peercred(tmp_path: Path) -> None:
    site = tmp_path / "macos-like"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    life = Env(tmp_path / "world")
    life.vars["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    probe = subprocess.run([sys.executable, "-c", "import socket, _socket; print(hasattr(socket, 'SO_PEERCRED'), "
                            "hasattr(_socket, 'SO_PEERCRED'))"], env=life.env(), capture_output=True, text=True,
                           check=True)
    assert probe.stdout.split() == ["False", "False"]
    proc = None
    try:
        with life.environ():
            repo = life.make_repo("repo")
            ids = _seed(life, repo, "kappa")
        proc = life.start("--idle", "600")  # returns once the daemon answered a status request
        before = life.status()["requests"]
        code, answer, err = life.cli("read", "sqlite migration fails: column already exists", cwd=repo)
        assert code == 0, err
        assert ids["problem"] in {r["id"] for r in answer["results"]}
        assert life.status()["requests"] >= before + 1, "the CLI did not go through the daemon"
        assert "Traceback" not in life.log()
    finally:
        life.cleanup()
        if proc is not None:
            proc.wait(timeout=30)


def test_linux_peer_uid_is_the_callers() -> None:
    if not hasattr(socket, "SO_PEERCRED"):
        pytest.skip("SO_PEERCRED is Linux's")
    a, b = socket.socketpair(socket.AF_UNIX)
    with a, b:
        assert wire.peer_uid(a) == os.getuid()
        assert daemon._same_user(a)


def test_without_a_peer_uid_the_socket_permissions_are_the_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    """macOS where LOCAL_PEERCRED fails (on Linux the same getsockopt is refused): no crash, the
    0600 socket in its 0700 directory decides; the client's check of the daemon likewise."""
    _without_peercred(monkeypatch)
    monkeypatch.setattr(sys, "platform", "darwin")
    a, b = socket.socketpair(socket.AF_UNIX)
    with a, b:
        assert wire.peer_uid(a) is None
        assert daemon._same_user(a)
        wire.check_peer(a, "/run/test.sock")  # raises Untrusted on a stranger; here nothing to say


class _XucredSocket:
    """A connected socket as macOS answers getsockopt(SOL_LOCAL, LOCAL_PEERCRED): a struct xucred."""

    def __init__(self, uid: int, version: int = 0) -> None:
        self.uid, self.version = uid, version
        self.asked: list[tuple[int, int, int]] = []

    def getsockopt(self, level: int, name: int, size: int) -> bytes:
        self.asked.append((level, name, size))
        return struct.pack("=IIh2x16I", self.version, self.uid, 1, *([20] * 16))


def test_macos_local_peercred_refuses_another_uid(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_peercred(monkeypatch)
    monkeypatch.setattr(sys, "platform", "darwin")
    stranger = _XucredSocket(os.getuid() + 1)
    assert not daemon._same_user(stranger)  # type: ignore[arg-type]
    assert stranger.asked == [(0, 1, 76)]  # SOL_LOCAL, LOCAL_PEERCRED, sizeof(struct xucred)
    with pytest.raises(wire.Untrusted):
        wire.check_peer(stranger, "/tmp/memstore-x/daemon.sock")  # type: ignore[arg-type]
    assert daemon._same_user(_XucredSocket(os.getuid()))  # type: ignore[arg-type]
    assert wire.peer_uid(_XucredSocket(os.getuid(), version=7)) is None  # type: ignore[arg-type]


def test_daemon_status_reports_memory_without_proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """macOS has no /proc: `memstore daemon status` still names the daemon's memory, the peak
    (getrusage) and the figure now (ps), in the MiB that /proc's figures give on Linux."""
    d = daemon.Daemon(tmp_path / "run", 60)
    try:
        linux = d.status()
        assert set(linux) >= {"rss_mb", "peak_rss_mb"}, "this host has no /proc to compare with"
        monkeypatch.setattr(daemon_status, "PROC_STATUS", tmp_path / "no-proc" / "status")
        answer = d.status()
    finally:
        d.watcher.stop()
    assert answer["ok"] and answer["running"]
    # The same process a moment apart: a unit mistaken (bytes for KiB) would be 1024 times off.
    assert abs(answer["peak_rss_mb"] - linux["peak_rss_mb"]) <= max(8.0, 0.05 * linux["peak_rss_mb"]), (answer, linux)
    assert abs(answer["rss_mb"] - linux["rss_mb"]) <= max(8.0, 0.05 * linux["rss_mb"]), (answer, linux)
    assert answer["rss_mb"] <= answer["peak_rss_mb"] + 2


def test_a_change_reported_by_its_real_path_reaches_the_store_watched_through_a_link(tmp_path: Path) -> None:
    """FSEvents reports /private/var/... for a store under /var (a link on macOS): the change
    must still be the store's, or the daemon never sees a new memory until its resync."""
    real = tmp_path / "private" / "store"
    (real / "facts").mkdir(parents=True)
    alias = tmp_path / "store-link"
    alias.symlink_to(real)
    seen: list[set[Path]] = []
    fired = threading.Event()

    def on_change(roots: set[Path]) -> None:
        seen.append(roots)
        fired.set()

    watcher = Watcher(on_change, debounce=0.01, max_delay=0.05)
    try:
        _Handler(watcher, alias).on_any_event(FileCreatedEvent(str(real / "facts" / "new.md")))
        assert fired.wait(5), "a change under the store's real path was dropped"
        assert seen == [{alias}]
    finally:
        watcher.stop()
