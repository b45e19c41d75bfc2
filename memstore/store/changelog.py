"""A bounded log of what changed after a version: the one mechanism behind three logs that tell
a reader what to redo since its last look, each over its own things (``watch``: paths of a
store on disk, by change counter; ``catalog``: memory and event ids, by generation;
``scopeview``: memories whose links or standing moved, by generation). A reader too far
behind, or behind a ``forget``, gets None and rebuilds."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable


class ChangeLog:
    """(version, key groups) of each change, oldest first, at most ``limit`` keys in all."""

    def __init__(self, limit: int, groups: int = 1) -> None:
        self.limit = limit
        self.groups = groups
        self.version = 0
        self._base = 0  # the log holds every change after this version
        self._entries: deque[tuple[int, tuple[frozenset[str], ...]]] = deque()
        self._size = 0

    def note(self, version: int, *groups: Iterable[str]) -> None:
        """What ``version`` changed, one key group each (e.g. memory ids, event ids)."""
        entry = tuple(frozenset(keys) for keys in groups)
        self.version = version
        self._entries.append((version, entry))
        self._size += sum(len(keys) for keys in entry)
        while self._entries and self._size > self.limit:
            old, keys = self._entries.popleft()
            self._size -= sum(len(k) for k in keys)
            self._base = old

    def forget(self, version: int) -> None:
        """``version`` changed what nobody can list (a rebuild, an unknown change): readers
        behind it start over."""
        self.version = self._base = version
        self._entries.clear()
        self._size = 0

    def since(self, version: int) -> tuple[set[str], ...] | None:
        """The keys changed after ``version``, per group; None when the log does not reach back."""
        if version == self.version:
            return tuple(set() for _ in range(self.groups))
        if not self._base <= version < self.version:
            return None
        out: tuple[set[str], ...] = tuple(set() for _ in range(self.groups))
        for ver, keys in self._entries:
            if ver > version:
                for acc, group in zip(out, keys, strict=True):
                    acc |= group
        return out
