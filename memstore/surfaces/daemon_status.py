"""The figures ``memstore daemon status`` reports about the daemon's warm state: per workspace,
how far its stores are embedded and its neighbour lists filled, and the process's memory.

Kept apart from the workspaces themselves: these only read them (under the lock the workspaces
take), and what a figure means is documented here and in docs/daemon.md.
"""

from __future__ import annotations

import contextlib
import gc
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .daemon_stores import Entry, Workspaces


def workspaces(stores: Workspaces) -> list[dict[str, Any]]:
    """Each open workspace: its stores, how long unused, its stores' vectors, its neighbour lists."""
    now = time.monotonic()
    with stores.lock:
        return [{"repo": k[0] or None, "global": k[1], "idle_s": round(now - e.last_used, 1),
                 "stores": _vector_stats(e), **_near_stats(e.ws)} for k, e in stores.entries.items()]


def _vector_stats(entry: Entry) -> list[dict[str, Any]]:
    """Per store the workspace has read: memories with a vector, memories, and whether the rest
    is being embedded now (``daemon status``). A store whose first sync is under way is left
    out: its catalog may not be loaded yet, and 0 of 0 would read as done."""
    out: list[dict[str, Any]] = []
    for scope, si in list(entry.ws.indexes.items()):
        if not si.synced:
            continue
        embedded, total = si.vector_counts()
        out.append({"scope": scope, "root": str(si.store.root), "embedded": embedded, "total": total,
                    "embedding": entry.embedding and si.embedding_pending})
    return out


def _near_stats(ws: Any) -> dict[str, Any]:
    """How far the association chain's neighbour lists are filled (``daemon status``)."""
    near = ws.read_cache.get("near")
    return {"neighbour_lists": {"rows": len(near), "filled": near.known()}} if near is not None else {}


def gc_state() -> dict[str, Any]:
    return {"enabled": gc.isenabled(), "frozen_objects": gc.get_freeze_count()}


# Linux's own figures for this process: VmRSS (resident now) and VmHWM (the peak of it).
PROC_STATUS = Path("/proc/self/status")


def memory_mb() -> dict[str, float]:
    """The daemon's resident memory in MiB: ``peak_rss_mb``, the most it has held, and
    ``rss_mb``, what it holds now. Read from ``/proc/self/status`` where there is one (Linux);
    elsewhere (macOS) the peak comes from getrusage and the figure now from ``ps``. A figure
    that cannot be had is left out rather than guessed."""
    out: dict[str, float] = {}
    with contextlib.suppress(OSError):
        for line in PROC_STATUS.read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                out["rss_mb" if line.startswith("VmRSS") else "peak_rss_mb"] = round(int(line.split()[1]) / 1024, 1)
    return out or _memory_without_proc()


def _memory_without_proc() -> dict[str, float]:
    """Both figures from what every Unix has. ``ru_maxrss`` is in bytes on macOS and in KiB on
    Linux and the BSDs (getrusage(2)); ``ps -o rss=`` prints KiB on both. psutil would give the
    same but is not worth a dependency for one status line; the ``ps`` costs a status call a
    few milliseconds, and only where there is no /proc."""
    out: dict[str, float] = {}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out["peak_rss_mb"] = round(peak / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)
    with contextlib.suppress(OSError, subprocess.SubprocessError, ValueError, IndexError):
        ps = subprocess.run(["ps", "-o", "rss=", "-p", str(os.getpid())], capture_output=True, text=True,
                            timeout=5, check=True, stdin=subprocess.DEVNULL)
        out["rss_mb"] = round(int(ps.stdout.split()[0]) / 1024, 1)
    return out
