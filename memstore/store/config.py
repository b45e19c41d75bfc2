"""Settings: defaults <- global ``config.yaml`` <- repo ``config.yaml`` <- ``MEMSTORE_*`` env.

Read once at the edge (CLI, daemon, API entry) and passed down as a frozen value; library
code below never looks at the environment.
"""

from __future__ import annotations

import copy
import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, InvalidFile
from .files import MAX_FRONTMATTER_BYTES, read_untrusted, safe_yaml

DEFAULTS: dict[str, Any] = {
    "write_mode": "review",  # review | autonomous
    "git": {"stage": True, "commit": False},
    # max_session_events: events one agent session's episode keeps (the hooks' capture); past it
    # they are counted in the episode, not kept. idle_end_minutes: a hook session's episode idle that
    # long is ended when another session of the repo opens one (Codex sends no session end); 0: never
    "episodes": {"local_only": False, "max_event_chars": 8000, "max_session_events": 2000, "idle_end_minutes": 120},
    "limits": {"max_text_chars": 4000, "max_rationale_chars": 2000, "max_evidence": 50,
               "max_file_bytes": 256 * 1024, "max_files": 200_000, "max_listed_invalid": 50},
    "daemon": {"autostart": True, "idle_seconds": 1800, "evict_seconds": 600, "read_wait_seconds": 1.0},
    "duplicates": {"threshold": 0.95, "candidates": 5, "similar": 0.6},
    "review": {"confidence_below": 0.5},  # a write less sure than this is stored flagged for review
    # A vote's weight in a memory's global utility halves every this many days
    # (docs/decisions/utility-half-life.md).
    "utility": {"half_life_days": 180},
    # Characters of memory text `context` (the session start) shows in full; the rest is an
    # index of ids and first lines. Agents take a hook's output whole up to 10,000 characters.
    "context": {"budget_chars": 6000},
    # How `integrate github`'s workflows install memstore: "" is this release from the package
    # index; a pip requirement, an https URL or a path in the repository (docs/review.md).
    "github": {"install": ""},
    "read": {},  # retrieval tuning; empty means the tuned defaults in ranking.RankingParams
}
WRITE_MODES = ("review", "autonomous")

Problem = tuple[str, str]  # (severity: "error" | "warning", message)

# The parser's fixed caps (store/disk): what one store file may hand to the indexes, whatever
# the settings say (a hand-written or hostile file skips the write path's gates).
MAX_FIELD_CHARS = 16_000
MAX_LIST_ITEMS = 200

# Every number a setting may hold: (floor, ceiling), both allowed. One table for the config
# loader (a value outside is dropped and named, its default applying), the environment (a
# value outside is ``bad_config``), ``check`` (which names it before it is committed) and the
# code that reads the value. A ceiling is what the parser serves: a write the parser would
# refuse to read back is never acknowledged (text past MAX_FIELD_CHARS was written, then never
# served, and refused by the next commit's check). A store's config.yaml comes with every
# clone: it may lower the caps on what memstore parses but never lift them past these.
LIMITS: dict[tuple[str, str], tuple[int | float, int | float]] = {
    ("limits", "max_text_chars"): (1, MAX_FIELD_CHARS),
    ("limits", "max_rationale_chars"): (0, MAX_FIELD_CHARS),
    ("limits", "max_evidence"): (1, MAX_LIST_ITEMS),  # every memory needs one
    ("limits", "max_file_bytes"): (4096, 1024 * 1024),
    ("limits", "max_files"): (1, 1_000_000),
    ("limits", "max_listed_invalid"): (0, 10_000),
    # A row of an episode is read back only under 1 MiB (store/disk.MAX_EPISODE_LINE); JSON may
    # spell a character in up to 6.
    ("episodes", "max_event_chars"): (100, 100_000),
    ("episodes", "max_session_events"): (10, 100_000),
    ("episodes", "idle_end_minutes"): (0, 7 * 24 * 60),
    ("daemon", "idle_seconds"): (1, 7 * 24 * 3600),
    ("daemon", "evict_seconds"): (1, 7 * 24 * 3600),
    ("daemon", "read_wait_seconds"): (0, 60),
    # Cosine similarity at which a write is refused as a duplicate: 0 would refuse every write.
    ("duplicates", "threshold"): (0.5, 1.0),
    ("duplicates", "candidates"): (1, 100),
    ("duplicates", "similar"): (0.3, 1.0),  # what a write answers with as similar (under 0.3: noise)
    ("review", "confidence_below"): (0.0, 1.0),
    ("utility", "half_life_days"): (1, 36500),
    ("context", "budget_chars"): (1, 100_000),
}

# env var -> (section, key, type); only the settings people plausibly flip per shell
ENV_KEYS: dict[str, tuple[str | None, str, type]] = {
    "MEMSTORE_WRITE_MODE": (None, "write_mode", str),
    "MEMSTORE_DAEMON": ("daemon", "autostart", bool),
    "MEMSTORE_DAEMON_IDLE": ("daemon", "idle_seconds", int),
    "MEMSTORE_DAEMON_EVICT": ("daemon", "evict_seconds", int),
    "MEMSTORE_READ_WAIT": ("daemon", "read_wait_seconds", float),
    "MEMSTORE_GIT_STAGE": ("git", "stage", bool),
    "MEMSTORE_GIT_COMMIT": ("git", "commit", bool),
    "MEMSTORE_MAX_TEXT_CHARS": ("limits", "max_text_chars", int),
}


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _as_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError(f"cannot read {raw!r} as a yes/no setting (use 1/0, true/false)")


def load_config_file(path: Path, *, untrusted: bool = False) -> dict[str, Any]:
    """A store's settings. ``untrusted`` (the repo store's, which comes with a clone): never
    read through a symlink or from a FIFO or device, and at most 64 KB."""
    if not (path.is_file() or (untrusted and os.path.lexists(path))):
        return {}
    try:
        text = (read_untrusted(path, MAX_FRONTMATTER_BYTES) if untrusted
                else path.read_text(encoding="utf-8"))
    except InvalidFile as exc:
        raise ConfigError(f"{path}: {exc.message}") from exc
    return config_from_text(text, str(path))


def config_from_text(text: str, where: str) -> dict[str, Any]:
    """The settings one config.yaml's ``text`` holds (``where`` names it in errors)."""
    try:
        data = safe_yaml(text, Path(where).name)
    except InvalidFile as exc:
        raise ConfigError(f"{where}: {exc.message}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: config must be a YAML mapping")
    return data


@dataclass(frozen=True)
class Config:
    data: dict[str, Any] = field(default_factory=lambda: copy.deepcopy(DEFAULTS))
    # What config.yaml held that memstore could not use (its default applied instead).
    problems: tuple[Problem, ...] = ()

    def get(self, section: str, key: str | None = None, default: Any = None) -> Any:
        value = self.data.get(section, default)
        if key is None:
            return value
        return value.get(key, default) if isinstance(value, dict) else default

    @property
    def write_mode(self) -> str:
        return str(self.data.get("write_mode", "review"))

    def number(self, section: str, key: str) -> Any:
        """A numeric setting, within its ``LIMITS``; anything else (a Config built by hand, a
        value a loader let through) counts as the default."""
        default = DEFAULTS[section][key]
        value = self.get(section, key, default)
        if not _same_type(value, default) or limit_error(section, key, value) is not None:
            return default
        return type(default)(value)

    @property
    def review_bar(self) -> float:
        """``review.confidence_below``: a memory written less sure than this is flagged for review."""
        return float(self.number("review", "confidence_below"))

    @property
    def half_life_days(self) -> float:
        """``utility.half_life_days``: the age at which a vote counts half in global utility."""
        return float(self.number("utility", "half_life_days"))

    @property
    def max_text_chars(self) -> int:
        return int(self.number("limits", "max_text_chars"))

    @property
    def read_wait(self) -> float:
        """``daemon.read_wait_seconds``."""
        return float(self.number("daemon", "read_wait_seconds"))

    def cap(self, key: str, default: int | None = None) -> int:
        """A ``limits`` cap on untrusted input, within its floor and ceiling."""
        return int(self.number("limits", key))

    def with_overrides(self, over: Mapping[str, Any]) -> Config:
        return Config(_merge(self.data, over), self.problems)


def limit_error(section: str, key: str, value: Any) -> str | None:
    """Why ``value`` is out of the setting's range (``LIMITS``), or None: it is in range."""
    bounds = LIMITS.get((section, key))
    if bounds is None or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    floor, ceiling = bounds
    if value < floor:
        return f"{section}.{key}: {value!r} is below its floor of {floor}"
    if value > ceiling:
        return f"{section}.{key}: {value!r} is above its ceiling of {ceiling}"
    return None


def env_overrides(env: Mapping[str, str]) -> dict[str, Any]:
    over: dict[str, Any] = {}
    for name, (section, key, kind) in ENV_KEYS.items():
        if name not in env:
            continue
        raw = env[name]
        try:
            value: Any = _as_bool(raw) if kind is bool else kind(raw)
        except ValueError as exc:
            raise ConfigError(f"{name}={raw!r} is not a valid {kind.__name__}") from exc
        why = limit_error(section or "", key, value)
        if why is not None:
            floor, ceiling = LIMITS[section or "", key]
            raise ConfigError(f"{name}={raw!r}: {why}", hint=f"set a value from {floor} to {ceiling}, or unset it")
        if section is None:
            over[key] = value
        else:
            over.setdefault(section, {})[key] = value
    return over


def drop_bad_values(data: dict[str, Any], where: str) -> list[Problem]:
    """Remove from ``data`` (one config.yaml) each known setting whose value has not its
    default's type, so the default applies, and say which: a word where a number belongs is a
    mistake to name (in every read's warnings, and by ``memstore check`` before it is
    committed), not a ValueError deep in a verb, nor a reason to refuse every command in every
    clone of the repo. Names this version does not know pass untouched (a teammate's newer
    memstore may have written them); ``read:`` belongs to the read pipeline (``read/tuning``)."""
    problems: list[Problem] = []
    for section, default in DEFAULTS.items():
        if section not in data or section == "read" or not isinstance(default, dict):
            continue
        value = data[section]
        if not isinstance(value, dict):
            problems.append(("error", f"{where}: {section}: must be a mapping of settings, not {shown_value(value)}; "
                                      "the defaults apply"))
            del data[section]
            continue
        for key, want in default.items():
            if key in value and not _same_type(value[key], want):
                kind = ("true or false" if isinstance(want, bool) else "a whole number, 0 or more"
                        if isinstance(want, int) else "a number")
                problems.append(("error", f"{where}: {section}.{key}: expected {kind}, not {shown_value(value[key])}; "
                                          f"the default {want!r} applies"))
                del value[key]
            elif key in value and (why := limit_error(section, key, value[key])) is not None:
                problems.append(("error", f"{where}: {why}; the default {want!r} applies"))
                del value[key]
    return problems


def _same_type(value: Any, default: Any) -> bool:
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if isinstance(default, int):
        return isinstance(value, int) and value >= 0
    if isinstance(default, float):
        return isinstance(value, int | float) and math.isfinite(value)
    return True


def write_mode_error(value: Any) -> str:
    return f"write_mode must be 'review' or 'autonomous', not {value!r}"


def shown_value(value: Any) -> str:
    """A setting's value as an error quotes it: its repr, at most 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def load_config(
    repo_store: Path | None, global_store: Path | None, env: Mapping[str, str] | None = None
) -> Config:
    data = copy.deepcopy(DEFAULTS)
    problems: list[Problem] = []
    for store, untrusted in ((global_store, False), (repo_store, True)):
        if store is not None:
            path = store / "config.yaml"
            own = load_config_file(path, untrusted=untrusted)
            problems += drop_bad_values(own, str(path))
            data = _merge(data, own)
    data = _merge(data, env_overrides(os.environ if env is None else env))
    if data.get("write_mode") not in WRITE_MODES:
        raise ConfigError(write_mode_error(data.get("write_mode")))
    return Config(data, tuple(problems))


def own_settings(global_store: Path) -> dict[str, Any]:
    """The user's own config.yaml (the global store's) as parsed, {} when it cannot be: what
    ``shared_settings`` and ``repo_checkouts`` read, parsed once for both."""
    try:
        return load_config_file(global_store / "config.yaml")
    except ConfigError:
        return {}


def shared_settings(own: Mapping[str, Any]) -> dict[str, list[str]]:
    """``shared:`` of the user's own config.yaml (``own_settings``; a repo's never counts):
    for each shared store it names, the globs of the repos (origin URL or work tree path) that
    see it. A store left out is seen everywhere; an entry memstore cannot use (not a list of
    strings) shows the store nowhere rather than everywhere."""
    section = own.get("shared")
    if not isinstance(section, dict):
        return {}
    out: dict[str, list[str]] = {}
    for name, entry in section.items():
        if entry is None or (isinstance(entry, dict) and entry.get("repos") is None):
            continue  # named without a filter: seen everywhere
        repos = entry.get("repos") if isinstance(entry, dict) else None
        ok = isinstance(repos, list) and all(isinstance(g, str) for g in repos)
        out[str(name)] = list(repos) if ok and isinstance(repos, list) else []
    return out


def repo_checkouts(own: Mapping[str, Any]) -> dict[str, Path]:
    """``repos:`` of the user's own config.yaml (``own_settings``; a repo's or a shared store's
    never counts: both arrive from elsewhere, and this names folders of this machine that reads
    then run git in): repository name -> the local checkout ``repo:NAME@SHA:path`` evidence is
    checked against. An entry that is not an absolute path (``~`` expanded) is left out."""
    section = own.get("repos")
    if not isinstance(section, dict):
        return {}
    out: dict[str, Path] = {}
    for name, value in section.items():
        if isinstance(name, str) and isinstance(value, str) and value.strip():
            path = Path(value.strip()).expanduser()
            if path.is_absolute():
                out[name] = path
    return out


def env_count(name: str, default: int, env: Mapping[str, str] | None = None) -> int:
    """A whole number >= 1 from the environment variable ``name`` (a threshold tests lower to
    take a large store's path), or ``default``; any other value is warned about and ignored."""
    raw = (os.environ if env is None else env).get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        logging.getLogger("memstore.store.config").warning(
            "%s=%r is not a whole number >= 1; using %d", name, raw, default)
        return default
    return value
