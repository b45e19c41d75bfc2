"""memstore hands git its paths on stdin: a bulk import of ~17k memories passed the system's limit
on a command line (ARG_MAX) as arguments, and `git add` never ran. Real git, a real repository."""

from __future__ import annotations

from pathlib import Path

from conftest import git, make_git_repo

from memstore import gitops


def test_more_paths_than_a_command_line_holds_are_staged_unstaged_and_committed_exactly(tmp_path: Path) -> None:
    repo = make_git_repo(tmp_path / "repo")
    folder = repo / ".memory" / "facts"
    folder.mkdir(parents=True)
    # 20,000 absolute paths of ~200 characters: 4 MB, twice the usual ARG_MAX
    paths = [folder / f"01jd{i:06d}-{'release-step-takes-minutes-' * 5}{i}.md" for i in range(20_000)]
    for p in paths:
        p.write_text("x\n")
    gitops.stage(paths, repo)
    assert len(git(repo, "ls-files", "--", ".memory").splitlines()) == 20_000
    gitops.commit(paths[:1_000], "some of them", repo)  # exactly these (200 kB of paths), not all staged
    assert sorted(git(repo, "show", "--name-only", "--format=", "HEAD").splitlines()) == sorted(
        p.relative_to(repo).as_posix() for p in paths[:1_000])
    assert gitops.unstage(paths[1_000:], repo)
    assert len(git(repo, "ls-files", "--", ".memory").splitlines()) == 1_000
    assert all(p.exists() for p in paths)  # out of the index, the files stay
    gitops.commit(paths[1_000:1_002], "two more", repo)  # a short list, on the command line
    assert len(git(repo, "show", "--name-only", "--format=", "HEAD").splitlines()) == 2
