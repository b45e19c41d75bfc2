"""The ``read:`` section of config.yaml: the retrieval parameters a store may override by name.

A repo's config.yaml comes with every clone and is edited by hand, so each value is checked
against the type of the default it replaces before any read uses it. A word where a number
belongs, a mode that does not exist or a count past its ceiling is named (in every read's
warnings, and by ``memstore check``) and the default applies; a name this version does not
know is named with the closest one it does (a typo, or a setting of a newer memstore).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..errors import ConfigError
from ..store.config import Config, Problem, shown_value
from . import ranking

# Counts (pools, hops, limits) above these would only make reads slower, never better; a
# config that comes with a clone may not ask for more.
MAX_COUNT = 1000
CEILINGS: dict[str, int] = {"limit": 100, "small_store_size": 1_000_000_000}  # limit: as a request's own


@dataclass(frozen=True)
class UtilityParams:
    """Utility weighting of relevance (SPEC §4.7): relevance × (1 + α·U_local + β·U_global)."""

    alpha: float = 0.5
    beta: float = 0.2
    negative_cut: float = -0.5  # drop memories whose U_local (this context's votes) is at or below this
    link_factor: float = 0.9  # a memory pulled in by an explicit link scores its parent × this
    local_prior: float = 1.0  # pseudo-weight shrinking U_local toward 0 when few votes apply


@dataclass(frozen=True)
class ReadParams:
    ranking: ranking.RankingParams = field(default_factory=ranking.RankingParams)
    utility: UtilityParams = field(default_factory=UtilityParams)


def params_from_config(config: Config) -> ReadParams:
    """The read parameters config.yaml asks for (``read_settings``, without its problems)."""
    return read_settings(config)[0]


def read_settings(config: Config) -> tuple[ReadParams, list[Problem]]:
    """``read:`` in config.yaml overrides any RankingParams / UtilityParams field by name; a
    mapping (``query_bar: {ambient: 0.55}``) overrides only the keys it names. A value memstore
    cannot use leaves the default in place and is reported, as is a name it does not know."""
    return section_settings(config.get("read"))


def section_settings(section: Any) -> tuple[ReadParams, list[Problem]]:
    """``read_settings`` for one ``read:`` section as config.yaml holds it."""
    if not section:
        return ReadParams(), []
    if not isinstance(section, Mapping):
        return ReadParams(), [("error", f"config.yaml read: must be a mapping of setting names to values, not "
                                        f"{shown_value(section)}; the defaults apply")]
    rp, up = ranking.RankingParams(), UtilityParams()
    r_over: dict[str, Any] = {}
    u_over: dict[str, Any] = {}
    problems: list[Problem] = []
    r_names = {f.name for f in dataclasses.fields(rp)}
    u_names = {f.name for f in dataclasses.fields(up)}
    for key, value in section.items():
        name = str(key)
        if name not in r_names | u_names:
            close = difflib.get_close_matches(name, sorted(r_names | u_names), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else " (a newer memstore's, or a typo)"
            problems.append(("warning", f"config.yaml read.{name}: unknown setting, ignored{hint}"))
            continue
        params, over = (up, u_over) if name in u_names else (rp, r_over)
        try:
            over[name] = _checked(f"read.{name}", getattr(params, name), value, CEILINGS.get(name, MAX_COUNT))
        except ConfigError as exc:
            problems.append(("error", f"config.yaml {exc.message}; the default applies"))
    return ReadParams(dataclasses.replace(rp, **r_over), dataclasses.replace(up, **u_over)), problems


def _checked(where: str, default: Any, value: Any, ceiling: int) -> Any:
    """``value`` as the type of ``default`` (the field's built-in value), or a ConfigError; a
    count at most ``ceiling``."""
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, not {shown_value(value)}")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= ceiling:
            raise ConfigError(f"{where}: expected a whole number from 0 to {ceiling}, not {shown_value(value)}")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ConfigError(f"{where}: expected a number, not {shown_value(value)}")
        return float(value)
    if isinstance(default, Mapping):
        if not isinstance(value, Mapping):
            keys = ", ".join(default)
            raise ConfigError(f"{where}: expected a mapping of {keys} to values, not {shown_value(value)}")
        out = dict(default)
        for k, v in value.items():
            if k not in default:
                raise ConfigError(f"{where}.{k}: unknown key; one of {', '.join(default)}")
            out[k] = _checked(f"{where}.{k}", default[k], v, ceiling)
        return MappingProxyType(out)
    if isinstance(default, tuple):
        if not isinstance(value, list | tuple) or not value:
            raise ConfigError(f"{where}: expected a list of numbers, not {shown_value(value)}")
        return tuple(_checked(f"{where}[{n}]", default[0], v, ceiling) for n, v in enumerate(value))
    raise ConfigError(f"{where}: cannot be set in config.yaml")
