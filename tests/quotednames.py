"""File names git C-quotes in a listing without ``-z`` (``"caf\\303\\251.md"``), which then matched
no path memstore knew: one past ASCII, a quote, a backslash, a tab and a newline (all but the
first stay quoted with ``core.quotePath=false``)."""

from __future__ import annotations

from pathlib import Path

# case -> what its name holds. ALLOWED: the cases a new file may be named with at the gate (a
# letter past ASCII is a name a person may choose; no tool of ours writes the rest)
NAMES = {"accent": "café", "quote": 'say-"hi"', "backslash": "back\\slash", "tab": "a\tb", "newline": "a\nb"}
ALLOWED = {"accent"}


def memory_file(repo: Path, case: str, text: str, *, serial: int = 0, store: str = ".memory",
                scope: str = "repo") -> str:
    """A fact with its id, as a hand-written file named with ``NAMES[case]``; its path under
    ``repo`` (``store``: the store's folder there, "" when ``repo`` is the store)."""
    mid = f"01m8{serial:02d}{'q' * 20}"
    rel = "/".join(p for p in (store, "facts", f"{mid}-{NAMES[case]}.md") if p)
    (repo / rel).write_text(f"---\nid: {mid}\nkind: fact\nscope: {scope}\ncreated: 2026-11-20T10:00:00Z\n"
                            f"evidence: ['user:ops']\n---\n{text}\n", encoding="utf-8")
    return rel
