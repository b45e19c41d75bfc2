"""The validation layer under the interface (SPEC §3): schema -> semantic -> integrity.

Each gate raises a typed error naming the offending field; nothing is written unless every
gate passes. The duplicate gate lives with the index (it needs embeddings).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import gitops
from ..errors import IntegrityError as LinkError
from ..errors import InvalidRequest, NotFound, SchemaError, SecretError, SemanticError
from .config import Config
from .files import bad_char
from .model import EvidenceRef, Memory, parse_evidence
from .paths import check_path
from .schemas import schema_errors
from .secrets import find_secrets
from .workspace import Workspace

NEEDS_PROBLEM = ("solution", "failed_tactic")


def check_schema(name: str, request: Any) -> None:
    if not isinstance(request, dict):
        raise SchemaError("the request must be a JSON object", field="")
    errors = schema_errors(name, request)
    if errors:
        # One problem per field (an empty text is blank too: saying both only adds a line), and
        # each named: a count of "more problems" sends the caller guessing which.
        first: dict[str, str] = {}
        for fld, msg in errors:
            first.setdefault(fld, msg)
        named = [f"{fld or 'request'}: {msg}" for fld, msg in first.items()]
        rest = f"; and {len(named) - 5} more" if len(named) > 5 else ""
        field = errors[0][0]
        raise SchemaError("; ".join(named[:5]) + rest, field=field or None)


def parse_refs(refs: list[str], field: str) -> list[EvidenceRef]:
    out = []
    for i, raw in enumerate(refs):
        try:
            out.append(parse_evidence(raw))
        except ValueError as exc:
            raise SemanticError(str(exc), field=f"{field}[{i}]", code="bad_evidence") from exc
    return out


def check_secrets(values: dict[str, str]) -> None:
    for field, text in values.items():
        if not text:
            continue
        findings = find_secrets(text)
        if findings:
            first = findings[0]
            raise SecretError(
                f"{field} looks like it contains a secret ({first.kind}: {first.excerpt}); memories are committed "
                "to git, so secrets never go in them",
                field=field,
                hint="remove the secret, or describe where it lives instead (e.g. 'the token in CI secrets')",
            )


def check_file_text(text: str, what: str) -> None:
    """The whole text of a file about to be stored, as git would carry it: a secret or a control
    character in a YAML comment, a key memstore does not read or the body is refused like one
    in a field (a file edited by hand is read as hostile input)."""
    findings = find_secrets(text)
    if findings:
        first = findings[0]
        raise SecretError(
            f"{what} looks like it contains a secret on line {first.line} ({first.kind}: {first.excerpt}); "
            "memories are committed to git, so secrets never go in them", field=what,
            hint="remove the secret from the file, or describe where it lives instead")
    check_chars({what: text})


def check_chars(values: dict[str, str]) -> None:
    """Refuse control characters and undecodable bytes in fields that are stored (``files.BAD_CHARS``
    says which, and why a memory needs none of them)."""
    found = bad_char(values)
    if found is not None:
        field, what = found
        raise SemanticError(what, field=field, code="bad_chars",
                            hint="remove it (terminal colour codes, NULs and the like do not belong in a memory)")


def check_text(text: str, config: Config, field: str) -> None:
    if not text.strip():
        raise SemanticError("text is empty", field=field, code="empty_text")
    cap = config.max_text_chars
    if len(text) > cap:
        raise SemanticError(
            f"text is {len(text)} characters; the cap is {cap} (limits.max_text_chars)",
            field=field, code="too_large", hint="split it into several focused memories",
        )


def check_write_semantics(memory: dict[str, Any], config: Config) -> list[EvidenceRef]:
    kind = memory["kind"]
    links = memory.get("links") or {}
    check_text(memory["text"], config, "memory.text")
    rationale = memory.get("rationale") or ""
    cap = int(config.number("limits", "max_rationale_chars"))
    if len(rationale) > cap:
        raise SemanticError(f"rationale is {len(rationale)} characters; the cap is {cap}", field="memory.rationale",
                            code="too_large")
    refs = memory.get("evidence_refs") or []
    if not refs:
        raise SemanticError("every new memory needs at least one evidence ref (e.g. event:<episode>:<seq>, "
                            "file:path, commit:sha, user:\"quote\")", field="memory.evidence_refs",
                            code="missing_evidence")
    max_ev = int(config.number("limits", "max_evidence"))
    if len(refs) > max_ev:
        raise SemanticError(f"{len(refs)} evidence refs; at most {max_ev}", field="memory.evidence_refs",
                            code="too_large")
    if kind in NEEDS_PROBLEM and not links.get("problem_id"):
        raise SemanticError(f"a {kind} must link the problem it addresses (links.problem_id)",
                            field="memory.links.problem_id", code="missing_link")
    if kind == "change" and not links.get("change_targets"):
        raise SemanticError("a change must name what it affects (links.change_targets)",
                            field="memory.links.change_targets", code="missing_link")
    if kind not in NEEDS_PROBLEM and links.get("problem_id"):
        raise SemanticError(f"only solutions and failed tactics link a problem, not a {kind}",
                            field="memory.links.problem_id", code="bad_link")
    if (links.get("supersedes") or links.get("via_change")) and kind != "fact":
        raise SemanticError("only facts supersede other facts", field="memory.links.supersedes", code="bad_link")
    if links.get("via_change") and not links.get("supersedes"):
        raise SemanticError("via_change goes with supersedes", field="memory.links.via_change", code="bad_link")
    stored = {"memory.text": memory["text"], "memory.rationale": rationale,
              "memory.author": memory.get("author") or "",
              **{f"memory.evidence_refs[{i}]": r for i, r in enumerate(refs)},
              **{f"memory.tags[{i}]": t for i, t in enumerate(memory.get("tags") or [])}}
    check_chars(stored)
    parsed = parse_refs(refs, "memory.evidence_refs")
    check_secrets(stored)
    return parsed


def _visible_scopes(ws: Workspace, scope: str) -> list[str]:
    # A global memory may only link global memories: the global store is seen from every repo.
    return ["global"] if scope == "global" else ws.scopes(include_shared=True)


def resolve_link(ws: Workspace, prefix: str, scope: str, field: str, kinds: tuple[str, ...] | None) -> Memory:
    try:
        target = ws.find(prefix, _visible_scopes(ws, scope), field_name=field)
    except NotFound:
        if scope == "global" and ws.repo is not None and ws.repo.exists():
            try:
                ws.find(prefix, ["repo"], field_name=field)
            except (NotFound, InvalidRequest):
                pass
            else:
                raise LinkError(
                    f"{prefix} is a repo memory; a global memory may not link to a repo memory "
                    "(the global store is visible from every repo)", field=field, code="global_to_repo",
                ) from None
        raise LinkError(f"no memory with id {prefix!r} to link to", field=field, code="unknown_link") from None
    if kinds and target.kind not in kinds:
        raise LinkError(f"{field} must be a {' or '.join(kinds)}, but {target.id} is a {target.kind}",
                        field=field, code="wrong_kind")
    return target


def resolve_write_links(ws: Workspace, memory: dict[str, Any]) -> dict[str, Any]:
    scope = memory["scope"]
    links = memory.get("links") or {}
    out: dict[str, Any] = {}
    if links.get("problem_id"):
        out["problem"] = resolve_link(ws, links["problem_id"], scope, "memory.links.problem_id", ("problem",)).id
    for key, kinds in (("related", None), ("change_targets", None), ("supersedes", ("fact",))):
        values = links.get(key) or []
        resolved = [resolve_link(ws, v, scope, f"memory.links.{key}[{i}]", kinds).id for i, v in enumerate(values)]
        if resolved:
            out[key] = list(dict.fromkeys(resolved))
    if links.get("via_change"):
        out["via_change"] = resolve_link(ws, links["via_change"], scope, "memory.links.via_change", ("change",)).id
    relations = resolve_relations(ws, links.get("relations") or [], scope, "memory.links.relations",
                                  [("relates_to", target) for target in out.get("related", [])])
    if relations:
        out["relations"] = [{"type": kind, "id": target} for kind, target in relations]
    return out


def resolve_relations(ws: Workspace, items: list[dict[str, str]], scope: str, field: str,
                      existing: list[tuple[str, str]], source: str | None = None,
                      current: Mapping[str, list[tuple[str, str]]] | None = None) -> list[tuple[str, str]]:
    """``{type, id}`` items resolved to full ids: each target exists and may be linked from
    ``scope``, none is ``source`` itself, and none repeats a link in ``existing`` (the source's
    links now), the items, or ``current`` (every memory's links now: a ``relates_to`` or
    ``contradicts`` link reads the same from either end, so the mirror counts as a repeat)."""
    seen = set(existing)
    out: list[tuple[str, str]] = []
    for i, item in enumerate(items):
        where = f"{field}[{i}].id" if field.endswith("relations") else f"{field}.id"  # a list, or one
        kind = item["type"]
        target = resolve_link(ws, item["id"], scope, where, None).id
        if target == source:
            raise LinkError(f"{target} cannot be linked to itself", field=where, code="self_link")
        if (kind, target) in seen:
            raise LinkError(f"{source or 'the memory'} already {kind} {target}", field=where, code="duplicate_link")
        mirrored = current is not None and kind in SYMMETRIC and (kind, source) in current.get(target, ())
        if source is not None and mirrored:
            raise LinkError(f"{target} already {kind} {source} (the link reads both ways)", field=where,
                            code="duplicate_link")
        seen.add((kind, target))
        out.append((kind, target))
    return out


# Links that read the same from either end: one of them is enough.
SYMMETRIC = ("relates_to", "contradicts")


def check_evidence_exists(ws: Workspace, refs: list[EvidenceRef], scope: str, field: str) -> list[str]:
    """At write time evidence must point at something real: the file exists, the commit resolves,
    the episode event and the memory exist. (Later, code moves on: ``check`` calls that stale.)"""
    worktree = ws.repo.worktree if ws.repo is not None else None
    out: list[str] = []
    for i, ref in enumerate(refs):
        where = f"{field}[{i}]"
        if ref.kind == "file":
            if worktree is None:
                raise LinkError(f"{ref.raw}: file evidence needs a git work tree to point into", field=where,
                                code="evidence_not_found")
            target = (worktree / check_path(ref.path or "", where)).resolve()
            if not target.is_relative_to(worktree.resolve()):
                raise LinkError(f"{ref.raw}: path leaves the repository", field=where, code="bad_evidence")
            if ref.rev:
                sha = gitops.resolve_commit(ref.rev, worktree)
                if sha is None:
                    raise LinkError(f"{ref.raw}: revision {ref.rev!r} does not resolve", field=where,
                                    code="evidence_not_found")
                if gitops.show_file(sha, ref.path or "", worktree) is None and not target.is_file():
                    raise LinkError(f"{ref.raw}: no such file at {ref.rev}", field=where, code="evidence_not_found")
            elif not target.is_file():
                raise LinkError(f"{ref.raw}: no such file in the repository", field=where, code="evidence_not_found")
            if ref.lines:
                _check_line_range(ref, worktree, target, where)
        elif ref.kind == "commit":
            cwd = worktree or (ws.global_.root if ws.global_.exists() else Path.cwd())
            if gitops.resolve_commit(ref.value, cwd) is None:
                raise LinkError(f"{ref.raw}: no such commit", field=where, code="evidence_not_found")
        elif ref.kind == "event":
            _check_event_ref(ws, ref, scope, where)
        elif ref.kind == "memory":
            target_mem = resolve_link(ws, ref.value, scope, where, None)
            out.append(f"memory:{target_mem.id}")
            continue
        out.append(ref.raw)
    return out


def _check_line_range(ref: EvidenceRef, worktree: Path, target: Path, where: str) -> None:
    """``#La-Lb`` must lie inside the file (at ``@rev`` when one is given): a range past its end
    cites nothing, and later reads would point people at lines that never existed."""
    assert ref.lines is not None
    data: bytes | None = None
    if ref.rev:
        data = gitops.show_file(ref.rev, ref.path or "", worktree)
    if data is None:
        try:
            data = target.read_bytes()
        except OSError:
            return
    n = data.count(b"\n") + (0 if not data or data.endswith(b"\n") else 1)
    if ref.lines[1] > n:
        raise SemanticError(f"{ref.raw}: line {ref.lines[1]} is past the end of {ref.path} ({n} lines)", field=where,
                            code="bad_evidence")


def _check_event_ref(ws: Workspace, ref: EvidenceRef, scope: str, where: str) -> None:
    # Episodes are evidence, not memories: a global preference may cite the repo session it
    # was learned in.
    for store in ws.stores(include_global=True):
        seqs = store.episode_seqs(ref.episode or "")
        if seqs is not None:
            if ref.seq not in seqs:
                raise LinkError(f"{ref.raw}: episode has no event {ref.seq}", field=where, code="evidence_not_found")
            return
    raise LinkError(f"{ref.raw}: no such episode", field=where, code="evidence_not_found")
