"""The bad-input corpus (tests/data/bad_input.jsonl) through the real CLI, as an agent meets it.

Every case is run as ``python -m memstore`` in one real repo holding a committed store, and must
answer exactly one JSON object on stdout (``ok: false`` and the case's documented ``error.code``),
the documented exit status, one human line on stderr and no traceback; and it must write nothing:
``git status`` and every file of the store and of the global store stay as they were. Each code
and status must be the one the error table (docs/json.md) documents.

A case (one JSON object a line): ``argv``; optional ``stdin`` (text) or ``stdin_hex`` (bytes),
``file`` / ``file_hex`` (written outside the repo, named by ``{FILE}`` in argv), ``env``, ``cwd``
("outside": a folder that is no git repo); ``code`` and ``exit``. Placeholders: ``{P}`` ``{F}``
``{C}`` (a problem, a fact, a change), ``{AMB}`` (a prefix of all three), ``{EP}`` (an episode),
``{SCRATCH}`` (a folder outside the repo), ``{AWS}`` / ``{SECRET}`` (fake secrets assembled here
so secret scanners leave the data file alone), ``{X*n}`` (n x's), ``{DEEP}`` (JSON nested too
deep to parse), ``{BADBYTE}`` (a byte that is not UTF-8).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import docs_text

ROOT = Path(__file__).resolve().parent.parent
CASES = [json.loads(line) for line in (ROOT / "tests" / "data" / "bad_input.jsonl").read_text().splitlines()
         if line.strip()]
P = "01m8aaaaaaaaaaaaaaaaaaaaa1"
F = "01m8aaaaaaaaaaaaaaaaaaaaa2"
C = "01m8aaaaaaaaaaaaaaaaaaaaa3"
EP = "01m8bbbbbbbbbbbbbbbbbbbbb1"
FIXED = {"{P}": P, "{F}": F, "{C}": C, "{AMB}": P[:10], "{EP}": EP, "{AWS}": "AKIA" + "Q3EGRAV7PLM2XT5B",
         "{SECRET}": "wJalrXUtnFEMI/K7MDENG/bPxRfi" + "CYzz3kLmQp9", "{DEEP}": "[" * 100_000, "{BADBYTE}": "\udcff"}
MEMORIES = {
    f"problems/{P}-import-crash.md": ("problem", "The nightly import job crashes with KeyError tracking_code.", ""),
    f"facts/{F}-ci-python.md": ("fact", "The CI runs on Python 3.11 only.", ""),
    f"changes/{C}-ci-python.md": ("change", "CI moved from Python 3.10 to 3.11.", f"links:\n  change_targets: [{F}]\n"),
}


def _documented_codes() -> dict[str, int]:
    """code -> exit status, from the error table in docs/json.md (rows like | `code` | 2 | ...)."""
    text = docs_text("json.md")
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\| `([a-z_]+)` \| ([0-9]) \|", text, re.M)}


def _git(cwd: Path, env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


class World:
    """One repo with a committed store, a folder outside it, and a private HOME."""

    def __init__(self, base: Path) -> None:
        self.repo, self.outside, self.scratch, self.home = (base / n for n in ("repo", "outside", "scratch", "home"))
        for path in (self.repo / "src", self.outside, self.scratch, self.home):
            path.mkdir(parents=True)
        gitconfig = base / "gitconfig"
        gitconfig.write_text("[user]\n\tname = Test\n\temail = test@example.com\n")
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("GIT_", "MEMSTORE_")) and k not in ("VISUAL", "EDITOR")}
        self.env.update({"HOME": str(self.home), "MEMSTORE_HOME": str(self.home / ".memory"), "MEMSTORE_DAEMON": "0",
                         "XDG_CONFIG_HOME": str(self.home / ".config"), "GIT_CONFIG_GLOBAL": str(gitconfig),
                         "GIT_CONFIG_NOSYSTEM": "1"})
        git = self.git
        git("init", "-q", "-b", "main")
        (self.repo / "src" / "app.py").write_text("def main():\n    return 42\n")
        assert self.run(["init"]).returncode == 0
        store = self.repo / ".memory"
        for rel, (kind, text, links) in MEMORIES.items():
            mem_id = rel.split("/")[1][:26]
            (store / rel).write_text(f"---\nid: {mem_id}\nkind: {kind}\nscope: repo\ncreated: 2026-11-20T10:00:00Z\n"
                                     f"author: ops\n{links}evidence: ['user:ops said so']\n---\n{text}\n")
        episode = store / "episodes" / "2026-11" / f"{EP}.jsonl"
        episode.parent.mkdir(parents=True)
        episode.write_text(json.dumps({"episode": EP, "agent": "x", "task": "t", "started": "2026-11-20T10:00:00Z"})
                           + "\n" + json.dumps({"seq": 1, "ts": "2026-11-20T10:00:01Z", "source": "tool",
                                                "content": "pytest -x"}) + "\n")
        git("add", "-A")
        git("commit", "-q", "-m", "a repo with memories")
        for name, config in (("badcfg", 'read: !!python/object/apply:os.system ["touch pwned"]\n'),
                             ("listcfg", "- a\n- b\n")):
            (self.scratch / name / "facts").mkdir(parents=True)
            (self.scratch / name / "config.yaml").write_text(config)

    def git(self, *args: str) -> str:
        return _git(self.repo, self.env, *args)

    def run(self, argv: list[str], *, cwd: Path | None = None, stdin: bytes | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, "-m", "memstore", *argv], cwd=cwd or self.repo, input=stdin,
                              stdin=None if stdin is not None else subprocess.DEVNULL, capture_output=True,
                              env={**self.env, **(env or {})}, check=False, timeout=120)

    def state(self) -> dict[str, Any]:
        """What a bad input must leave as it was."""
        files: dict[str, str] = {}
        for top in (self.repo, self.home, self.outside):
            for path in sorted(top.rglob("*")):
                rel = path.relative_to(top.parent).as_posix()
                if path.is_file() and "/.index/" not in f"/{rel}/" and "/.git/" not in f"/{rel}":
                    files[rel] = hashlib.sha1(path.read_bytes()).hexdigest()
        return {"status": self.git("status", "--porcelain", "--untracked-files=all"),
                "index": self.git("ls-files", "-s"), "head": self.git("rev-parse", "HEAD"), "files": files}

    def fill(self, text: str, case_id: str) -> str:
        for key, value in FIXED.items():
            text = text.replace(key, value)
        text = text.replace("{SCRATCH}", str(self.scratch)).replace("{FILE}", str(self.scratch / f"{case_id}.in"))
        return re.sub(r"\{X\*(\d+)\}", lambda m: "x" * int(m.group(1)), text)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return World(tmp_path_factory.mktemp("bad-input"))


def test_the_corpus_is_large_and_every_code_is_documented() -> None:
    assert len(CASES) >= 150
    assert len({c["id"] for c in CASES}) == len(CASES)
    documented = _documented_codes()
    wrong = {(c["code"], c["exit"]) for c in CASES if documented.get(c["code"]) != c["exit"]}
    assert not wrong, f"not in the error table (docs/json.md) with that exit status: {sorted(wrong)}"


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_bad_input_is_one_typed_json_error_and_writes_nothing(case: dict[str, Any], world: World) -> None:
    cid = case["id"]
    argv = [world.fill(a, cid) for a in case["argv"]]
    stdin: bytes | None = None
    if "stdin" in case:
        stdin = world.fill(case["stdin"], cid).encode("utf-8", "surrogatepass")
    elif "stdin_hex" in case:
        stdin = bytes.fromhex(case["stdin_hex"])
    if "file" in case or "file_hex" in case:
        data = world.fill(case["file"], cid).encode() if "file" in case else bytes.fromhex(case["file_hex"])
        (world.scratch / f"{cid}.in").write_bytes(data)
    env = {k: world.fill(v, cid) for k, v in case.get("env", {}).items()}
    before = world.state()
    proc = world.run(argv, cwd=world.outside if case.get("cwd") == "outside" else None, stdin=stdin, env=env)
    out, err = proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err, err
    assert out.endswith("\n") and out.count("\n") == 1, f"not one JSON line on stdout: {out[:500]!r} {err[:500]}"
    answer = json.loads(out)
    assert answer["ok"] is False and answer["error"]["code"] == case["code"], (answer, err[:500])
    assert proc.returncode == case["exit"], answer
    assert err.count("\n") == 1 and err.startswith(f"memstore: {case['code']}: "), err
    assert world.state() == before
