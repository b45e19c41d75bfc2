"""``memstore check``: validate every memory and event file, and enforce immutability of what
is committed (SPEC §2, §7). Vanished evidence is *stale*, never invalid: code moves on."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import gitops
from ..errors import InvalidFile, NoStore, NotFound
from ..store.disk import INDEX_DIRNAME, LOCAL_DIRNAME, Store
from ..store.files import bad_char, dump_markdown, parse_markdown
from ..store.graph import Graph, archived_ids, build_graph, needs_review
from ..store.model import KIND_DIRS, Event, Memory, parse_evidence, utc_now
from ..store.relations import open_disputes
from ..store.secrets import find_secrets
from ..store.workspace import Workspace, view_order
from .staged import StagedStore, in_store, read_staged, repo_path, store_prefix
from .stale import owning_worktree

IMMUTABLE_DIRS = (*KIND_DIRS.values(), "events")
CONFIG_NAME = "config.yaml"


@dataclass
class Finding:
    severity: str  # error | warning | stale
    path: str
    code: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"severity": self.severity, "path": self.path, "code": self.code, "message": self.message}


@dataclass
class Report:
    checked: int = 0
    problems: list[Finding] = field(default_factory=list)
    fixed: list[dict[str, str]] = field(default_factory=list)

    def add(self, severity: str, path: str, code: str, message: str) -> None:
        self.problems.append(Finding(severity, path, code, message))

    @property
    def ok(self) -> bool:
        return not any(f.severity == "error" for f in self.problems)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "checked": self.checked, "problems": [f.to_json() for f in self.problems],
                "fixed": self.fixed}


_store_prefix = store_prefix  # the name review, prreview and the pre-commit hook import it by


def _changed_paths(store: Store, staged: bool, base: str | None) -> tuple[dict[str, str], str | None]:
    """(path under the store -> git status letter, the rev compared against) for committed files."""
    if store.worktree is None or not gitops.has_head(store.worktree):
        return {}, None
    prefix = _store_prefix(store)
    if base is not None:
        sha = gitops.resolve_commit(base, store.worktree)
        if sha is None:
            raise NotFound(f"--base {base!r} does not resolve to a commit", field="base", code="unknown_rev")
        old = gitops.merge_base(sha, "HEAD", store.worktree) or sha
        listed = gitops.name_status(old, "HEAD", [prefix], store.worktree)
    else:
        old = "HEAD"
        listed = gitops.name_status(old, None, [prefix], store.worktree, cached=staged)
    out: dict[str, str] = {}
    for path, status in listed.items():
        rel = in_store(path, prefix)
        if rel is not None:
            out[rel] = status
    return out, old


# What a file name under a store may not hold. memstore names its files with letters, digits and
# dashes; a control character (a tab, a newline), a quote or a backslash (what git quotes), a byte
# that is not UTF-8, or an invisible format character (a bidi override, a zero-width joiner) is a
# name no tool of ours chose, which a reviewer reads as something else than it is.
_NAME_REFUSED = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def name_problem(rel: str) -> str | None:
    """What is wrong with a store file's name (store-relative path), or None."""
    if rel.isprintable() and '"' not in rel and "\\" not in rel:
        return None  # every refused category is unprintable: 10k names take ~7 ms, not ~70
    for i, ch in enumerate(rel):
        cat = unicodedata.category(ch)
        if cat == "Cs":
            return f"the file name holds a byte that is not UTF-8 at position {i}"
        if cat in _NAME_REFUSED or ch in "\"\\":
            return f"the file name holds {ch!r} (U+{ord(ch):04X}) at position {i}"
    return None


def _names(store: Store, report: Report, paths: Collection[str]) -> None:
    for rel in sorted(paths):
        problem = name_problem(rel)
        if problem is not None:
            report.add("error", store.display_path(rel), "bad_name",
                       f"{problem}; memstore never names a file so: rename it (`git mv`) to letters, digits "
                       "and dashes")


def _committed_projections(store: Store, report: Report) -> None:
    """``.index/`` and ``.local/`` are this machine's: git must not carry them (``git add -f``
    gets past ``.gitignore``). memstore never loads an ``.index/`` it did not write, but review is
    where such files should stop, before they reach anyone's clone."""
    assert store.worktree is not None
    prefix = _store_prefix(store)
    for folder in (INDEX_DIRNAME, LOCAL_DIRNAME):
        for _mode, _sha, path in gitops.staged_entries(repo_path(prefix, folder), store.worktree):
            report.add("error", path, "committed_projection",
                       f"{folder}/ is memstore's per-machine state and must not be committed (one from elsewhere "
                       f"is never loaded); remove it from git with `git rm -r --cached {repo_path(prefix, folder)}`")


def _immutability(store: Store, report: Report, changed: dict[str, str], old: str | None,
                  staged: StagedStore | None = None) -> None:
    assert store.worktree is not None
    prefix = _store_prefix(store)
    for rel, status in sorted(changed.items()):
        top = rel.split("/", 1)[0]
        shown = store.display_path(rel)
        if status not in ("M", "D", "T"):
            continue
        if top in IMMUTABLE_DIRS and not rel.endswith(".gitkeep"):
            verb = "deleted" if status == "D" else "modified"
            # Say both ways out: undo the edit, or do what it meant with a new file.
            undo = f"undo it with `git restore --source=HEAD --staged --worktree -- {shown}`"
            if top == "events":
                fix = "a new event (`memstore update`) changes what this one did"
            else:
                name = rel.rsplit("/", 1)[-1].split("-", 1)[0].removesuffix(".md")
                mid = name if len(name) == 26 else "ID"
                fix = (f"to correct it, write a new memory that supersedes it; to retire it, `memstore update "
                       f"--type archive --memory {mid} --evidence 'user:why it no longer holds'` (an archive "
                       "needs evidence)")
            report.add("error", shown, "immutable",
                       f"committed memory files are immutable but this one was {verb}: {undo}; {fix}")
        elif top == "episodes" and status == "M" and old is not None:
            before = gitops.show_file(old, repo_path(prefix, rel), store.worktree) or b""
            if staged is not None:
                after = staged.blobs.get(rel, b"")
            else:
                after = (store.root / rel).read_bytes() if (store.root / rel).exists() else b""
            if not after.startswith(before):
                report.add("error", shown, "immutable", "episodes are append-only but committed lines were changed")
        elif top == "episodes" and status == "D":
            report.add("error", shown, "immutable", "a committed episode was deleted (evidence refs point into it)")


def _check_memory(ws: Workspace, store: Store, mem: Memory, known: dict[str, Memory], report: Report,
                  strict_ids: bool, archived: Collection[str] = ()) -> None:
    shown = store.display_path(mem.path)
    if mem.id_derived:
        report.add("error" if strict_ids else "warning", shown, "missing_id",
                   "no id/created yet; `memstore check --fix` writes them (the pre-commit hook does this)")
    if mem.kind in ("solution", "failed_tactic") and not mem.problem:
        report.add("error", shown, "missing_link", f"a {mem.kind} must link its problem (links.problem)")
    if mem.kind == "change" and not mem.link_list("change_targets"):
        report.add("error", shown, "missing_link", "a change must list change_targets")
    if not mem.evidence:
        report.add("error", shown, "missing_evidence", "at least one evidence ref is required")
    if mem.confidence is not None and not 0.0 <= mem.confidence <= 1.0:
        report.add("error", shown, "schema", "confidence must be in [0, 1]")
    if len(mem.text) > ws.config.max_text_chars:
        report.add("error", shown, "too_large", f"text is over {ws.config.max_text_chars} characters")
    _bad_chars(shown, {"text": mem.text, "rationale": mem.rationale, "author": mem.author,
                       **{f"evidence[{i}]": r for i, r in enumerate(mem.evidence)},
                       **{f"tags[{i}]": t for i, t in enumerate(mem.tags)}}, report)
    for key in ("problem", "related", "change_targets", "supersedes", "via_change"):
        for target in mem.link_list(key):
            other = known.get(target)
            if other is None:
                report.add("error", shown, "dangling_link", f"links.{key} points at {target}, which does not exist")
            elif mem.scope == "global" and other.scope == "repo":
                report.add("error", shown, "global_to_repo", f"links.{key}: a global memory may not link repo "
                           f"memory {target}")
            elif key == "problem" and other.kind != "problem":
                report.add("error", shown, "wrong_kind", f"links.problem points at a {other.kind}")
            elif key == "supersedes" and other.kind != "fact":
                report.add("error", shown, "wrong_kind", f"links.supersedes points at a {other.kind}")
            elif key == "via_change" and other.kind != "change":
                report.add("error", shown, "wrong_kind", f"links.via_change points at a {other.kind}")
            elif key == "related" and target in archived:
                report.add("warning", shown, "archived_link", f"links.related: {target} is archived")
    related = set(mem.link_list("related"))
    for kind, target in mem.relations():
        if kind == "relates_to" and target in related:
            continue  # checked above as links.related
        _check_relation(shown, mem.scope, mem.id, kind, target, known, archived, report, "links.relations")
    _check_evidence(ws, store, shown, mem.evidence, known, report)


def _bad_chars(shown: str, values: dict[str, str], report: Report) -> None:
    """A control character a write would refuse (``bad_chars``) is refused in a hand-written file too."""
    found = bad_char(values)
    if found is not None:
        report.add("error", shown, "bad_chars", f"{found[1]}; remove it (terminal escapes, NULs and the like do "
                   "not belong in a memory)")


def _check_relation(shown: str, scope: str, source: str, kind: str, target: str, known: dict[str, Memory],
                    archived: Collection[str], report: Report, where: str) -> None:
    """A typed link: to a memory that exists and may be linked from ``scope``, not to itself; one
    to an archived memory is reported, not refused (archiving later is how disputes end)."""
    other = known.get(target)
    if target == source:
        report.add("error", shown, "self_link", f"{where}: {kind} points at the memory itself")
    elif other is None:
        report.add("error", shown, "dangling_link", f"{where}: {kind} points at {target}, which does not exist")
    elif scope == "global" and other.scope == "repo":
        report.add("error", shown, "global_to_repo", f"{where}: a global memory may not link repo memory {target}")
    elif target in archived:
        report.add("warning", shown, "archived_link", f"{where}: {kind} points at {target}, which is archived")


def _check_evidence(ws: Workspace, store: Store, shown: str, refs: list[str], known: dict[str, Memory],
                    report: Report) -> None:
    worktree = owning_worktree(store)  # a store's files speak of its own repo's code, or of none here
    for raw in refs:
        try:
            ref = parse_evidence(raw)
        except ValueError as exc:
            report.add("error", shown, "bad_evidence", str(exc))
            continue
        if ref.kind == "event":
            seqs = None
            for st in ws.stores():
                seqs = st.episode_seqs(ref.episode or "")
                if seqs is not None:
                    break
            if seqs is None or ref.seq not in seqs:
                report.add("error", shown, "dangling_evidence", f"{raw}: no such episode event")
        elif ref.kind == "memory" and not any(m.startswith(ref.value) for m in known):
            report.add("error", shown, "dangling_evidence", f"{raw}: no such memory")
        elif ref.kind == "file" and worktree is not None:
            if not (worktree / (ref.path or "")).is_file():
                report.add("stale", shown, "stale_evidence", f"{raw}: the file is gone from the work tree")
        elif ref.kind == "commit" and worktree is not None and gitops.resolve_commit(ref.value, worktree) is None:
            report.add("stale", shown, "stale_evidence", f"{raw}: the commit is not in this clone")


def check_memory(ws: Workspace, store: Store, mem: Memory, *, strict_ids: bool = False) -> list[Finding]:
    """The per-memory checks ``check`` runs, for one memory (e.g. a file just saved by ``new``)."""
    known: dict[str, Memory] = {}
    # A memory of this repo may link a shared store's (a write allows it): those ids are known,
    # never checked here (a shared store's files are its own repository's to check).
    for scope in view_order(ws.scopes(include_shared=True)):
        known.update(ws.catalog(scope).memories)
    known.setdefault(mem.id, mem)
    report = Report()
    archived = archived_ids(ev for scope in ws.scopes() for ev in ws.catalog(scope).events.values())
    _file_secrets(store, mem.path, _whole_text(store, mem.path), report)
    _names(store, report, [mem.path])
    _check_memory(ws, store, mem, known, report, strict_ids, archived)
    return report.problems


def _whole_text(store: Store, rel: str) -> str:
    """A store file's text as git would carry it, every key, comment and line of it; unreadable
    here (a link, a FIFO, too large) means it is reported as invalid elsewhere, not scanned."""
    try:
        return store.read_file(rel)
    except (InvalidFile, OSError):
        return ""


def _file_secrets(store: Store, rel: str, text: str, report: Report) -> None:
    """A likely secret anywhere in a file's text: frontmatter keys memstore does not know, YAML
    comments and the body travel to every clone as much as the fields memstore parses."""
    found = find_secrets(text)
    if found:
        first = found[0]
        report.add("error", store.display_path(rel), "secret",
                   f"looks like a secret ({first.kind}: {first.excerpt} on line {first.line}); remove it from the "
                   "file (a placeholder such as <token> or ${ENV_VAR} is fine)")


def _secrets_in_files(store: Store, view: StagedStore | None, records: Any,
                      scope_to: set[str] | None, report: Report) -> None:
    """The staged text of every file under the store (what the commit would carry: memories,
    events, config.yaml, episodes, anything else), or, without ``--staged``, the work tree's
    memory and event files and config.yaml."""
    if view is not None:
        for rel, data in sorted(view.blobs.items()):
            _file_secrets(store, rel, data.decode("utf-8", errors="replace"), report)
        return
    paths = [m.path for m in records.memories.values()] + [e.path for e in records.events.values()]
    if (store.root / CONFIG_NAME).is_file():
        paths.append(CONFIG_NAME)
    for rel in sorted(set(paths)):
        if scope_to is None or rel in scope_to:
            _file_secrets(store, rel, _whole_text(store, rel), report)


def _check_event(ws: Workspace, store: Store, ev: Event, known: dict[str, Memory], report: Report,
                 archived: Collection[str] = ()) -> None:
    shown = store.display_path(ev.path)
    wanted: list[tuple[str, str | None, tuple[str, ...] | None]] = []
    if ev.type == "link":
        wanted.append(("memory", ev.memory, None))
        if ev.target:
            _check_relation(shown, store.scope, ev.memory or "", ev.relation or "", ev.target, known, archived,
                            report, "target")
        else:
            report.add("error", shown, "missing_link", "target is required")
    elif ev.type in ("utility_vote", "archive"):
        wanted.append(("memory", ev.memory, None))
        if ev.type == "utility_vote":
            if ev.vote is None or not -1.0 <= ev.vote <= 1.0:
                report.add("error", shown, "schema", "vote must be a number in [-1, 1]")
            if ev.problem:
                wanted.append(("problem", ev.problem, ("problem",)))
        elif ev.archived is None:
            report.add("error", shown, "schema", "an archive event needs archived: true|false")
    else:
        wanted += [("old_fact", ev.old_fact, ("fact",)), ("change", ev.change, ("change",)),
                   ("new_fact", ev.new_fact, ("fact",))]
    _bad_chars(shown, {"rationale": ev.rationale, "author": ev.author,
                       **{f"evidence[{i}]": r for i, r in enumerate(ev.evidence)}}, report)
    if ev.type != "utility_vote" and not ev.evidence:
        report.add("error", shown, "missing_evidence", f"a {ev.type} event needs evidence")
    for key, target, kinds in wanted:
        if not target:
            report.add("error", shown, "missing_link", f"{key} is required")
            continue
        other = known.get(target)
        if other is None:
            report.add("error", shown, "dangling_link", f"{key} points at {target}, which does not exist")
        elif kinds and other.kind not in kinds:
            report.add("error", shown, "wrong_kind", f"{key} points at a {other.kind}")
        elif key in ("memory", "old_fact") and other.scope != store.scope:
            report.add("error", shown, "scope_crossing",
                       f"{key} is {other.scope} memory {target}, but this event lies in the {store.scope} store: "
                       "events act only within their own store, so it is ignored")
        elif store.scope == "global" and other.scope == "repo":
            report.add("error", shown, "global_to_repo", f"{key}: the global store may not point at repo memory")
    _check_evidence(ws, store, shown, ev.evidence, known, report)


def fixed_text(text: str, mem: Memory) -> str:
    """A hand-written file's text with its provisional (path-derived) id and a created time."""
    meta, body = parse_markdown(text)
    ordered: dict[str, Any] = {"id": mem.id, "kind": mem.kind, "scope": mem.scope,
                               "created": meta.get("created") or utc_now()}
    for key, value in meta.items():
        if key not in ordered:
            ordered[key] = value
    body = re.sub(r"<!--.*?-->", "", body, flags=re.S).strip()
    return dump_markdown(ordered, body)


def fix_file(store: Store, mem: Memory) -> str:
    """Write the provisional (path-derived) id and a created time into a hand-written file."""
    from ..store.files import atomic_write

    atomic_write(store.root / mem.path, fixed_text(store.read_file(mem.path), mem))  # never through a link
    return mem.id


def _fix_staged(store: Store, mem: Memory, staged: StagedStore, report: Report) -> None:
    """``--fix`` on a staged file: the index is never written (SPEC §10: the hook stages nothing,
    a commit holds what was staged). Where the work tree holds exactly the staged copy, its id
    is written there for the person to review and stage; either way this commit is refused."""
    shown = store.display_path(mem.path)
    path = store.root / mem.path
    try:
        same = path.read_bytes() == staged.blobs.get(mem.path)
    except OSError:
        same = False
    if not same:
        report.add("error", shown, "missing_id", "the staged copy has no id/created yet and the work tree copy "
                   "differs from it: run `memstore check --fix`, review, `git add` it and commit again")
        return
    try:
        fix_file(store, mem)
    except (InvalidFile, OSError) as exc:
        report.add("error", shown, "fix_failed", str(exc))
        return
    report.fixed.append({"path": shown, "message": f"wrote id {mem.id} and created into the work tree copy"})
    report.add("error", shown, "missing_id", f"the staged copy has no id/created yet; they are now in the file: "
               f"`git add {shown}` and commit again")


def run_check(ws: Workspace, *, staged: bool = False, base: str | None = None, fix: bool = False,
              include_global: bool = False) -> Report:
    report = Report()
    if ws.repo is not None:
        ws.repo.refuse_link()
    stores = [s for s in ([ws.repo] if ws.repo is not None else []) if s.exists()]
    if include_global and ws.global_.exists():
        stores.append(ws.global_)
    if not stores:
        raise NoStore("no store to check", hint="run inside a repo with a .memory/ folder, or pass --store")
    # --staged checks what the commit would hold: the staged blobs of the repo store, not its work tree.
    views: dict[str, StagedStore] = {}
    if staged:
        for store in stores:
            if store.worktree is not None and store.scope == "repo":
                views[store.scope] = read_staged(store, _store_prefix(store))
    known: dict[str, Memory] = {}
    events: list[Event] = []
    for scope in view_order(ws.scopes(include_shared=True)):  # shared ids known, as check_memory's
        records = views[scope] if scope in views else ws.catalog(scope)
        known.update(records.memories)
        events += records.events.values()
    graph = build_graph(known, events)
    for store in stores:
        view = views.get(store.scope)
        cat = ws.catalog(store.scope) if view is None else None
        records = view if view is not None else cat
        assert records is not None
        changed, old = _changed_paths(store, staged, base) if store.worktree is not None else ({}, None)
        if store.worktree is not None:
            _immutability(store, report, changed, old, view)
            _committed_projections(store, report)
        scope_to = None
        if base is not None:
            # In PR review only what the branch adds is validated; the rest was reviewed before.
            scope_to = {rel for rel, st in changed.items() if st == "A"}
        # Names are judged where a file comes in: every file the branch, the commit or the work
        # tree adds under the store (any file there travels to every clone), and, in a plain
        # check, every file it reads. A name already committed is not refused again in each
        # later commit: the plain check names it, and `git mv` fixes it.
        names = {rel for rel, st in changed.items() if st == "A"}
        if view is not None and old is None:  # a first commit: everything staged is new
            names |= set(view.blobs)
        elif view is None and base is None:
            names |= {*(m.path for m in records.memories.values()), *(e.path for e in records.events.values()),
                      *records.invalid}
        _names(store, report, names)
        _secrets_in_files(store, view, records, scope_to, report)
        for rel, err in sorted(records.invalid.items()):
            if scope_to is None or rel in scope_to:
                report.checked += 1
                report.add("error", store.display_path(rel), records.codes.get(rel, "invalid_file"), err)
        if records.over_cap:
            report.add("error", store.display_path("."), "too_many_files",
                       f"{records.over_cap} files past the cap of {records.max_files} per store (limits.max_files) "
                       "were not read")
        if store.scope == "repo" and ws.global_.exists() and ws.global_.root != store.root:
            global_ids = ws.catalog("global").memories
            for mem in sorted(records.memories.values(), key=lambda m: m.path):
                if mem.id in global_ids and (scope_to is None or mem.path in scope_to):
                    report.add("error", store.display_path(mem.path), "id_conflict",
                               f"id {mem.id} is global memory {ws.global_.display_path(global_ids[mem.id].path)}; "
                               "a repo memory may not reuse a global memory's id; give this file a new id")
        fixed_paths: list[Path] = []
        for mem in sorted(records.memories.values(), key=lambda m: m.path):
            if scope_to is not None and mem.path not in scope_to:
                continue
            report.checked += 1
            if view is not None and mem.id_derived:
                if fix:
                    _fix_staged(store, mem, view, report)
                else:
                    report.add("error", store.display_path(mem.path), "missing_id",
                               "no id/created yet; `memstore check --fix` writes them, then `git add` the file")
                mem.id_derived = False  # reported once, above
            elif fix and mem.id_derived:
                try:
                    fix_file(store, mem)
                except (InvalidFile, OSError) as exc:
                    report.add("error", store.display_path(mem.path), "fix_failed", str(exc))
                else:
                    report.fixed.append({"path": store.display_path(mem.path),
                                         "message": f"wrote id {mem.id} and created"})
                    fixed_paths.append(store.root / mem.path)
                    mem.id_derived = False
            _check_memory(ws, store, mem, known, report, strict_ids=staged or base is not None,
                          archived=graph.archived)
            if needs_review(mem, ws.config, graph):
                report.add("warning", store.display_path(mem.path), "low_confidence",
                           f"written with confidence {mem.confidence:g}, below review.confidence_below "
                           f"{ws.config.review_bar:g}: confirm it (a +1 vote) or archive it")
        for ev in sorted(records.events.values(), key=lambda e: e.path):
            if scope_to is not None and ev.path not in scope_to:
                continue
            report.checked += 1
            _check_event(ws, store, ev, known, report, graph.archived)
        if fixed_paths and cat is not None:
            cat.refresh()
        _open_disputes(store, graph, known, report, scope_to)
    return report


def _open_disputes(store: Store, graph: Graph, known: dict[str, Memory], report: Report,
                   scope_to: set[str] | None) -> None:
    """A dispute both of whose sides are still active is knowledge nobody has settled: reported
    on the newer side (a warning: settling it takes a look at the code, not a fix to a file)."""
    for older, newer in open_disputes(graph, known):
        mem = known[newer]
        if mem.scope != store.scope or (scope_to is not None and mem.path not in scope_to
                                        and known[older].path not in scope_to):
            continue
        report.add("warning", store.display_path(mem.path), "open_dispute",
                   f"{newer} and {older} contradict each other and both are active: settle it against the code "
                   "and record the outcome with a change (archive or supersede the side that lost)")
