"""Posting ``memstore review``'s comment on a pull request: one comment per PR, found again by
its hidden marker and edited in place on every push, marked resolved when there is nothing left
to say, never posted when there never was. Through the ``gh`` CLI (``gh api``), which carries
the token (``GH_TOKEN``) so memstore never handles it.

The PR number may come from an artifact a fork's code wrote; with ``expect_head`` the PR's head
commit is asked of GitHub and must be that commit, so a forged number cannot aim the comment at
another pull request.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from typing import Any

from ..errors import InvalidRequest, StoreError

_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


def _gh(args: list[str], body: dict[str, Any] | None = None) -> str:
    exe = shutil.which("gh")
    if exe is None:
        raise StoreError("posting needs the GitHub CLI `gh` on PATH", code="no_gh",
                         hint="install gh (it is on GitHub's runners), or print the comment with --format markdown")
    proc = subprocess.run([exe, "api", *args, *(["--input", "-"] if body is not None else [])],
                          input=json.dumps(body) if body is not None else None, capture_output=True, text=True,
                          check=False, timeout=60)
    if proc.returncode != 0:
        raise StoreError(f"gh api {' '.join(args[:3])} failed: {proc.stderr.strip()[:300]}", code="gh_failed")
    return proc.stdout


def _json_values(text: str) -> list[Any]:
    """``gh api --paginate`` prints one JSON document per page, back to back."""
    dec = json.JSONDecoder()
    out: list[Any] = []
    i = 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return out
        value, i = dec.raw_decode(text, i)
        out.append(value)


def find_comment(repo: str, pr: int, marker: str) -> dict[str, Any] | None:
    """Our earlier comment: the first by a bot whose body starts with the marker (a person who
    pastes the marker into their own comment does not get it overwritten)."""
    pages = _json_values(_gh(["--paginate", f"repos/{repo}/issues/{pr}/comments?per_page=100"]))
    for page in pages:
        for c in page if isinstance(page, list) else []:
            user = c.get("user") or {}
            if str(c.get("body", "")).startswith(marker) and user.get("type") == "Bot":
                return dict(c)
    return None


def post(repo: str, pr: int, body: str, *, nothing_to_say: bool, marker: str, resolved_body: str,
         expect_head: str | None = None) -> dict[str, Any]:
    """Create, edit, resolve or leave alone the PR's memstore comment; says which it did."""
    if not _REPO.match(repo):
        raise InvalidRequest(f"--repo {repo!r} is not OWNER/NAME", code="usage")
    if pr <= 0:
        raise InvalidRequest("--pr must be a pull request number", code="usage")
    if expect_head is not None:
        pull = json.loads(_gh([f"repos/{repo}/pulls/{pr}"]))
        if (pull.get("head") or {}).get("sha") != expect_head:
            raise InvalidRequest(f"pull request #{pr}'s head is not {expect_head[:12]}: nothing was posted",
                                 code="head_mismatch", hint="the review was made for another commit or PR")
    old = find_comment(repo, pr, marker)
    if nothing_to_say:
        if old is None:
            return {"ok": True, "action": "none", "pr": pr}
        if old.get("body") == resolved_body:
            return {"ok": True, "action": "unchanged", "pr": pr, "comment_id": old.get("id")}
        _gh(["-X", "PATCH", f"repos/{repo}/issues/comments/{int(old['id'])}"], {"body": resolved_body})
        return {"ok": True, "action": "resolved", "pr": pr, "comment_id": old.get("id")}
    if old is None:
        made = json.loads(_gh(["-X", "POST", f"repos/{repo}/issues/{pr}/comments"], {"body": body}) or "{}")
        return {"ok": True, "action": "created", "pr": pr, "comment_id": made.get("id")}
    if old.get("body") == body:
        return {"ok": True, "action": "unchanged", "pr": pr, "comment_id": old.get("id")}
    _gh(["-X", "PATCH", f"repos/{repo}/issues/comments/{int(old['id'])}"], {"body": body})
    return {"ok": True, "action": "edited", "pr": pr, "comment_id": old.get("id")}
