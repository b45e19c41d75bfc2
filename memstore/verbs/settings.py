"""``memstore check`` on the repo store's config.yaml: the settings memstore could not use.

A read falls back to the default of each such setting and says so in its warnings; check is
where the mistake stops before it is committed (the pre-commit hook runs it on what is staged),
so that no clone of the repo inherits it.
"""

from __future__ import annotations

from ..errors import ConfigError
from ..git.check import Finding, Report, run_check
from ..gitops import read_blobs, staged_entries
from ..read.tuning import section_settings
from ..store.config import WRITE_MODES, config_from_text, drop_bad_values, load_config_file, write_mode_error
from ..store.workspace import Workspace

CONFIG_FILE = "config.yaml"


def check(ws: Workspace, *, staged: bool = False, base: str | None = None, fix: bool = False,
          include_global: bool = False) -> Report:
    """``run_check``, and the repo store's config.yaml (its staged version with ``staged``)."""
    report = run_check(ws, staged=staged, base=base, fix=fix, include_global=include_global)
    report.problems += config_findings(ws, staged=staged)
    return report


def config_findings(ws: Workspace, *, staged: bool = False) -> list[Finding]:
    store = ws.repo
    if store is None or not store.exists():
        return []
    shown = store.display_path(CONFIG_FILE)
    try:
        if staged and store.worktree is not None:
            entry = [sha for _, sha, path in staged_entries(shown, store.worktree) if path == shown]
            if not entry:
                return []
            text = read_blobs(entry, store.worktree)[entry[0]].decode("utf-8", "replace")
            data = config_from_text(text, shown)
        else:
            data = load_config_file(store.root / CONFIG_FILE, untrusted=True)
    except ConfigError as exc:
        return [Finding("error", shown, "bad_config", exc.message)]
    problems = drop_bad_values(data, CONFIG_FILE)
    if "write_mode" in data and data["write_mode"] not in WRITE_MODES:
        problems.append(("error", f"{CONFIG_FILE}: {write_mode_error(data['write_mode'])}"))
    problems += section_settings(data.get("read"))[1]
    return [Finding(severity, shown, "bad_config", message) for severity, message in problems]
