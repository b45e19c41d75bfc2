"""``memstore review --base REV [--head REV]``: what memory has to say about a pull request.

Three sections, each present only when it has something to say (docs/review.md is the JSON
contract):

1. ``touched``: memories whose ``file:`` evidence cites lines (or a whole file) the change
   rewrites, with the overlap and what the memory claims (``git/prreview``).
2. ``seen_before``: past problems, solutions and failed tactics about the code the change
   touches, found by one ``read`` of the PR's title, body and changed lines through read's own
   precision gate, then kept only when the memory's ``file:`` lines, as they stand at the base,
   lie within ``SEEN_NEAR_LINES`` of a hunk and its text shares a word with the title or the
   changed lines; a failed tactic with no code that close, only when the title and the changed
   lines each share ``TACTIC_WORDS`` words with it (the change says and does what was tried).
   A shared word is neither a piece of a changed path or a URL nor common in the store. On real
   histories (bench/eval_review.py) read's gate plus a shared file still showed something for a
   quarter of changes, mostly terse memories sharing a file and "fix"; failed tactics with no
   anchor (a history's reverts) answered half of all changes. An empty section is the usual and
   right answer; each item says why it is shown (``reason``).
3. ``added``: what the PR adds to ``.memory/``: ``check --base`` findings and the readable
   ``diff`` (with author and episode).

Only the repo store is asked: a comment on a PR is public, and the reviewer's global store is
theirs.
"""

from __future__ import annotations

import re
import time
from collections.abc import Collection
from typing import Any

from .. import gitops
from ..git import prreview
from ..git.review import branch_diff
from ..index.terms import STOP_WORDS
from ..read.longquery import MAX_QUERY_CHARS
from ..store import relations
from ..store.model import Memory
from ..store.workspace import Workspace
from .settings import check

SEEN_KINDS = ["failed_tactic", "problem", "solution"]
SEEN_LIMIT = 5
SEEN_ASKED = 10  # read's results before the rule below keeps at most SEEN_LIMIT
SEEN_NEAR_LINES = 20  # cited lines this close to a hunk are about the changed code (bench/eval_review.py)
TACTIC_WORDS = 2  # a failed tactic with no code near the change: words shared with the title AND the lines
COMMON_SHARE = 0.1  # a word in more than this share of the store's memories says nothing about a change
COMMON_MIN = 3  # ... and in at least this many (a small store has no common words)
PR_WORDS_CHARS = 1200  # of the query: the title and body first, the changed lines fill the rest
MARKER = "<!-- memstore-review -->"  # how the posted comment is found again


def seen_query(title: str | None, body: str | None, hunks: str) -> str:
    """The read's query: the PR's own words first (what it says it does), then its changed lines,
    cut below read's long-query limit so nothing is condensed away unseen."""
    words = "\n".join(p.strip() for p in (title or "", body or "") if p and p.strip())[:PR_WORDS_CHARS]
    room = MAX_QUERY_CHARS - len(words) - 1
    return "\n".join(p for p in (words, hunks[:max(room, 0)]) if p).strip()


def review(ws: Workspace, base: str, head: str | None = None, *, title: str | None = None,
           body: str | None = None) -> dict[str, Any]:
    t0 = time.perf_counter()
    store = ws.store("repo")
    store.require()
    ch = prreview.change(store, base, head)
    assert store.worktree is not None
    at_head = ch.head == gitops.head_sha(store.worktree)
    answer: dict[str, Any] = {"ok": True, "base": base, "head": head or "HEAD", "base_sha": ch.base,
                              "head_sha": ch.head, "merge_base": ch.merge_base,
                              "changed_files": sorted(ch.files)}

    # 3 first: the memories the PR itself brings are not news about the PR in sections 1 and 2.
    added: dict[str, Any] | None = None
    own: set[str] = set()
    if at_head:
        diff = branch_diff(ws, base)
        report = check(ws, base=base).to_json()
        own = {m["id"] for m in diff["memories"]}
        findings = [p for p in report["problems"] if p["severity"] != "stale"]
        if diff["memories"] or diff["events"] or diff["episodes"] or diff["problems"] or findings:
            added = {"memories": [_added_memory(m) for m in diff["memories"]], "events": diff["events"],
                     "episodes": diff["episodes"], "problems": diff["problems"], "check": findings,
                     "check_ok": report["ok"]}

    touched = prreview.touched(ws, ch, exclude=own)
    partial: list[bool] = []
    seen = _seen_before(ws, title, body, ch, exclude=own | {t["id"] for t in touched}, partial=partial)
    _add_doubts(ws, touched)

    answer["sections"] = {k: v for k, v in (("touched", touched), ("seen_before", seen), ("added", added)) if v}
    if not at_head:
        answer["notes"] = ["the head is not the checked-out commit: what the PR adds to .memory/ is not shown "
                           "(check out the head to see it)"]
    if partial:
        answer["seen_before_partial"] = True
    answer["nothing_to_say"] = not answer["sections"]
    answer["elapsed_ms"] = round((time.perf_counter() - t0) * 1000)
    return answer


def _add_doubts(ws: Workspace, items: list[dict[str, Any]]) -> None:
    """The doubts each memory the change touches carries (``relations.doubts``, the rule every
    surface applies); its cited lines are this section's own news, so staleness is not asked."""
    if not items:
        return
    from .api import combined_graph

    memories, graph = combined_graph(ws, ["repo"])
    for item in items:
        mem = memories.get(item["id"])
        item["doubts"] = relations.doubts(mem, graph, memories, ws.config) if mem is not None else []


def _added_memory(m: dict[str, Any]) -> dict[str, Any]:
    keep = ("id", "kind", "text", "author", "created", "path", "status", "committed", "evidence", "episode",
            "relations", "links", "id_is_provisional")
    return {k: m[k] for k in keep if k in m}


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.I)


def _words(text: str) -> set[str]:
    """Words of three letters or more, lower-cased, less stop words; a URL's pieces are not
    words of the text ("https", "github", "com" are in every link)."""
    return {w.lower() for w in _WORD.findall(_URL.sub(" ", text))} - STOP_WORDS


def _common_words(mems: Collection[Memory]) -> set[str]:
    """Words in more than COMMON_SHARE of the repo store's memories: "fix", "error", the
    project's name. Sharing one with a change says nothing about it."""
    df: dict[str, int] = {}
    for m in mems:
        for w in _words(m.text):
            df[w] = df.get(w, 0) + 1
    bar = max(COMMON_MIN, COMMON_SHARE * len(mems))
    return {w for w, n in df.items() if n > bar}


def _seen_before(ws: Workspace, title: str | None, body: str | None, ch: prreview.Change,
                 exclude: set[str], partial: list[bool]) -> list[dict[str, Any]]:
    from ..read.retrieve import read

    query = seen_query(title, body, prreview.hunk_text(ch))
    if not query:
        return []
    if ws.embed_wait is None:
        # CI clones afresh with no daemon: memories without a vector wait at most as long as a
        # read through a daemon would (daemon.read_wait_seconds), the rest are found by keyword
        # (the answer says ``seen_before_partial``), instead of embedding a whole store first.
        ws.embed_wait = ws.config.read_wait
    ans = read(ws, {"query": query, "kinds": SEEN_KINDS, "include_global": False, "limit": SEEN_ASKED},
               log_episode=False)
    if ans.get("partial"):
        partial.append(True)
    results = [r for r in ans["results"] if r["id"] not in exclude and r.get("scope") == "repo"]
    mems = ws.catalog("repo", refresh=False).memories  # the read just brought it up to date
    near = prreview.distance(ws, ch, [mems[r["id"]] for r in results if r["id"] in mems])
    words: tuple[set[str], set[str]] | None = None
    out = []
    for r in results:
        if len(out) == SEEN_LIMIT:
            break
        gap = near[r["id"]][1] if r["id"] in near else None
        close = gap is not None and gap <= SEEN_NEAR_LINES
        if not close and r["kind"] != "failed_tactic":
            continue
        if words is None:  # only now: the store's common words take a pass over every memory's text
            changed = "\n".join(line for fc in ch.files.values() for line in (*fc.added, *fc.removed))
            noise = {w for p in ch.files for w in _words(p)} | _common_words(mems.values())
            words = _words(title or "") - noise, _words(changed) - noise
        text = _words(r["text"])
        in_title, in_lines = sorted(text & words[0]), sorted(text & words[1])
        shared = sorted(set(in_title) | set(in_lines))
        if shared and close and gap is not None:
            path = near[r["id"]][0]
            where = "cites lines the change touches" if gap == 0 else f"cites lines {gap} from a hunk"
            reason = f"{where} in {path}; shares: {', '.join(shared[:5])}"
        elif r["kind"] == "failed_tactic" and len(in_title) >= TACTIC_WORDS and len(in_lines) >= TACTIC_WORDS:
            reason = (f"a failed tactic; the change's title shares: {', '.join(in_title[:5])}; "
                      f"its changed lines: {', '.join(in_lines[:5])}")
        else:
            continue
        out.append({"id": r["id"], "kind": r["kind"], "text": r["text"], "score": round(float(r["score"]), 4),
                    "reason": reason, "path": r.get("path"), "problem": (r.get("links") or {}).get("problem"),
                    "created": r.get("created"), "evidence": r.get("evidence", []), "doubts": r.get("doubts", [])})
    return out
