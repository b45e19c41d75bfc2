"""The nouns of memstore: memories, update events and evidence references."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .kinds import (
    ATTACHING,
    DIR_KINDS,
    EVENT_TYPES,
    EVIDENCE_KINDS,
    KIND_DIRS,
    KINDS,
    LINK_KEYS,
    LIST_LINKS,
    RELATION_TYPES,
    SCOPES,
)

__all__ = [
    "ATTACHING",
    "DIR_KINDS",
    "EVENT_TYPES",
    "EVIDENCE_KINDS",
    "KINDS",
    "KIND_DIRS",
    "LINK_KEYS",
    "LIST_LINKS",
    "RELATION_TYPES",
    "SCOPES",
    "Event",
    "EvidenceRef",
    "Memory",
    "parse_evidence",
    "utc_now",
]


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class EvidenceRef:
    kind: str
    value: str
    raw: str
    # file refs
    path: str | None = None
    rev: str | None = None
    lines: tuple[int, int] | None = None
    # repo refs (file refs of another repository): its name
    repo: str | None = None
    # event refs
    episode: str | None = None
    seq: int | None = None


_FILE_RE = re.compile(r"^(?P<path>[^@#]+)(?:@(?P<rev>[0-9A-Za-z_./~^-]+))?(?:#L(?P<a>\d+)(?:-L(?P<b>\d+))?)?$")
# repo:NAME@SHA:path[#La[-Lb]]: a file of another repository at one commit (what a shared store
# holds, where a file: ref would name a file of whichever repo reads it). NAME is plain, as a
# shared store's name is; the SHA is a full or abbreviated commit, never a branch (it must not move).
_REPO_RE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]{0,99})@(?P<rev>[0-9a-fA-F]{7,40}):(?P<rest>.+)$")
_EVENT_RE = re.compile(r"^(?P<ep>[0-9a-z]{6,26}):(?P<seq>\d+)$")
_SHA_RE = re.compile(r"^[0-9a-fA-F]{4,64}$")


def parse_evidence(raw: str) -> EvidenceRef:
    """Parse ``kind:value``. Raises ValueError with a human reason on malformed input."""
    if not isinstance(raw, str) or ":" not in raw:
        raise ValueError(f"evidence ref {raw!r} is not of the form kind:value ({', '.join(EVIDENCE_KINDS)})")
    kind, _, value = raw.partition(":")
    kind = kind.strip()
    if kind not in EVIDENCE_KINDS:
        raise ValueError(f"evidence ref {raw!r}: unknown kind {kind!r} (use one of {', '.join(EVIDENCE_KINDS)})")
    if not value.strip():
        raise ValueError(f"evidence ref {raw!r} has an empty value")
    if kind == "repo":
        m = _REPO_RE.match(value)
        f = _FILE_RE.match(m.group("rest")) if m else None
        if m is None or f is None or f.group("rev"):
            raise ValueError(f"evidence ref {raw!r}: expected repo:<name>@<sha, 7-40 hex>:<path>[#L<a>-L<b>]")
        path, lines = _repo_path(raw, f)
        return EvidenceRef(kind, value, raw, path=path, rev=m.group("rev").lower(), lines=lines, repo=m.group("name"))
    if kind == "file":
        m = _FILE_RE.match(value)
        if not m:
            raise ValueError(f"evidence ref {raw!r}: expected file:<path>[@<rev>][#L<a>-L<b>]")
        path, lines = _repo_path(raw, m)
        return EvidenceRef(kind, value, raw, path=path, rev=m.group("rev"), lines=lines)
    if kind == "event":
        m = _EVENT_RE.match(value.lower())
        if not m:
            raise ValueError(f"evidence ref {raw!r}: expected event:<episode-id>:<seq>")
        return EvidenceRef(kind, value, raw, episode=m.group("ep"), seq=int(m.group("seq")))
    if kind == "commit":
        if not _SHA_RE.match(value):
            raise ValueError(f"evidence ref {raw!r}: expected commit:<sha>")
        return EvidenceRef(kind, value, raw)
    if kind == "url" and not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://\S+$", value):
        raise ValueError(f"evidence ref {raw!r}: expected url:<scheme>://...")
    return EvidenceRef(kind, value, raw)


def _repo_path(raw: str, m: re.Match[str]) -> tuple[str, tuple[int, int] | None]:
    """The repo-relative path and line range of a matched ``_FILE_RE``; ValueError when the path
    is absolute or climbs out, or the range is upside down."""
    path = m.group("path")
    if path.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:[\\/]", path) or path.startswith("~"):
        raise ValueError(f"evidence ref {raw!r}: paths must be repo-relative, not absolute")
    if ".." in re.split(r"[\\/]", path):
        raise ValueError(f"evidence ref {raw!r}: paths may not contain '..'")
    a = int(m.group("a")) if m.group("a") else None
    b = int(m.group("b")) if m.group("b") else a
    lines = (a, b) if a is not None and b is not None else None
    if lines and (lines[0] < 1 or lines[1] < lines[0]):
        raise ValueError(f"evidence ref {raw!r}: bad line range")
    return path.replace("\\", "/"), lines


# Slotted: a daemon holds every memory of a store (100k and more); a __dict__ per memory cost
# ~100 bytes each beside its fields.
@dataclass(slots=True)
class Memory:
    id: str
    kind: str
    text: str
    scope: str = "repo"
    created: str = ""
    author: str = ""
    confidence: float | None = None
    rationale: str = ""
    links: dict[str, Any] = field(default_factory=dict)
    evidence: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    path: str = ""  # relative to the store root, e.g. "facts/01jd...-x.md"
    id_derived: bool = False  # hand-written file with no id yet

    @property
    def problem(self) -> str | None:
        value = self.links.get("problem")
        return value if isinstance(value, str) else None

    def link_list(self, key: str) -> list[str]:
        value = self.links.get(key)
        if isinstance(value, str):
            return [value]
        return [v for v in (value or []) if isinstance(v, str)]

    def file_evidence(self) -> list[EvidenceRef]:
        """The well-formed ``file:`` evidence refs, in order (a hand-written file may hold a
        malformed one: ``check`` reports it, everything else skips it)."""
        out: list[EvidenceRef] = []
        for raw in self.evidence:
            if not raw.startswith("file:"):
                continue
            try:
                ref = parse_evidence(raw)
            except ValueError:
                continue
            if ref.path:
                out.append(ref)
        return out

    def relations(self) -> list[tuple[str, str]]:
        """The typed links this file holds, as (type, target id) in file order, once each:
        ``links.relations`` and the older ``related`` list (read as ``relates_to``)."""
        links = self.links
        if "relations" not in links and "related" not in links:  # most memories: no list built
            return []
        out: list[tuple[str, str]] = []
        for item in links.get("relations") or ():
            if isinstance(item, dict) and item.get("type") in RELATION_TYPES and isinstance(item.get("id"), str):
                out.append((item["type"], item["id"]))
        out += [("relates_to", target) for target in self.link_list("related")]
        return list(dict.fromkeys(out))

    def frontmatter(self) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "scope": self.scope,
            "created": self.created,
            "author": self.author,
        }
        if self.confidence is not None:
            meta["confidence"] = self.confidence
        if self.rationale:
            meta["rationale"] = self.rationale
        links = {k: v for k, v in self.links.items() if v not in (None, [], "")}
        if links:
            meta["links"] = links
        meta["evidence"] = list(self.evidence)
        if self.tags:
            meta["tags"] = list(self.tags)
        return meta

    def to_json(self) -> dict[str, Any]:
        data = self.frontmatter()
        data["text"] = self.text
        data["path"] = self.path
        return data


@dataclass(slots=True)
class Event:
    id: str
    type: str
    created: str = ""
    author: str = ""
    memory: str | None = None
    problem: str | None = None
    vote: float | None = None
    archived: bool | None = None
    old_fact: str | None = None
    change: str | None = None
    new_fact: str | None = None
    confidence: float | None = None
    rationale: str = ""
    evidence: list[str] = field(default_factory=list)
    episode: str | None = None
    relation: str | None = None  # link: the type of the typed link from ``memory`` to ``target``
    target: str | None = None
    path: str = ""
    # The store the event lies in ("" when not known): it acts only on that store's memories.
    scope: str = ""

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "type": self.type, "created": self.created, "author": self.author}
        for key in ("memory", "relation", "target", "problem", "vote", "archived", "old_fact", "change", "new_fact",
                    "confidence"):
            value = getattr(self, key)
            if value is not None:
                data[key] = value
        if self.rationale:
            data["rationale"] = self.rationale
        if self.episode:
            data["episode"] = self.episode
        data["evidence"] = list(self.evidence)
        return data
