"""The package as a user installs it: the wheel and the sdist `python -m build` makes, installed by
its distribution name (memstore-git; "memstore" on the registry is another project) into a fresh
venv that sees only the wheel's declared dependencies, then used from an empty directory.

The venv is offline-friendly: rather than download torch and faiss again, it is given the
already-installed distributions that the wheel's Requires-Dist names (transitively, markers
evaluated) and nothing else, through a site directory of links. A dependency memstore imports but
does not declare is then missing there, and the commands below fail."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from conftest import REPO_ROOT
from packaging.markers import default_environment
from packaging.requirements import Requirement

pytestmark = pytest.mark.slow

DIST_NAME = "memstore-git"
NOT_IN_WHEEL = ("tests/", "bench/", ".memory-example/", "docs/")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def dist_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel and sdist, built as the docs say (the wheel from the sdist, so the sdist is whole)."""
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO_ROOT)],
                          capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def _one(folder: Path, pattern: str) -> Path:
    found = sorted(folder.glob(pattern))
    assert len(found) == 1, found
    return found[0]


def test_pyproject_names_a_free_distribution_and_keeps_the_command() -> None:
    meta = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert meta["name"] == DIST_NAME
    assert meta["scripts"] == {"memstore": "memstore.surfaces.entry:main"}


def test_wheel_holds_the_package_and_its_data_and_nothing_else(dist_dir: Path) -> None:
    wheel = _one(dist_dir, "memstore_git-*-py3-none-any.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    source = {p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "memstore").rglob("*")
              if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", ".json")}
    assert source - names == set(), "package files missing from the wheel"
    for folder in ("templates", "hooks"):
        shipped = {p.name for p in (REPO_ROOT / folder).iterdir()}
        assert {n.rsplit("/", 1)[1] for n in names if n.startswith(f"memstore/_data/{folder}/")} == shipped
    extra = sorted(n for n in names if not n.startswith(("memstore/", "memstore_git-")))
    assert extra == [], extra
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "memstore = memstore.surfaces.entry:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_sdist_is_the_tested_source_release(dist_dir: Path) -> None:
    sdist = _one(dist_dir, "memstore_git-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for needed in ("pyproject.toml", "README.md", "memstore/__init__.py", "templates/config.yaml",
                   "hooks/pre-commit", "tests/conftest.py", "bench/headline.py", ".memory-example/config.yaml",
                   "docs/install.md"):
        assert needed in names, needed
    assert not [n for n in names if "/.index/" in n or "__pycache__" in n or n.startswith("bench/.cache")]


def _closure(dist: str, extras: frozenset[str] = frozenset()) -> set[str]:
    """The installed distributions ``dist`` needs, itself included (Requires-Dist, markers evaluated)."""
    seen: set[str] = set()
    todo = [(dist, extras)]
    while todo:
        name, wanted = todo.pop()
        key = f"{_norm(name)}[{','.join(sorted(wanted))}]"
        if key in seen:
            continue
        seen.add(key)
        for line in metadata.requires(name) or []:
            req = Requirement(line)
            envs = [{**default_environment(), "extra": e} for e in ("", *wanted)]
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                todo.append((req.name, frozenset(req.extras)))
    return {k.split("[", 1)[0] for k in seen}


def _wheel_requirements(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as zf:
        text = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    return [Requirement(line.split(":", 1)[1].strip()) for line in text.splitlines()
            if line.startswith("Requires-Dist:") and "extra ==" not in line]


def _inherited_site(wheel: Path, into: Path) -> set[str]:
    """A site directory of links to the installed distributions the wheel's dependencies need."""
    into.mkdir()
    needed: set[str] = set()
    for req in _wheel_requirements(wheel):
        needed |= _closure(req.name, frozenset(req.extras))
    for name in needed:
        dist = metadata.distribution(name)
        base = Path(dist.locate_file(""))
        tops = {Path(str(f)).parts[0] for f in dist.files or []}
        for top in tops:
            if top in ("..", "__pycache__") or top.endswith(".pth"):
                continue
            link = into / top
            if (base / top).exists() and not link.exists():
                link.symlink_to(base / top)
    return needed


def _env(home: Path, venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GIT_", "MEMSTORE_", "PYTHON", "VIRTUAL_ENV", "PIP_"))}
    env.update(HOME=str(home), PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", MEMSTORE_DAEMON="0",
               XDG_CONFIG_HOME=str(home / ".config"), GIT_CONFIG_NOSYSTEM="1",
               GIT_AUTHOR_NAME="A", GIT_AUTHOR_EMAIL="a@example.com",
               GIT_COMMITTER_NAME="A", GIT_COMMITTER_EMAIL="a@example.com", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def _run(cmd: list[str], cwd: Path, env: dict[str, str], input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, input=input, capture_output=True, text=True, check=False,
                          timeout=300, stdin=None if input is not None else subprocess.DEVNULL)


def test_installed_by_name_the_wheel_runs_from_an_empty_directory(dist_dir: Path, tmp_path: Path,
                                                                  shared_cache_home: Path) -> None:
    wheel = _one(dist_dir, "memstore_git-*-py3-none-any.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    vpy = venv / "bin" / "python"
    site_dir = Path(subprocess.run([str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   capture_output=True, text=True, check=True).stdout.strip())
    needed = _inherited_site(wheel, tmp_path / "deps")
    assert "torch" in needed and "memstore-git" not in needed
    (site_dir / "_inherited_deps.pth").write_text(f"import site; site.addsitedir({str(tmp_path / 'deps')!r})\n")

    home = tmp_path / "home"  # private, made by the suite's hermetic fixture
    env = _env(home, venv)
    env["XDG_CACHE_HOME"] = str(shared_cache_home)  # the one-time ONNX export, shared with the suite
    # docs/install.md: `pip install "torch==2.13.0" --find-links dist memstore-git` (--no-index: offline here,
    # every dependency already given).
    pip = [sys.executable, "-m", "pip", "--python", str(vpy)]
    proc = _run([*pip, "install", "--no-index", "torch==2.13.0", "--find-links", str(dist_dir), DIST_NAME],
                tmp_path, env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    proc = _run([*pip, "check"], tmp_path, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    work = tmp_path / "empty"
    work.mkdir()
    where = _run([str(vpy), "-c", "import memstore, sys; print(memstore.__file__); print(sys.path)"], work, env)
    assert where.stdout.startswith(str(site_dir)), where.stdout
    assert str(REPO_ROOT) not in where.stdout

    memstore = str(venv / "bin" / "memstore")
    version = _run([memstore, "--version"], work, env)
    assert version.returncode == 0 and version.stdout.strip().startswith("memstore "), version
    assert _run(["git", "init", "-q", "-b", "main"], work, env).returncode == 0

    def ok(*args: str) -> dict:
        proc = _run([memstore, *args], work, env)
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
        return json.loads(proc.stdout)

    assert ok("init")["ok"] is True
    # `new` opens the packaged template in $EDITOR: this one keeps a copy and saves nothing.
    editor = {**env, "EDITOR": f"sh -c 'cp \"$1\" {tmp_path / 'seen.md'}' editor"}
    proc = _run([memstore, "new", "fact"], work, editor)
    assert proc.returncode == 2 and "aborted" in proc.stderr, proc.stderr
    assert (tmp_path / "seen.md").read_text(encoding="utf-8") == (REPO_ROOT / "templates" / "fact.md").read_text(
        encoding="utf-8")
    written = ok("write", "--kind", "fact", "--evidence", 'user:"we said so"',
                 "--text", "The staging database runs PostgreSQL 16 on port 5433.")
    found = ok("read", "which port does the staging database use?")
    assert written["id"] in json.dumps(found)
    assert ok("check")["ok"] is True
    hooks = ok("hooks", "install")
    assert hooks["ok"] is True and (work / ".git" / "hooks" / "pre-commit").is_file()

    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "package-test", "version": "0"}}}
    proc = _run([memstore, "mcp"], work, env, input=json.dumps(hello) + "\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    reply = json.loads(proc.stdout.splitlines()[0])
    assert reply["id"] == 1 and reply["result"]["serverInfo"]["name"] == "memstore", reply
