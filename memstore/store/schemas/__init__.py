"""JSON Schemas of the three request verbs (SPEC §3, validation step 1) and a readable error list.

The schema files are plain draft 2020-12 documents so that they can double as MCP tool input
schemas; every human wording lives here rather than in custom schema keywords. jsonschema is
imported lazily: it costs ~50 ms, and most CLI invocations (and `import memstore.store.schemas`) never
validate anything.
"""

from __future__ import annotations

# Not `from typing import TYPE_CHECKING`: typing alone would double this module's import cost.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence
    from typing import Any

    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError

__all__ = ["SCHEMA_NAMES", "load_schema", "schema_errors"]

SCHEMA_NAMES = ("read", "write", "update")

_ID_PATTERN = "^[0-9A-Za-z]{6,26}$"
_TAG_PATTERN = "^[A-Za-z0-9][A-Za-z0-9_.:/+-]{0,63}$"
_SCOPE_PATTERN = "^(repo|global|shared:[a-z0-9][a-z0-9_-]{0,39})$"
# Patterns are what an agent least understands from a regex, so each one gets a sentence.
_PATTERN_MESSAGES = {
    _ID_PATTERN: "must be a memory id: 6-26 letters or digits (a ULID or a unique prefix of one)",
    _TAG_PATTERN: "must be a short tag: 1-64 letters, digits or _ . : / + -, starting with a letter or digit",
    "\\S": "must not be blank",
    _SCOPE_PATTERN: 'must be "repo", "global" or "shared:NAME" (NAME an attached shared store)',
}
_DATE_HINT = "must be a date YYYY-MM-DD or a datetime YYYY-MM-DDTHH:MM:SSZ"
_TYPE_WORDS = {
    "object": "an object",
    "array": "an array",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}
# Keywords whose failure says little on its own; at equal depth they sort after the others.
_WEAK = frozenset({"anyOf", "oneOf", "allOf", "if", "then", "else", "not"})


def _check_name(name: str) -> None:
    if name not in SCHEMA_NAMES:
        raise ValueError(f"unknown schema {name!r}; expected one of {', '.join(SCHEMA_NAMES)}")


_SCHEMAS: dict[str, dict[str, Any]] = {}
_VALIDATORS: dict[str, Draft202012Validator] = {}


def _load(name: str) -> dict[str, Any]:
    schema = _SCHEMAS.get(name)
    if schema is None:
        import json
        from importlib import resources

        _check_name(name)
        text = resources.files(__name__).joinpath(f"{name}.json").read_text(encoding="utf-8")
        schema = _SCHEMAS[name] = json.loads(text)
    return schema


def load_schema(name: str) -> dict[str, Any]:
    """The schema for verb ``name`` ("read", "write" or "update") as a fresh dict.

    A copy, because callers embed it in MCP tool lists or tweak it, and the cached original
    must keep validating the same way for the life of a daemon.
    """
    import copy

    return copy.deepcopy(_load(name))


def _validator(name: str) -> Draft202012Validator:
    validator = _VALIDATORS.get(name)
    if validator is None:
        from jsonschema import Draft202012Validator

        validator = _VALIDATORS[name] = Draft202012Validator(_load(name))
    return validator


def warm() -> None:
    """Import jsonschema and build every request validator now (~0.1 s): a long-lived process
    (the daemon) pays it at start, not in its first answer."""
    for name in ("read", "write", "update"):
        schema_errors(name, {})


def schema_errors(name: str, instance: object) -> list[tuple[str, str]]:
    """Every schema violation of ``instance`` as ``(field, message)``, best first.

    ``field`` is a dotted path such as ``"memory.links.problem_id"`` or ``"memory.tags[2]"``;
    ``""`` means the request itself. A missing or unknown property is reported at the
    property's own path, not at its parent's, so that the field names what to fix. The deepest
    violations come first (they are the most specific); ties keep schema order. An empty list
    means the instance is valid.
    """
    from jsonschema.exceptions import best_match

    schema = _load(name)
    ranked: list[tuple[tuple[int, bool], str, str]] = []
    seen: set[tuple[str, str]] = set()
    for raw in _validator(name).iter_errors(instance):
        # anyOf/oneOf failures carry their real cause in .context; best_match descends to it.
        error = best_match([raw]) or raw
        weak = error.validator in _WEAK
        for path, message in _describe(error, schema, instance):
            if (path_str := _join(path), message) in seen:
                continue
            seen.add((path_str, message))
            ranked.append(((-len(path), weak), path_str, message))
    ranked.sort(key=lambda item: item[0])  # stable: equal keys keep jsonschema's schema order
    return [(field, message) for _, field, message in ranked]


def _join(path: Sequence[object]) -> str:
    # Same spelling as the later gates use: memory.evidence_refs[0].
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def _describe(error: ValidationError, schema: dict[str, Any], root: object) -> Iterator[tuple[list[object], str]]:
    path: list[object] = list(error.absolute_path)
    keyword = error.validator
    value: Any = error.validator_value
    instance: Any = error.instance
    sub: Any = error.schema

    condition = _condition(error, schema)
    suffix = f" when {condition}" if condition else ""
    if keyword == "required":
        have = instance if isinstance(instance, dict) else {}
        for prop in value:
            # jsonschema raises one error per missing property; this picks the one it names.
            if prop not in have and f"{prop!r} is a required property" in error.message:
                yield [*path, prop], f"{prop!r} is required{suffix}"
        return
    if keyword == "additionalProperties":
        known = list(sub.get("properties", {})) if isinstance(sub, dict) else []
        for extra in _extras(instance, known):
            yield [*path, extra], _unknown_field(extra, known)
        return
    if keyword is None and sub is False:
        # A `false` subschema is how update.json forbids a field for one type. jsonschema reports
        # it at the parent object without naming the property, so find the forbidden keys present.
        props = _node(schema, error.schema_path)
        parent = _node(root, path)
        if isinstance(props, dict) and isinstance(parent, dict):
            for key, rule in props.items():
                if rule is False and key in parent:
                    yield [*path, key], f"{key!r} is not allowed{suffix}"
            return
        yield path, f"not allowed{suffix}"
        return
    yield path, _message(keyword, value, instance, sub, error.message)


def _message(keyword: str | None, value: Any, instance: Any, sub: Any, fallback: str) -> str:
    if keyword == "type":
        wanted = value if isinstance(value, list) else [value]
        words = " or ".join(_TYPE_WORDS.get(t, t) for t in wanted)
        got = _json_type(instance)
        return f"must be {words}, not {'a boolean' if got == 'boolean' else _TYPE_WORDS[got]}"
    if keyword == "enum":
        return f"must be one of {', '.join(_show(v) for v in value)}; got {_show(instance)}"
    if keyword == "const":
        return f"must be {_show(value)}; got {_show(instance)}"
    if keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        low, high = sub.get("minimum"), sub.get("maximum")
        if low is not None and high is not None:
            return f"must be between {low} and {high}; got {_show(instance)}"
        bound = "at least" if keyword == "minimum" else "at most" if keyword == "maximum" else "beyond"
        return f"must be {bound} {value}; got {_show(instance)}"
    if keyword == "minLength":
        return "must not be empty" if value == 1 else f"must be at least {value} characters long"
    if keyword == "maxLength":
        return f"must be at most {value} characters long (got {len(instance)})"
    if keyword == "pattern":
        if value in _PATTERN_MESSAGES:
            hint = _PATTERN_MESSAGES[value]
        elif value.startswith("^[0-9]{4}-"):
            hint = _DATE_HINT
        else:
            hint = f"must match the pattern {value}"
        return hint if value == "\\S" else f"{hint}; got {_show(instance)}"
    if keyword == "minItems":
        return f"must have at least {value} item{'s' if value != 1 else ''}"
    if keyword == "maxItems":
        return f"must have at most {value} items (got {len(instance)})"
    if keyword == "uniqueItems":
        return "must not contain duplicates"
    # jsonschema messages embed the whole instance, which may be 100 kB of memory text.
    return fallback if len(fallback) <= 200 else fallback[:199] + "…"


def _condition(error: ValidationError, schema: dict[str, Any]) -> str:
    """For an error raised inside an if/then, the condition in words, e.g. "type is 'archive'"."""
    node: Any = schema
    for step in error.schema_path:
        if step == "then" and isinstance(node, dict) and isinstance(node.get("if"), dict):
            props = node["if"].get("properties", {})
            parts = [f"{key} is {_show(rule['const'])}" for key, rule in props.items() if "const" in rule]
            return " and ".join(parts)
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            return ""
    return ""


def _node(tree: Any, steps: Iterable[object]) -> Any:
    for step in steps:
        try:
            tree = tree[step]
        except (KeyError, IndexError, TypeError):
            return None
    return tree


def _extras(instance: Any, known: Iterable[str]) -> list[str]:
    if not isinstance(instance, dict):
        return []
    allowed = set(known)
    return [key for key in instance if key not in allowed]


def _unknown_field(extra: str, known: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(extra, known, n=1, cutoff=0.6)
    if close:
        return f"unknown field {extra!r}; did you mean {close[0]!r}?"
    return f"unknown field {extra!r}; allowed: {', '.join(known)}"


def _json_type(instance: object) -> str:
    if instance is None:
        return "null"
    if isinstance(instance, bool):
        return "boolean"
    if isinstance(instance, int):
        return "integer"
    if isinstance(instance, float):
        return "number"
    if isinstance(instance, str):
        return "string"
    if isinstance(instance, list | tuple):
        return "array"
    return "object"


def _show(value: object, limit: int = 40) -> str:
    """A short JSON-ish rendering; long values are cut so messages never echo a whole memory."""
    import json

    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
