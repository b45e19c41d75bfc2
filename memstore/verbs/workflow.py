"""``memstore integrate github``: the GitHub Actions workflows that run ``memstore review`` on
every pull request and keep its one comment up to date (``--remove`` takes them out).

Two files, because a pull request from a fork must never run with a token that can write:

- ``memstore-review.yml`` runs on ``pull_request`` with ``contents: read`` only. It checks out
  the PR (hostile input: memstore reads ``.memory/`` as such, and memstore itself comes from the
  package index, never from the PR), reviews it, annotates the changed lines, and uploads the
  review JSON and the PR number as an artifact.
- ``memstore-review-post.yml`` runs on ``workflow_run`` when that workflow completes, in the base
  repository with ``pull-requests: write``. It checks out nothing and runs no code from the PR:
  it downloads the artifact, renders the comment with the memstore it installed, and posts it
  only if GitHub says the PR's head is the commit that was reviewed (the number in the artifact
  is the fork's word; ``workflow_run.head_sha`` is GitHub's).

A workflow cannot name itself in its own ``workflow_run`` trigger (GitHub matches by name and
blocks the loop), hence the second file rather than a second job. GitHub's documentation of
``workflow_run`` ("Using data from the triggering workflow") is the pattern followed; every
action is pinned to a full commit SHA with its release beside it.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from .. import gitops

DIST_NAME = "memstore-git"  # the distribution memstore is installed by from the package index
HEADER = "# Written by `memstore integrate github`; `memstore integrate github --remove` takes it out.\n"
REVIEW_REL = ".github/workflows/memstore-review.yml"
POST_REL = ".github/workflows/memstore-review-post.yml"
WORKFLOW_NAME = "memstore review"

# Release commits of the actions used, as pinned in public workflows (docs/review.md names them).
CHECKOUT = "actions/checkout@08c6903cd8c0fde910a37f88322edcfb5dd907a8 # v5.0.0"
SETUP_PYTHON = "actions/setup-python@e797f83bcb11b83ae66e0230d6156d7c80228e7c # v6.0.0"
CACHE = "actions/cache@5a3ec84eff668545956fd18022155c47e93e2684 # v4.2.3"
UPLOAD = "actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02 # v4.6.2"
DOWNLOAD = "actions/download-artifact@d3f86a106a0bac45b974a628896c90dbdf5c8093 # v4.3.0"
PYTHON = "3.12"


PR_BASE = "${{ github.event.pull_request.base.sha }}"
DEFAULT_BRANCH = "${{ github.event.repository.default_branch }}"
INSTALL_DIR = ".memstore-install"  # where a path install checks out the base branch
# What ``github.install`` may be: a pip requirement (name, extras, one version clause), an
# https or git+https URL (a wheel, a commit), or a path in the repository. It is written into a
# workflow's shell line, so nothing that quotes, expands or spaces is allowed.
_REQUIREMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?((==|>=|<=|~=|!=|>|<)[A-Za-z0-9.*+!_-]+)?")
_URL = re.compile(r"(git\+)?https://[A-Za-z0-9._~/:@%+=-]+(#[A-Za-z0-9._=&-]+)?")
_PATH = re.compile(r"(\./)?[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*/?|\.")


def install_spec(value: object) -> str:
    """The ``github.install`` setting, checked: "" (this release, from the package index), a pip
    requirement, a URL, or a path in the repository (``.``: the repository is memstore's source)."""
    if value in (None, ""):
        return ""
    text = value if isinstance(value, str) else ""
    ok = bool(_REQUIREMENT.fullmatch(text) or _URL.fullmatch(text)
              or (_PATH.fullmatch(text) and ".." not in text.split("/")))
    if not ok:
        from ..errors import InvalidRequest

        raise InvalidRequest(f"github.install: {value!r} is not a pip requirement (memstore-git==0.2.0), an https "
                             "URL or a path in this repository (./dist/memstore_git-0.2.0-py3-none-any.whl, .); "
                             "nothing was written", code="bad_config", field="github.install",
                             hint="set github.install in .memory/config.yaml (docs/review.md)")
    return text


def _is_path(spec: str) -> bool:
    return bool(spec) and not _URL.fullmatch(spec) and ("/" in spec or spec.startswith(".") or spec.endswith(".whl"))


def _install_steps(version: str, *, model: bool, spec: str = "", base_ref: str | None = None) -> str:
    # pip's cache and (in the analysis job) the exported embedding model: the export takes tens
    # of seconds and is the same for every run of one memstore release.
    paths = "            ~/.cache/pip\n" + ("            ~/.cache/memstore/onnx\n" if model else "")
    what = spec or f"{DIST_NAME}=={version}"
    digest = hashlib.blake2b(spec.encode(), digest_size=6).hexdigest()
    source = f"spec-{digest}" if spec else f"{DIST_NAME}-{version}"
    key = ("model-" if model else "") + source
    checkout = ""
    if _is_path(spec):
        # memstore's source comes from the base branch, never from the pull request under review.
        ref = f"          ref: {base_ref}\n" if base_ref else ""
        checkout = f"""      - uses: {CHECKOUT}
        with:
{ref}          path: {INSTALL_DIR}
          persist-credentials: false
"""
        rest = spec.removeprefix("./").rstrip("/")
        what = f"./{INSTALL_DIR}" + (f"/{rest}" if rest not in ("", ".") else "")
    return f"""      - uses: {SETUP_PYTHON}
        with:
          python-version: "{PYTHON}"
      - uses: {CACHE}
        with:
          path: |
{paths}          key: memstore-${{{{ runner.os }}}}-py{PYTHON}-{key}
{checkout}      - name: Install memstore
        run: python -m pip install "{what}"
"""


def _store_env(store_root: bool) -> str:
    # A shared store's repository is a store at its root, with no .memory/ folder: say so.
    return '          MEMSTORE_STORE: "."\n' if store_root else ""


def review_workflow(version: str, branch: str = "main", spec: str = "", store_root: bool = False) -> str:
    env = _store_env(store_root)
    return f"""{HEADER}# What the repository's memory says about each pull request: memories the change may make
# stale, past problems and failed tactics like it, memories it adds. This job runs the PR's
# checkout read-only and hands its result to memstore-review-post.yml, which posts the comment.
name: {WORKFLOW_NAME}

# A push to {branch} exports the embedding model into the cache once: a cache saved by a pull
# request is seen by that pull request alone, one saved on {branch} by all of them.
on:
  pull_request:
    types: [opened, synchronize, reopened, edited]
  push:
    branches: [{branch}]

permissions: {{}}

concurrency:
  group: memstore-review-${{{{ github.event.pull_request.number || github.ref }}}}
  cancel-in-progress: true

jobs:
  warm:
    name: Export the embedding model into the cache
    if: github.event_name == 'push'
    runs-on: ubuntu-latest
    timeout-minutes: 15
    permissions:
      contents: read  # check out the code and its .memory/; nothing is written
    steps:
      - uses: {CHECKOUT}
        with:
          persist-credentials: false
{_install_steps(version, model=True, spec=spec)}      - name: Export the model (and index the memories)
        env:
          MEMSTORE_DAEMON: "0"
{env}        run: memstore reindex

  review:
    name: Review the pull request against memory
    if: github.event_name == 'pull_request'
    runs-on: ubuntu-latest
    timeout-minutes: 15
    permissions:
      contents: read  # check out the code and its .memory/; nothing is written
    steps:
      - uses: {CHECKOUT}
        with:
          fetch-depth: 0
          persist-credentials: false
{_install_steps(version, model=True, spec=spec, base_ref=PR_BASE)}      - name: Review
        env:
          BASE_SHA: ${{{{ github.event.pull_request.base.sha }}}}
          PR_TITLE: ${{{{ github.event.pull_request.title }}}}
          PR_BODY: ${{{{ github.event.pull_request.body }}}}
          PR_NUMBER: ${{{{ github.event.pull_request.number }}}}
          MEMSTORE_DAEMON: "0"
{env}        run: |
          mkdir -p "$RUNNER_TEMP/memstore-review"
          out="$RUNNER_TEMP/memstore-review"
          printf '%s' "$PR_BODY" > "$RUNNER_TEMP/pr-body.txt"
          # --opt="$VALUE": a value starting with "-" (a title "-WIP") is not read as an option
          memstore review --base="$BASE_SHA" --title="$PR_TITLE" --body-file="$RUNNER_TEMP/pr-body.txt" \\
            --format json > "$out/review.json"
          memstore review --from="$out/review.json" --format github
          printf '%s\\n' "$PR_NUMBER" > "$out/pr.txt"
      - uses: {UPLOAD}
        with:
          name: memstore-review
          path: ${{{{ runner.temp }}}}/memstore-review/
          retention-days: 3
"""


CHECK_REL = ".github/workflows/memstore-check.yml"


def check_workflow(version: str, spec: str = "") -> str:
    """The gate of a shared store's repository: ``memstore check --base`` on the pull request's
    memory files, failing the check when one is invalid, holds a secret or edits a committed
    file. Its own workflow, so that a refusal never keeps the review comment from being posted
    (memstore-review-post.yml posts after a successful review run only)."""
    return f"""{HEADER}# The memory files a pull request adds to this shared store, checked as every memstore
# pre-commit hook checks them: valid, no secret, no committed memory edited or deleted.
name: memstore check

on:
  pull_request:
    types: [opened, synchronize, reopened]

permissions: {{}}

concurrency:
  group: memstore-check-${{{{ github.event.pull_request.number }}}}
  cancel-in-progress: true

jobs:
  check:
    name: Check the memories the pull request adds
    runs-on: ubuntu-latest
    timeout-minutes: 10
    permissions:
      contents: read  # check out the store; nothing is written
    steps:
      - uses: {CHECKOUT}
        with:
          fetch-depth: 0
          persist-credentials: false
{_install_steps(version, model=False, spec=spec, base_ref=PR_BASE)}      - name: Check
        env:
          BASE_SHA: ${{{{ github.event.pull_request.base.sha }}}}
          MEMSTORE_DAEMON: "0"
{_store_env(True)}        run: memstore check --base="$BASE_SHA"
"""


POST_GROUP = ("memstore-review-comment-${{ github.event.workflow_run.head_repository.full_name }}"
              "-${{ github.event.workflow_run.head_branch }}")


def post_workflow(version: str, spec: str = "") -> str:
    contents = ("\n      contents: read  # check out the base branch that memstore is installed from"
                if _is_path(spec) else "")
    return f"""{HEADER}# Posts (or edits in place) the one memstore comment on a pull request, from the result
# memstore-review.yml uploaded. It runs no code from the pull request.
name: memstore review comment

# workflow_run runs with the base repository's token: this job checks out and runs nothing from
# the pull request, reads the artifact as data and checks the PR's head before posting.
on:
  workflow_run:  # zizmor: ignore[dangerous-triggers]
    workflows: ["{WORKFLOW_NAME}"]
    types: [completed]

permissions: {{}}

# One post at a time per pull request, so two runs cannot both find no comment and both create
# one (the poster's --expect-head already refuses a stale head, but not that race). Keyed by the
# head repository and branch: the branch name alone (main, patch-1) is shared by PRs from
# different forks, which would queue and replace each other's posts.
concurrency:
  group: {POST_GROUP}
  cancel-in-progress: false

jobs:
  post:
    name: Post the memstore comment
    if: github.event.workflow_run.event == 'pull_request' && github.event.workflow_run.conclusion == 'success'
    runs-on: ubuntu-latest
    timeout-minutes: 10
    permissions:
      actions: read  # download the artifact of the review run
      pull-requests: write  # create or edit the one memstore comment on the pull request{contents}
    steps:
{_install_steps(version, model=False, spec=spec, base_ref=DEFAULT_BRANCH)}      - uses: {DOWNLOAD}
        with:
          name: memstore-review
          path: ${{{{ runner.temp }}}}/memstore-review
          run-id: ${{{{ github.event.workflow_run.id }}}}
          github-token: ${{{{ github.token }}}}
      - name: Post the comment
        env:
          GH_TOKEN: ${{{{ github.token }}}}
          REPO: ${{{{ github.repository }}}}
          HEAD_SHA: ${{{{ github.event.workflow_run.head_sha }}}}
        run: |
          dir="$RUNNER_TEMP/memstore-review"
          pr="$(head -n 1 "$dir/pr.txt")"
          case "$pr" in ''|*[!0-9]*) echo "::error::the artifact's PR number is not a number"; exit 1;; esac
          memstore review --from="$dir/review.json" --post --repo="$REPO" --pr="$pr" --expect-head="$HEAD_SHA"
"""


def _version() -> str:
    """The release the workflow installs: this one (the package's own ``__version__``, read as
    text: the package top is above this floor)."""
    text = (Path(__file__).resolve().parents[1] / "__init__.py").read_text(encoding="utf-8")
    m = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    if m is None:  # pragma: no cover - the package always carries one
        raise RuntimeError("memstore/__init__.py has no __version__")
    return m.group(1)


def _add(render: Any, rel: str, old: str | None) -> str:
    new = render(_version())
    if old is not None and old != new and not old.startswith(HEADER):
        from ..errors import InvalidRequest

        raise InvalidRequest(f"{rel} exists and was not written by memstore; nothing was written",
                             code="bad_agent_file", hint=f"move {rel} away (or delete it), then run the command again")
    return new


def default_branch(repo: Path) -> str:
    """The branch pull requests merge into, as this clone knows it (``main`` when it cannot tell)."""
    for ref in ("refs/remotes/origin/HEAD",):
        proc = gitops.run(["symbolic-ref", "--short", ref], repo, check=False)
        name = proc.stdout.strip().removeprefix("origin/")
        if proc.returncode == 0 and re.fullmatch(r"[A-Za-z0-9._/-]+", name):
            return name
    for name in ("main", "master"):
        if gitops.resolve_commit(f"refs/heads/{name}", repo):
            return name
    return "main"


def add_review(old: str | None, setup: Any, rel: str) -> str:
    branch = default_branch(setup.repo)
    spec = install_spec(setup.github_install)
    return _add(lambda v: review_workflow(v, branch, spec, setup.store_root), rel, old)


def add_check(old: str | None, setup: Any, rel: str) -> str:
    spec = install_spec(setup.github_install)
    return _add(lambda v: check_workflow(v, spec), rel, old)


def add_post(old: str | None, setup: Any, rel: str) -> str:
    spec = install_spec(setup.github_install)
    return _add(lambda v: post_workflow(v, spec), rel, old)


def strip(text: str, _rel: str) -> tuple[str, bool]:
    """A workflow file is ours whole or not at all."""
    return ("", True) if text.startswith(HEADER) else (text, False)
