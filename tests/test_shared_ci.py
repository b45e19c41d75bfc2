"""``memstore integrate github`` in a shared store's own repository (a store at the root, no
``.memory/``): the workflows it writes, and the very commands they run, executed here on real
branches of a real store repository with the real CLI: a valid memory passes, a secret or an
edit of a committed memory is refused."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import git
from test_shared_stores import DIGEST, RETRY, Cli, org_remote, org_write

from memstore.verbs import workflow

WF = Path(".github") / "workflows"
SECRET = "The registry token is ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


@pytest.fixture
def store_repo(tmp_path: Path, cli: Cli) -> Path:
    """The org's shared store repository (its root is the store), with `integrate github` run and
    committed on main, as its maintainers would."""
    work, _ = org_remote(tmp_path, cli, DIGEST)
    code, out, err = cli("integrate", "github", cwd=work)
    assert code == 0, err
    assert out["store"] == {"path": "./", "state": "unchanged"}
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "memstore's workflows")
    return work


def step(rel: str, job: str, name: str, root: Path) -> dict[str, Any]:
    doc = yaml.safe_load((root / rel).read_text())
    return next(s for s in doc["jobs"][job]["steps"] if s.get("name") == name)


def run_step(st: dict[str, Any], root: Path, context: dict[str, str], tmp: Path) -> subprocess.CompletedProcess[str]:
    """One workflow step's ``run`` as the runner does it (bash -eo pipefail), its ``env`` with the
    pull request's values where the YAML names github's context, memstore from this venv."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTORE_") or k == "MEMSTORE_HOME"}
    for key, value in st.get("env", {}).items():
        env[key] = context[key] if "${{" in str(value) else str(value)
    runner = tmp / "runner"
    runner.mkdir(exist_ok=True)
    env.update(RUNNER_TEMP=str(runner), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}")
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", st["run"]], cwd=root, env=env,
                          capture_output=True, text=True, check=False, timeout=600)


def branch(root: Path, name: str) -> dict[str, str]:
    """A pull request's context: its branch checked out from main."""
    git(root, "switch", "-q", "-c", name, "main")
    return {"BASE_SHA": git(root, "rev-parse", "main").strip(), "PR_TITLE": f"-{name}", "PR_BODY": "memories",
            "PR_NUMBER": "7"}


def test_integrate_github_in_a_shared_store_repo_writes_its_workflows_and_no_memory_folder(
        store_repo: Path, cli: Cli) -> None:
    names = sorted(p.name for p in (store_repo / WF).iterdir())
    assert names == ["memstore-check.yml", "memstore-review-post.yml", "memstore-review.yml"]
    assert not (store_repo / ".memory").exists()
    review = step(workflow.REVIEW_REL, "review", "Review", store_repo)
    check = step(workflow.CHECK_REL, "check", "Check", store_repo)
    assert review["env"]["MEMSTORE_STORE"] == "." and check["env"]["MEMSTORE_STORE"] == "."
    assert check["run"] == 'memstore check --base="$BASE_SHA"'
    doc = yaml.safe_load((store_repo / workflow.CHECK_REL).read_text())
    assert doc["permissions"] == {} and doc["jobs"]["check"]["permissions"] == {"contents": "read"}
    for tool, args in (("zizmor", ["--offline", "--persona", "pedantic"]), ("actionlint", [])):
        found = shutil.which(tool) or shutil.which(tool, path=str(Path(sys.executable).parent))
        if found:  # the test extra; the structure above holds without it
            proc = subprocess.run([found, *args, *map(str, sorted((store_repo / WF).glob("*.yml")))],
                                  capture_output=True, text=True, check=False)
            assert proc.returncode == 0, proc.stdout + proc.stderr
    code, out, err = cli("integrate", "github", "--remove", cwd=store_repo)
    assert code == 0, err
    assert {f["path"]: f["state"] for f in out["files"]} == {
        workflow.REVIEW_REL: "removed", workflow.POST_REL: "removed", workflow.CHECK_REL: "removed"}
    assert not (store_repo / WF).exists() or not any((store_repo / WF).iterdir())


def test_the_workflow_commands_pass_a_branch_that_adds_a_valid_memory(
        store_repo: Path, cli: Cli, tmp_path: Path) -> None:
    context = branch(store_repo, "retry-policy")
    mid = org_write(store_repo, cli, RETRY)
    git(store_repo, "add", "-A")
    git(store_repo, "commit", "-q", "-m", "retry policy")
    proc = run_step(step(workflow.CHECK_REL, "check", "Check", store_repo), store_repo, context, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert '"checked": 1' in proc.stdout and '"ok": true' in proc.stdout
    proc = run_step(step(workflow.REVIEW_REL, "review", "Review", store_repo), store_repo, context, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    review = yaml.safe_load((tmp_path / "runner" / "memstore-review" / "review.json").read_text())
    added = review["sections"]["added"]
    assert [m["id"] for m in added["memories"]] == [mid] and added["check_ok"] is True
    assert (tmp_path / "runner" / "memstore-review" / "pr.txt").read_text() == "7\n"


def _secret_memory(root: Path, cli: Cli) -> None:
    org_write(root, cli, "The registry token rotates every 30 days.")
    (path,) = [p for p in (root / "facts").glob("*.md") if "registry-token" in p.name]
    path.write_text(path.read_text() + SECRET + "\n")


def _edit_committed(root: Path, _cli: Cli) -> None:
    (path,) = [p for p in (root / "facts").glob("*.md") if DIGEST in p.read_text()]
    path.write_text(path.read_text().replace("by digest", "by tag"))


@pytest.mark.parametrize(("change", "code"), [(_secret_memory, "secret"), (_edit_committed, "immutable")])
def test_the_check_workflow_refuses_a_secret_or_an_edit_of_a_committed_memory(
        store_repo: Path, cli: Cli, tmp_path: Path, change: Any, code: str) -> None:
    context = branch(store_repo, "bad")
    change(store_repo, cli)
    git(store_repo, "add", "-A")
    git(store_repo, "commit", "-q", "--no-verify", "-m", "a bad change")
    proc = run_step(step(workflow.CHECK_REL, "check", "Check", store_repo), store_repo, context, tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f'"code": "{code}"' in proc.stdout and '"ok": false' in proc.stdout, proc.stdout
    assert SECRET.split()[-1] not in proc.stdout + proc.stderr  # the finding shows the secret cut, never whole
    # The review still runs (its comment shows the finding); the check is the gate.
    proc = run_step(step(workflow.REVIEW_REL, "review", "Review", store_repo), store_repo, context, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    review = yaml.safe_load((tmp_path / "runner" / "memstore-review" / "review.json").read_text())
    assert review["sections"]["added"]["check_ok"] is False


def test_a_code_repository_whose_folder_shares_a_kind_folders_name_stays_a_repo_with_a_memory_folder(
        tmp_path: Path, cli: Cli) -> None:
    from conftest import make_git_repo

    root = make_git_repo(tmp_path / "svc")
    (root / "changes").mkdir()  # towncrier's news fragments, not a store
    (root / "changes" / "123.feature").write_text("Faster imports.\n")
    code, _, err = cli("integrate", "github", cwd=root)
    assert code == 0, err
    assert (root / ".memory").is_dir() and not (root / workflow.CHECK_REL).exists()
    assert "MEMSTORE_STORE" not in (root / workflow.REVIEW_REL).read_text()
