"""Watch store directories with watchdog and tell the daemon, debounced and batched, which
stores changed: editor saves, ``git pull`` / ``checkout`` / ``merge``, other processes.

Each watched store has a change counter. A reader that walked a store while the counter stood
at ``n`` may skip the next stat walk as long as the counter still reads ``n``: that is what makes
a read at 100k memories cheap while keeping the walk as the safety net (SPEC §5).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer

from .changelog import ChangeLog
from .model import KIND_DIRS

log = logging.getLogger("memstore.surfaces.daemon")

# Only these top-level entries of a store feed the index; episodes, .index/, .local/ and .git/
# change all the time and must not trigger refreshes (the index writing .index/ would loop).
RELEVANT_TOP = {*KIND_DIRS.values(), "events", "config.yaml"}
IGNORED_EVENTS = {"opened", "closed_no_write", "closed"}  # reads and close-after-modify add nothing
# The events asked of inotify. Without a filter the kernel reports every open and close, so the
# daemon's own reading of a fresh clone (10k files) queued ~20k events that watchdog's threads
# parsed in Python, holding the GIL the first read needed. A folder's "modified" is left out
# too: each entry added or removed has its own event (see _Handler).
EVENT_FILTER = [FileCreatedEvent, DirCreatedEvent, FileDeletedEvent, DirDeletedEvent,
                FileModifiedEvent, FileMovedEvent, DirMovedEvent]
TEMP_SUFFIXES = ("~", ".tmp", ".swp", ".swx", ".swo", ".part")
LOG_LIMIT = 20000  # changes remembered per store; a burst larger than this makes readers walk


def relevant(root: Path, path: str) -> bool:
    """Does a change at ``path`` (inside the store at ``root``) matter to the index?"""
    try:
        rel = Path(path).relative_to(root)
    except ValueError:
        return False
    parts = rel.parts
    if not parts:
        return True  # the store directory itself (created, deleted, moved)
    if parts[0] not in RELEVANT_TOP:
        return False
    name = parts[-1]
    # Editor swap/backup files and our own atomic-write temp files are not memories.
    return len(parts) == 1 or not (name.startswith((".", "#")) or name.endswith(TEMP_SUFFIXES) or name == "4913")


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: Watcher, root: Path) -> None:
        self.watcher = watcher
        self.root = root
        # macOS's FSEvents (watchdog's observer there) reports real paths: /private/var/... for a
        # store under /var, a symlink's target for a root reached through one. inotify reports
        # the path as watched; both are mapped back onto the root as given.
        self.real = os.path.realpath(root)

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in IGNORED_EVENTS:
            return
        if event.is_directory and event.event_type == "modified":
            # A folder's entries changed: each file added or removed inside it has its own event.
            # Taking this one as "something changed somewhere" made every write cost readers a
            # stat walk of the whole store (~400 ms at 100k).
            return
        paths = [self._as_given(str(event.src_path))]
        dest = getattr(event, "dest_path", "")
        if dest:
            paths.append(self._as_given(str(dest)))
        hits = [p for p in paths if relevant(self.root, p)]
        if hits:
            gone = event.is_directory and event.event_type in ("deleted", "moved") and Path(paths[0]) == self.root
            # A file two levels down (kind folder / file) is all a reader needs to re-read;
            # anything else (a folder moved, config.yaml) makes it walk the whole store.
            rels: list[str | None] = []
            for p in hits:
                rel = Path(p).relative_to(self.root).as_posix()
                rels.append(None if event.is_directory or rel.count("/") != 1 else rel)
            self.watcher.changed(self.root, gone=gone, rels=rels)

    def _as_given(self, path: str) -> str:
        if path == self.real or path.startswith(self.real + os.sep):
            return str(self.root) + path[len(self.real):]
        return path


class Watcher:
    """One inotify watch per store root; ``on_change(roots)`` runs on a background thread once
    changes have been quiet for ``debounce`` seconds (or at the latest after ``max_delay``)."""

    def __init__(self, on_change: Callable[[set[Path]], None], *, debounce: float = 0.15,
                 max_delay: float = 1.0) -> None:
        self.on_change = on_change
        self.debounce = debounce
        self.max_delay = max_delay
        self._observer: Any = Observer()
        self._observer.daemon = True
        self._watches: dict[Path, Any] = {}
        # Per store: the store-relative paths each change counter saw, so a reader can re-read
        # just the files changed since its last look (the counter is the log's version).
        self._log: dict[Path, ChangeLog] = {}
        self._pending: set[Path] = set()
        self._first = self._last = 0.0
        self._cond = threading.Condition()
        self._stopped = False
        self._observer.start()
        self._thread = threading.Thread(target=self._run, name="memstore-debounce", daemon=True)
        self._thread.start()

    # -- watches -------------------------------------------------------------------------------
    def watch(self, root: Path) -> bool:
        """Start watching ``root`` (idempotent). False when it does not exist (yet)."""
        with self._cond:
            if root in self._watches:
                return True
            if not root.is_dir():
                return False
            try:
                self._watches[root] = self._observer.schedule(_Handler(self, root), str(root), recursive=True,
                                                            event_filter=EVENT_FILTER)
            except OSError as exc:  # e.g. inotify watch limit reached: reads keep walking
                log.warning("cannot watch %s: %s", root, exc)
                return False
            self._record(root, [None])
            log.info("watching %s", root)
            return True

    def unwatch(self, root: Path) -> None:
        with self._cond:
            watch = self._watches.pop(root, None)
            self._record(root, [None])
        if watch is not None:
            with contextlib.suppress(KeyError, OSError, ValueError):
                self._observer.unschedule(watch)

    def watched(self) -> list[Path]:
        with self._cond:
            return sorted(self._watches)

    def counter(self, root: Path) -> int | None:
        """The change counter of a watched store, None when the store is not watched."""
        with self._cond:
            return self._log[root].version if root in self._watches else None

    # -- changes -------------------------------------------------------------------------------
    def _record(self, root: Path, rels: Iterable[str | None]) -> None:
        log_ = self._log.setdefault(root, ChangeLog(LOG_LIMIT))
        paths = list(rels)
        if None in paths:  # a change of unknown extent: readers walk the store
            log_.forget(log_.version + 1)
        else:
            log_.note(log_.version + 1, [p for p in paths if p is not None])

    def changes_since(self, root: Path, counter: int) -> set[str] | None:
        """Store-relative paths changed after ``counter``; None when unknown (walk instead)."""
        with self._cond:
            if root not in self._watches:
                return None
            since = self._log[root].since(counter)
            return None if since is None else since[0]

    def note(self, root: Path, rels: Iterable[str]) -> None:
        """The daemon's own writes: visible to the next reader at once, by path."""
        with self._cond:
            self._record(root, list(rels))

    def changed(self, root: Path, *, gone: bool = False, rels: Iterable[str | None] = (None,)) -> None:
        with self._cond:
            self._record(root, rels)
            now = time.monotonic()
            if not self._pending:
                self._first = now
            self._pending.add(root)
            self._last = now
            self._cond.notify()
        if gone:
            # The directory itself went away (checkout of a branch without it): its inotify
            # watch is dead. Readers walk until the next request re-watches a new directory.
            self.unwatch(root)

    def bump(self, roots: Iterable[Path]) -> None:
        """Mark stores changed right now (the daemon's own writes: no waiting for inotify)."""
        with self._cond:
            for root in roots:
                self._record(root, [None])

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                while True:
                    now = time.monotonic()
                    wait = min(self._last + self.debounce, self._first + self.max_delay) - now
                    if wait <= 0 or self._stopped:
                        break
                    self._cond.wait(wait)
                roots, self._pending = self._pending, set()
            try:
                self.on_change(roots)
            except Exception:  # a failed background refresh must not kill the watcher
                log.exception("background refresh failed")

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._observer.stop()
        self._observer.join(timeout=5)
