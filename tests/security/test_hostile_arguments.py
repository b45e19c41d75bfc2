"""Every flag that names a file, a path or a query, probed as an attacker would, through the CLI.

One repo with a committed store; each case runs ``python -m memstore`` once and must answer one
typed JSON error (never ``unexpected``, never a traceback, never a hang) and leave every file of
the repo (``.git/hooks`` and ``.git/config`` included), of the folder beside it and of HOME as it
was. Inputs: /dev/zero, /proc/self/mem, a FIFO, a 100 MB (sparse) file, a folder, a symlink to
/etc/passwd, control characters, ``../`` escapes and paths into ``.git/`` and ``.memory/``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

F = "01m8aaaaaaaaaaaaaaaaaaaaa2"

# Flags that read a file a person names ({IN}), and the inputs thrown at each.
READERS = {
    "read--json": ["read", "--json", "{IN}"],
    "write--json": ["write", "--json", "{IN}"],
    "update--json": ["update", "--json", "{IN}"],
    "import": ["import", "{IN}"],
    "import-jsonl": ["import", "--from", "jsonl", "{IN}"],
    "import-markdown": ["import", "--from", "markdown", "{IN}"],
    "episode-log--content-file": ["episode", "log", "--source", "tool", "--content-file", "{IN}"],
}
INPUTS = ("/dev/zero", "/proc/self/mem", "fifo", "big", "link-to-passwd")
# ... and the same verbs reading stdin (``-``) when stdin is /dev/zero.
STDIN_READERS = {
    "read--json": ["read", "--json", "-"],
    "write--text": ["write", "--kind", "fact", "--evidence", "user:x", "--text", "-"],
    "import": ["import", "-"],
    "import-jsonl": ["import", "--from", "jsonl", "-"],
}
# Flags that write where they are told ({OUT}); ``--outside-repo`` lifts only the repo bound.
WRITERS = {
    "snapshot--out": ["snapshot", "--markdown", "--out", "{OUT}"],
    "guide--install--file": ["guide", "--install", "--file", "{OUT}"],
}
TARGETS = {
    "proc-mem": ("/proc/self/mem", True),
    "git-hook": (".git/hooks/pre-commit", True),
    "memory-facts": (".memory/facts/01m8cccccccccccccccccccccc-x.md", True),
    "dotdot-escape": ("../outside/escaped.md", False),
    "absolute-outside": ("{OUTSIDE}/abs.md", False),
    "linked-folder": ("linked/escaped.md", False),  # linked -> the folder outside the repo
    "linked-file": ("passwd-link", True),  # -> /etc/passwd
    "a-folder": ("src", True),
    "fifo": ("{OUTSIDE}/fifo", True),
    "global-store": ("{HOME}/.memory/facts/x.md", True),
}
# Control characters and other hostile words where a flag or argument takes text.
WORDS = [
    ("read-esc", ["read", "where is \x1b[2J the config"], None, "bad_chars"),
    ("read-soh", ["read", "where is \x01 the config"], None, "bad_chars"),
    ("read-c1", ["read", "where is \x9b the config"], None, "bad_chars"),
    ("read-json-nul", ["read", "--json", "-"], '{"query": "where is \\u0000 the config"}', "bad_chars"),
    ("read-json-esc", ["read", "--json", "-"], '{"query": "colour \\u001b[31m red"}', "bad_chars"),
    ("read-tag-esc", ["read", "q", "--tag", "a\x1b"], None, None),
    ("read-since-esc", ["read", "q", "--since", "\x1b[2J"], None, None),
    ("context-task-esc", ["context", "--task", "fix \x1b]0;pwned\x07 the build"], None, "bad_chars"),
    ("episode-start-agent-esc", ["episode", "start", "--agent", "bot\x1b[31m"], None, "bad_chars"),
    ("episode-start-agent-soh", ["episode", "start", "--agent", "bot\x01"], None, "bad_chars"),
    ("episode-start-task-esc", ["episode", "start", "--task", "t\x1b[2J"], None, "bad_chars"),
    ("episode-start-agent-long", ["episode", "start", "--agent", "a" * 201], None, "too_large"),
    ("show-esc", ["show", "\x1b[2J0123456"], None, None),
    ("show-dotdot", ["show", "../../etc/passwd"], None, None),
    ("reflect-dotdot", ["reflect", "../../../etc/passwd"], None, None),
    ("episode-show-esc", ["episode", "show", "\x1b[2Jabcdef"], None, None),
    ("episode-log-episode-dotdot", ["episode", "log", "--source", "tool", "--content", "x", "--episode",
                                    "../../../../tmp/x"], None, None),
    ("diff-esc", ["diff", "\x1b[2J"], None, None),
    ("diff-option", ["diff", "--output=/tmp/pwned"], None, None),
    ("check-base-option", ["check", "--base", "--output=/tmp/pwned"], None, None),
    ("store-dev-zero", ["--store", "/dev/zero", "list"], None, None),
    ("store-proc", ["--store", "/proc/self", "list"], None, None),
    ("hooks-python-dev-zero", ["hooks", "install", "--python", "/dev/zero"], None, "usage"),
    ("hooks-python-esc", ["hooks", "install", "--python", "/usr/bin/py\x1b[2J"], None, "bad_chars"),
    ("init-remote-option", ["init", "--global", "--remote", "--upload-pack=touch /tmp/pwned"], None, None),
]


def _git(cwd: Path, env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


class World:
    """One repo with a committed store and installed nothing, a folder beside it, a private HOME."""

    def __init__(self, base: Path, cache: Path) -> None:
        self.base = base
        self.repo, self.outside, self.home = base / "repo", base / "outside", base / "home"
        for path in (self.repo / "src", self.outside, self.home):
            path.mkdir(parents=True)
        gitconfig = base / "gitconfig"
        gitconfig.write_text("[user]\n\tname = Test\n\temail = test@example.com\n")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "MEMSTORE_"))}
        self.env.update({"HOME": str(self.home), "MEMSTORE_HOME": str(self.home / ".memory"), "MEMSTORE_DAEMON": "0",
                         "XDG_CONFIG_HOME": str(self.home / ".config"), "GIT_CONFIG_GLOBAL": str(gitconfig),
                         "GIT_CONFIG_NOSYSTEM": "1", "XDG_CACHE_HOME": str(cache)})
        _git(self.repo, self.env, "init", "-q", "-b", "main")
        (self.repo / "src" / "app.py").write_text("def main():\n    return 42\n")
        assert self.run(["init"]).returncode == 0
        assert self.run(["init", "--global"]).returncode == 0
        (self.repo / ".memory" / "facts" / f"{F}-ci.md").write_text(
            f"---\nid: {F}\nkind: fact\nscope: repo\ncreated: 2026-11-20T10:00:00Z\nauthor: ops\n"
            "evidence: ['user:ops said so']\n---\nThe CI runs on Python 3.11 only.\n")
        (self.repo / "linked").symlink_to(self.outside)
        (self.repo / "passwd-link").symlink_to("/etc/passwd")
        _git(self.repo, self.env, "add", "-A")
        _git(self.repo, self.env, "commit", "-q", "-m", "a repo with a memory")
        os.mkfifo(self.outside / "fifo")
        with open(self.outside / "big.jsonl", "wb") as fh:  # sparse: 100 MB that cost no disk
            fh.truncate(100 * 1024 * 1024)
        (self.outside / "passwd-link").symlink_to("/etc/passwd")
        notes = self.outside / "notes"
        notes.mkdir()
        (notes / "real.md").write_text("- Always run the migrations before the test suite.\n")
        (notes / "passwd.md").symlink_to("/etc/passwd")
        (notes / "linked-folder").symlink_to(self.home)
        (self.outside / "notes-link").symlink_to(notes)
        self.inputs = {"/dev/zero": "/dev/zero", "/proc/self/mem": "/proc/self/mem",
                       "fifo": str(self.outside / "fifo"), "big": str(self.outside / "big.jsonl"),
                       "link-to-passwd": str(self.outside / "passwd-link")}

    def run(self, argv: list[str], *, stdin: Any = subprocess.DEVNULL, input_text: str | None = None,
            ) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, "-m", "memstore", *argv], cwd=self.repo, env=self.env,
                              stdin=stdin if input_text is None else None,
                              input=None if input_text is None else input_text.encode(),
                              capture_output=True, check=False, timeout=60)

    def state(self) -> dict[str, str]:
        """Every file a probe must leave alone: the repo's (its .git/hooks and config too, not git's
        own bookkeeping), the folder beside it and HOME (projections in .index/ aside)."""
        files: dict[str, str] = {}
        for top in (self.repo, self.outside, self.home):
            for folder, dirs, names in os.walk(top):
                rel_folder = Path(folder).relative_to(self.base).as_posix()
                dirs[:] = [d for d in dirs if d not in (".index", "objects", "logs", "refs")]
                for name in names:
                    path = Path(folder) / name
                    rel = f"{rel_folder}/{name}"
                    if "/.git/" in f"/{rel}/" and not ("/hooks/" in rel or rel.endswith((".git/config", "/HEAD"))):
                        continue
                    if path.is_symlink() or not path.is_file():
                        files[rel] = "special"
                        continue
                    files[rel] = hashlib.sha1(path.read_bytes()).hexdigest()
        files["git status"] = _git(self.repo, self.env, "status", "--porcelain", "--untracked-files=all")
        return files


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, shared_cache_home: Path) -> World:
    return World(tmp_path_factory.mktemp("hostile-args"), shared_cache_home)


def _typed_refusal(proc: subprocess.CompletedProcess[bytes], expected: str | None = None, *,
                   ok_allowed: bool = False) -> dict[str, Any]:
    """The one JSON answer: a typed error (``expected``, if given), never ``unexpected``; with
    ``ok_allowed`` a harmless answer (a tag filter that matches nothing) is fine too."""
    out, err = proc.stdout.decode(), proc.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err, err
    answer = json.loads(out)
    if ok_allowed and answer["ok"] is True and proc.returncode == 0:
        return answer
    assert answer["ok"] is False, answer
    code = answer["error"]["code"]
    assert code != "unexpected" and proc.returncode in (2, 3, 4), (answer, err)
    if expected is not None:
        assert code == expected, answer
    return answer


@pytest.mark.parametrize("given", INPUTS)
@pytest.mark.parametrize("flag", READERS)
def test_a_file_flag_reads_only_a_bounded_regular_file(world: World, flag: str, given: str) -> None:
    before = world.state()
    argv = [world.inputs[given] if a == "{IN}" else a for a in READERS[flag]]
    proc = world.run([*argv, "--json-out"])
    answer = _typed_refusal(proc)
    if given in ("/dev/zero", "/proc/self/mem", "fifo", "link-to-passwd"):
        assert answer["error"]["code"] == "bad_input", answer
    if given == "big" and flag != "episode-log--content-file":  # a log keeps a long file's first 4 MiB
        assert answer["error"]["code"] == "too_large", answer
    assert world.state() == before


def test_markdown_import_follows_no_link_named_or_found_in_a_folder(world: World) -> None:
    before = world.state()
    proc = world.run(["import", "--from", "markdown", str(world.outside / "notes-link"), "--json-out"])
    _typed_refusal(proc, "bad_input")
    proc = world.run(["import", "--from", "markdown", str(world.outside / "notes"), "--dry-run", "--json-out"])
    answer = json.loads(proc.stdout)
    assert proc.returncode == 0 and answer["files"] == 1, answer
    assert [item["source"].rsplit("/", 1)[-1] for item in answer["items"]] == ["real.md#L1"], answer
    assert world.state() == before


@pytest.mark.parametrize("flag", STDIN_READERS)
def test_stdin_of_dev_zero_stops_at_the_cap(world: World, flag: str) -> None:
    before = world.state()
    with open("/dev/zero", "rb") as zero:
        proc = world.run([*STDIN_READERS[flag], "--json-out"], stdin=zero)
    assert _typed_refusal(proc, "too_large")
    assert world.state() == before


# With --outside-repo: what stays refused, and one target outside the repo it allows.
WITH_OUTSIDE_REPO = ("proc-mem", "git-hook", "memory-facts", "fifo", "global-store", "dotdot-escape")


@pytest.mark.parametrize(("target", "outside_repo"), [*((t, False) for t in TARGETS),
                                                      *((t, True) for t in WITH_OUTSIDE_REPO)],
                         ids=[*TARGETS, *(f"{t}--outside-repo" for t in WITH_OUTSIDE_REPO)])
@pytest.mark.parametrize("flag", WRITERS)
def test_a_path_flag_writes_only_inside_the_repo_never_in_git_or_a_store(
        world: World, flag: str, target: str, outside_repo: bool) -> None:
    path, always_refused = TARGETS[target]
    path = path.replace("{OUTSIDE}", str(world.outside)).replace("{HOME}", str(world.home))
    if outside_repo and not always_refused:
        # The flag named for it lets a file go outside the repo (and only that): shown once
        # here, with the file it wrote removed again.
        before = world.state()
        argv = [path if a == "{OUT}" else a for a in WRITERS[flag]]
        proc = world.run([*argv, "--outside-repo", "--json-out"])
        answer = json.loads(proc.stdout)
        assert proc.returncode == 0 and answer["ok"], answer
        written = Path(answer["path"])
        assert written.is_file() and world.outside in written.parents, answer
        written.unlink()
        assert world.state() == before
        return
    before = world.state()
    argv = [path if a == "{OUT}" else a for a in WRITERS[flag]]
    proc = world.run([*argv, *(["--outside-repo"] if outside_repo else []), "--json-out"])
    _typed_refusal(proc, "bad_path")
    assert world.state() == before


@pytest.mark.parametrize("case", WORDS, ids=[c[0] for c in WORDS])
def test_control_characters_and_hostile_words_get_a_typed_error_and_write_nothing(
        world: World, case: tuple[str, list[str], str | None, str | None]) -> None:
    _, argv, stdin, code = case
    before = world.state()
    proc = world.run([*argv, "--json-out"], input_text=stdin)
    _typed_refusal(proc, code, ok_allowed=code is None)
    assert world.state() == before
    assert not Path("/tmp/pwned").exists()


def test_hooks_install_never_waits_on_a_fifo_where_a_hook_belongs(tmp_path: Path) -> None:
    """A FIFO (or a link) where a hook belongs is not memstore's hook: it is kept as ``.legacy``
    untouched, not opened for a blocking read that would hang ``hooks install`` and ``integrate``."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    hooks_dir = repo / ".git" / "hooks"
    os.mkfifo(hooks_dir / "post-merge")
    target = tmp_path / "target"
    target.write_text("keep\n")
    (hooks_dir / "pre-commit").symlink_to(target)
    proc = subprocess.run([sys.executable, "-m", "memstore", "hooks", "install", "--json-out"], cwd=repo,
                          capture_output=True, check=False, timeout=60, stdin=subprocess.DEVNULL)
    answer = json.loads(proc.stdout)
    assert proc.returncode == 0 and answer["ok"], (answer, proc.stderr)
    assert (hooks_dir / "post-merge.legacy").is_fifo() and (hooks_dir / "pre-commit.legacy").is_symlink()
    assert target.read_text() == "keep\n"
