"""``memstore promote ID --to NAME``: propose one of your memories to a shared store, as a branch
of the shared store's repository, for review.

The attached clone stays read-only and at its fetched state: the branch is made in a temporary
clone of the shared store's remote, from its default branch, and pushed there. Nothing is left
on this machine but the answer (a refused promote leaves no branch, no clone). The memory keeps
its id and frontmatter; what only made sense in its own repository is rewritten for every
reader: a ``file:`` evidence becomes ``repo:NAME@SHA:path`` (NAME the source repository, SHA the
commit it was read at), and a link to a memory the shared store does not hold is dropped.
"""

from __future__ import annotations

import re
import shlex
import shutil
import tempfile
from pathlib import Path
from typing import Any, cast

from .. import gitops
from ..errors import Conflict, GitError, InvalidRequest, NotFound
from ..git.sync import REMOTE, redact_url
from ..store.disk import SHARED_PREFIX, slugify
from ..store.files import dump_markdown
from ..store.kinds import KIND_DIRS
from ..store.model import Memory, parse_evidence
from ..store.validate import check_file_text, check_schema, check_write_semantics
from ..store.workspace import Workspace, attached_names, shared_root, valid_shared_name
from .answers import WriteAnswer
from .shared import NAME_RULE

# Link keys whose values name memories (all of LINK_KEYS but relations, which holds {type, id}).
_ID_LINKS = ("problem", "related", "change_targets", "supersedes", "via_change")


def promote(ws: Workspace, prefix: str, name: str, cwd: Path) -> dict[str, Any]:
    """Push memory ``prefix`` (repo or global store) to a new branch of shared store ``name``'s
    remote. Every write gate runs on the file first; a refusal writes nothing anywhere."""
    url = attached_url(ws, name, "to")
    mem = ws.find(prefix, ws.scopes(include_shared=False), field_name="id")
    source = ws.store(mem.scope).worktree
    proposal = propose(ws, mem, name, url, source, cwd, verb="promote", field="to", evidence_field="evidence")
    answer: dict[str, Any] = {"ok": True, "id": mem.id, "from": mem.scope, "to": SHARED_PREFIX + name}
    answer.update(proposal)
    answer["next"] = f"open a pull request of {answer['branch']} into {answer['base']} in the shared store's repository"
    _gh(answer, url, mem, f"Promotes {mem.kind} {mem.id} from {mem.scope}.")
    return answer


def write_shared(ws: Workspace, mem: Memory, name: str, url: str, *, dry_run: bool = False) -> WriteAnswer:
    """``write --scope shared:NAME``: the new memory ``mem`` (through the write's gates already)
    goes straight to review in shared store ``name``, as a promoted one does; nothing is written
    on this machine, not in the attached clone, not in the repo or global store."""
    source = ws.repo.worktree if ws.repo is not None else None
    proposal = propose(ws, mem, name, url, source, source or Path.cwd(), verb="write", field="memory.scope",
                       evidence_field="memory.evidence_refs", dry_run=dry_run)
    answer: dict[str, Any] = {"ok": True, "id": mem.id, "kind": mem.kind, "scope": mem.scope,
                              "mode": "dry_run" if dry_run else "review", **proposal}
    if not dry_run:
        answer["next"] = (f"open a pull request of {answer['branch']} into {answer['base']} "
                          "in the shared store's repository")
        _gh(answer, url, mem, f"Adds {mem.kind} {mem.id}, written for shared store {name}.")
    return cast("WriteAnswer", answer)


def attached_url(ws: Workspace, name: str, field: str) -> str:
    """The remote of attached shared store ``name``: where a proposal for it is pushed."""
    if not valid_shared_name(name):
        raise InvalidRequest(f"{name!r} is not a shared store name ({NAME_RULE})", code="bad_name", field=field)
    if name not in attached_names(ws.global_.root):
        raise NotFound(f"no shared store named {name!r} is attached", code="not_attached", field=field,
                       hint="see `memstore attached`, or `memstore attach URL --name NAME` first")
    url = gitops.config_get(f"remote.{REMOTE}.url", shared_root(ws.global_.root) / name)
    if url is None:
        raise GitError(f"the clone of shared store {name!r} has no {REMOTE} remote to push to", field=field)
    return url


def propose(ws: Workspace, mem: Memory, name: str, url: str, source: Path | None, cwd: Path, *, verb: str,
            field: str, evidence_field: str, dry_run: bool = False) -> dict[str, Any]:
    """Put ``mem`` on a new branch ``memstore/<verb>-<id tail>`` of shared store ``name``'s remote
    ``url``, made from its default branch in a temporary clone: ``file:`` evidence (of the
    repository at ``source``) named in ``repo:`` form, links to memories the store lacks dropped,
    every write gate run on the file as the store will hold it. ``dry_run`` stops before the
    branch. A refusal leaves no branch on the remote and no clone here.

    Answers ``url`` (redacted), ``branch``, ``base``, ``commit``, ``path``, ``evidence`` and
    ``dropped_links`` (and ``content`` instead of ``branch``/``commit`` when ``dry_run``)."""
    evidence = [_cross_repo(raw, source, f"{evidence_field}[{i}]") for i, raw in enumerate(mem.evidence)]
    tmp = Path(tempfile.mkdtemp(prefix=f"memstore-{verb}-{name}-"))
    try:
        work = tmp / "store"
        gitops.clone(url, work, None, cwd)
        base = gitops.current_branch(work) or "main"
        held = _ids_in(work)
        links, dropped = _links_within(mem.links, held)
        text = _render(mem, evidence, links)
        rel = f"{KIND_DIRS[mem.kind]}/{mem.id}-{slugify(mem.text)}.md"
        if mem.id in held:
            raise Conflict(f"shared store {name!r} already holds memory {mem.id}", code="already_shared",
                           field="id", hint="it is there: read it with `memstore read` in a repo that sees it")
        _gates(ws, mem, evidence, links, text)
        answer: dict[str, Any] = {"url": redact_url(url), "base": base, "path": rel, "evidence": evidence,
                                  "dropped_links": dropped}
        if dry_run:
            return {**answer, "content": text}
        branch = f"memstore/{verb}-{mem.id[-10:].lower()}"
        gitops.run(["switch", "--quiet", "-c", branch], work)
        _write_new(work, rel, text)
        gitops.run(["--literal-pathspecs", "add", "--", rel], work)
        message = f"memstore: {verb} {mem.kind} {mem.id[:10]} ({_title(mem.text)})"
        gitops.run([*_identity(source or cwd, work), "commit", "--quiet", "--no-verify", "-m", message], work)
        commit = gitops.resolve_commit("HEAD", work)
        pushed = gitops.push(REMOTE, branch, work)
        if pushed.status != "ok":
            raise Conflict(f"the push of branch {branch} to shared store {name!r} was refused "
                           f"({pushed.status}: {pushed.message})", code="push_rejected", field=field,
                           hint="a branch of that name may already be there: delete it, or check your access")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {**answer, "branch": branch, "commit": commit}


def _gh(answer: dict[str, Any], url: str, mem: Memory, body: str) -> None:
    """The exact ``gh pr create`` for the pushed branch, when ``gh`` is here and the remote is on
    GitHub; memstore never runs it (opening a pull request is the person's step)."""
    if not shutil.which("gh") or "branch" not in answer:
        return
    repo = _github_repo(url)
    if repo is not None:
        answer["gh"] = shlex.join(["gh", "pr", "create", "--repo", repo, "--head", answer["branch"],
                                   "--base", answer["base"], "--title", f"memstore: {_title(mem.text)}",
                                   "--body", body])


def _cross_repo(raw: str, source: Path | None, where: str) -> str:
    """A ``file:`` evidence of the source repository in the form that names it: ``repo:`` with
    its name and the commit (its ``@rev``, else HEAD); any other evidence as it is."""
    if not raw.startswith("file:"):
        return raw
    try:
        ref = parse_evidence(raw)
    except ValueError as exc:
        raise InvalidRequest(str(exc), field=where, code="bad_evidence") from exc
    sha = gitops.resolve_commit(ref.rev or "HEAD", source) if source is not None else None
    # The commit named must hold the file: a citation of a file never committed names nothing
    # another repository's reader could ever look at.
    if source is None or sha is None or gitops.show_file(sha, ref.path or "", source) is None:
        raise InvalidRequest(f"{raw}: no commit of the source repository holds that file", field=where,
                             code="bad_evidence", hint="commit the file first, so the shared store can name it")
    lines = f"#L{ref.lines[0]}-L{ref.lines[1]}" if ref.lines else ""
    return f"repo:{_repo_name(source)}@{sha}:{ref.path}{lines}"


def _repo_name(worktree: Path) -> str:
    """The source repository's name: its origin URL's last part, else its folder's."""
    url = gitops.config_get(f"remote.{REMOTE}.url", worktree) or ""
    last = re.split(r"[/:\\]", url.rstrip("/\\"))[-1].removesuffix(".git") if url else ""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", last or worktree.name).strip("-._")
    return name[:100] or "repo"


def _ids_in(root: Path) -> set[str]:
    """The ids the shared store's files carry in their names (``<id>-<slug>.md``)."""
    out: set[str] = set()
    for folder in KIND_DIRS.values():
        base = root / folder
        if base.is_dir() and not base.is_symlink():
            out.update(p.name.split("-", 1)[0] for p in base.glob("*.md"))
    return out


def _links_within(links: dict[str, Any], held: set[str]) -> tuple[dict[str, Any], list[str]]:
    """``links`` with every memory it names that ``held`` lacks left out, and those ids."""
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in links.items():
        if key == "relations" and isinstance(value, list):
            items = [v for v in value if isinstance(v, dict)]
            dropped += [str(v.get("id")) for v in items if v.get("id") not in held]
            kept[key] = [v for v in items if v.get("id") in held]
        elif key in _ID_LINKS and isinstance(value, str | list):
            ids = [value] if isinstance(value, str) else [v for v in value if isinstance(v, str)]
            dropped += [v for v in ids if v not in held]
            left = [v for v in ids if v in held]
            kept[key] = (left[0] if left else None) if isinstance(value, str) else left
        else:
            kept[key] = value
    return {k: v for k, v in kept.items() if v not in (None, [], "")}, dropped


def _render(mem: Memory, evidence: list[str], links: dict[str, Any]) -> str:
    # A shared store's files say "repo": the scope of the store they lie in, as its own writes do.
    copy = Memory(id=mem.id, kind=mem.kind, text=mem.text, scope="repo", created=mem.created, author=mem.author,
                  confidence=mem.confidence, rationale=mem.rationale, links=links, evidence=evidence, tags=mem.tags)
    return dump_markdown(copy.frontmatter(), copy.text)


def _gates(ws: Workspace, mem: Memory, evidence: list[str], links: dict[str, Any], text: str) -> None:
    """The write gates, on the memory as the shared store will hold it: schema, semantics and
    limits, secrets and control characters in every field and then over the whole file."""
    request: dict[str, Any] = {"kind": mem.kind, "scope": "repo", "text": mem.text, "evidence_refs": evidence,
                               "links": {("problem_id" if k == "problem" else k): v for k, v in links.items()}}
    if mem.tags:
        request["tags"] = list(mem.tags)
    if mem.rationale:
        request["rationale"] = mem.rationale
    check_schema("write", {"memory": request})
    check_write_semantics({**request, "author": mem.author}, ws.config)
    cap = int(ws.config.number("limits", "max_file_bytes"))
    if len(text.encode("utf-8")) > cap:
        raise InvalidRequest(f"the memory's file would be {len(text.encode('utf-8'))} bytes; the cap is {cap} "
                             "(limits.max_file_bytes)", field="id", code="too_large")
    check_file_text(text, "file")


def _write_new(work: Path, rel: str, text: str) -> None:
    """Create ``rel`` in the clone, never through a link: the remote's tree is hostile input, and a
    kind folder committed as a symlink would carry the write outside the clone."""
    folder = work / rel.split("/", 1)[0]
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise InvalidRequest(f"the shared store's {folder.name}/ is not a plain folder (a link, or a file); "
                             "memstore writes nothing through it", code="not_regular", field="to",
                             hint="fix the shared store's repository first")
    folder.mkdir(exist_ok=True)
    with open(work / rel, "x", encoding="utf-8") as fh:  # "x": never onto a file or link already there
        fh.write(text)


def _identity(source: Path, work: Path) -> list[str]:
    """``-c`` settings that make the commit the user's: their git identity as the source
    repository sees it (a repo-local user.email included); git's own fallback otherwise."""
    name = gitops.config_get("user.name", source)
    email = gitops.config_get("user.email", source)
    if name and email:
        return ["-c", f"user.name={name}", "-c", f"user.email={email}"]
    return gitops.ident_args(work)


def _title(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= 60 else first[:57].rstrip() + "..."


def _github_repo(url: str) -> str | None:
    """OWNER/REPO of a GitHub URL (https, ssh or scp form), for ``gh --repo``; None otherwise."""
    m = re.match(r"^(?:https://|ssh://git@|git@)github\.com[/:](?P<owner>[\w.-]+)/(?P<repo>[\w.-]+?)(?:\.git)?/?$", url)
    return f"{m.group('owner')}/{m.group('repo')}" if m else None
