"""The fast frontmatter path returns exactly what CSafeLoader returns (values and types), or
None so the caller goes through CSafeLoader and every check it had. Checked over the example
store, over memories rendered by the Store itself, and over hand-written oddities."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from memstore.errors import InvalidFile
from memstore.store import plainyaml
from memstore.store.files import _FM_BOUNDARY, _normalise, dump_yaml, parse_markdown, safe_yaml
from memstore.store.model import Memory

ROOT = Path(__file__).resolve().parent.parent
ID = "01m7qmgvt9txwmxsa4g8kr1ap8"


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (1 == 1.0 == True is not enough)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dt.datetime):
        return a == b and a.tzinfo == b.tzinfo
    return bool(a == b)


def _frontmatter(text: str) -> str:
    return _FM_BOUNDARY.split(text.lstrip("\ufeff").strip(), 2)[1]


def _check(fm: str) -> Any:
    """The fast result, after asserting it is CSafeLoader's whenever it is not None, and its
    normalised form that of ``safe_yaml`` over CSafeLoader's."""
    fast = plainyaml.parse(fm)
    norm = plainyaml.parse(fm, normalise=True)
    if fast is not None:
        want = yaml.load(fm, Loader=yaml.CSafeLoader)
        assert _same(fast, want), (fm, fast, want)
        assert norm is None or _same(norm, _normalise(want)), (fm, norm)
    else:
        assert norm is None
    return fast


def test_the_example_store_takes_the_fast_path_and_reads_the_same() -> None:
    paths = sorted((ROOT / ".memory-example").glob("*/*.md"))
    assert len(paths) > 10
    for path in paths:
        assert _check(_frontmatter(path.read_text(encoding="utf-8"))) is not None, path


_AWKWARD = ["plain", "with: colon", "hash # inside", "a#b", "'quoted'", '"double"', "it's", "yes", "no", "null",
            "~", "true", "0.5", "1e3", "0x1f", "012", "1_000", "10:30", "2026-01-02", "2026-01-02T03:04:05Z",
            "-dash", "- item", "[x]", "{y}", "*star", "&amp", "!tag", "%pct", "@at", "`tick`", "ünïcödé ✓",
            "trailing space ", " leading", "tab\there", "back\\slash", "", "a, b", "key: value: more", "?q",
            "multi\nline", "ends with colon:", "x" * 150, "word " * 40, "café: bar", "emoji 🎉", "...", "---"]


def _memory(rng: random.Random, i: int) -> Memory:
    pick = rng.choice
    links: dict[str, Any] = {}
    if rng.random() < 0.5:
        links["related"] = [ID] * rng.randint(1, 3)
    if rng.random() < 0.3:
        links["problem"] = ID
    if rng.random() < 0.1:
        links["relations"] = [{"type": "elaborates", "target": ID}]
    return Memory(id=ID, kind="fact", text="body", created="2026-11-18T15:31:04Z",
                  author=pick(["claude-code", "dana", pick(_AWKWARD)]),
                  confidence=pick([None, 0.8, 1.0, 0.0, 0.123456789]),
                  rationale=pick(["", "Read it in app/db/session.py.", pick(_AWKWARD), " ".join(
                      pick(_AWKWARD) for _ in range(rng.randint(1, 30)))]),
                  links=links,
                  evidence=[pick(["file:app/db/session.py@a41c2e0", "event:01m7qfe3t1b183v60j1k2n9k5t:5",
                                  pick(_AWKWARD)]) for _ in range(rng.randint(0, 4))],
                  tags=[pick(["db", "sqlite", "api.stripe.com", pick(_AWKWARD)]) for _ in range(rng.randint(0, 12))])


def test_memories_the_store_renders_read_the_same() -> None:
    rng = random.Random(5)
    fast = 0
    for i in range(3000):
        fm = dump_yaml(_memory(rng, i).frontmatter())
        if _check(fm) is not None:
            fast += 1
    assert 600 < fast < 2900  # both paths taken: awkward values send many to the C loader


def test_plain_memories_all_take_the_fast_path() -> None:
    for i in range(50):
        meta = {"id": ID, "kind": "fact", "scope": "repo", "created": "2026-11-18T15:31:04Z", "author": "dana",
                "confidence": 0.8, "rationale": f"Seen while fixing case {i}: " + "the thing broke " * (i % 9),
                "links": {"related": [ID, ID], "problem": ID}, "evidence": ["file:a.py#L1-L2"],
                "tags": [f"t{j}" for j in range(i % 25)]}
        assert _check(dump_yaml(meta)) is not None, dump_yaml(meta)


@pytest.mark.parametrize("fm", [
    'a: "x"\nb: \'y\'\nc: \'it\'\'s\'\n',
    "a: 1\nb: -3\nc: 0\nd: 1.5\ne: true\nf: false\ng: null\nh: ~\ni:\n",
    "a: 2026-11-18\nb: 2026-11-18T15:31:04Z\nc: 2026-11-18T15:31:04\n",
    "a: [x, 'y z', \"w\", 1, 2.5, true, null]\nb: []\nc: [a,\n  b, c]\n",
    "a:\n- x\n- 'y'\nb:\n  - 1\n  - two\n",
    "links:\n  related: [a, b]\n  problem: x\n  list:\n  - p\n  - q\nafter: 1\n",
    "text: a long plain value\n  that goes on over\n  three lines\n",
    "text: 'quoted over\n  two lines'\n",
    "u: ünïcödé ✓ 🎉\n",
    "links: {problem: 01m8b1tvvbw0dmfz3zpjnnq04d}\n",
    "links: {problem: x, via_change: 'y: z', n: 3}\ncreated: '2026-01-01T10:00:00Z'\nevidence: ['user:bench']\n",
    "url: http://example.com/a#b\nev: file:app/x.py#L1-L2@abc\n",
    "a: x\n  \u00a0y\u00a0\n",  # U+00A0 is content to YAML, not white space
])
def test_shapes_memstore_writes_take_the_fast_path(fm: str) -> None:
    assert _check(fm) is not None, fm


@pytest.mark.parametrize("fm", [
    "a: &x 1\nb: *x\n",  # anchors and aliases: the checks in safe_yaml refuse them
    "a: 1\na: 2\n",  # a duplicate key
    "a: 1 # comment\n",
    "# comment\na: 1\n",
    "a: !!python/object:os.system x\n",
    "a: |\n  block\n",
    "a: >\n  folded\n",
    "a: {b: [1]}\n",
    "a: {}\n",
    "a: {b: 1, b: 2}\n",
    "a: [[1], 2]\n",
    "a: [x, #y\n  z]\n",
    "a:\n  b:\n    c: 1\n",
    "a: \"esc\\n\"\n",
    "a: yes\n",
    "a: 0x1f\n",
    "a: 2026-13-45\n",
    "yes: 1\n",
    "a:\tb\n",
    "a: b\r\n",
    "a: x\n\n  y\n",
    "a: 'broken\n",
    "- 1\n- 2\n",
    "just a string\n",
    "",
    "a: b: c\n",
    "links:\n  relations:\n  - type: elaborates\n    target: x\n",
])
def test_everything_else_falls_back(fm: str) -> None:
    assert plainyaml.parse(fm) is None, fm


def test_safe_yaml_keeps_every_check() -> None:
    with pytest.raises(InvalidFile, match="anchors"):
        safe_yaml("a: &x 1\nb: *x\n")
    with pytest.raises(InvalidFile, match="larger than"):
        safe_yaml("a: " + "x" * 70_000 + "\n")
    with pytest.raises(InvalidFile, match="integer beyond 64 bits"):
        safe_yaml("a: " + "9" * 30 + "\n")
    with pytest.raises(InvalidFile, match="not valid YAML at line"):
        safe_yaml("a: 1\nb: 2\nc: [\n", first_line=1)
    with pytest.raises(InvalidFile, match="too long to read"):
        safe_yaml("a: " + "9" * 5000 + "\n")
    with pytest.raises(InvalidFile, match="not finite"):
        safe_yaml("a: " + "9" * 400 + ".5\n")
    assert safe_yaml("a: " + "9" * 18 + "\nb: [-3, 0.5]\n") == {"a": 10**18 - 1, "b": [-3, 0.5]}
    assert safe_yaml("a: 1\na: 2\n") == {"a": 2}  # a duplicate key: the last wins, as before
    assert safe_yaml("created: 2026-11-18T15:31:04Z\nday: 2026-11-18\n") == {
        "created": "2026-11-18T15:31:04Z", "day": "2026-11-18"}


def test_a_file_read_fast_is_the_file_read_before() -> None:
    text = (ROOT / ".memory-example").glob("*/*.md").__next__().read_text(encoding="utf-8")
    meta, body = parse_markdown(text)
    want = yaml.load(_frontmatter(text), Loader=yaml.CSafeLoader)
    assert meta["id"] == want["id"] and meta["created"] == want["created"].strftime("%Y-%m-%dT%H:%M:%SZ")
    assert body


# Pieces of YAML that read differently in one parser or another: indicators, the scalars YAML 1.1
# resolves to other types, quotes, and the Unicode spaces Python strips but YAML keeps.
_ATOMS = ["a", "x", "1", "-1", "07", "1.5", "1.", "1e3", ".5", "true", "True", "yes", "on", "null", "~",
          "2026-11-18", "2026-11-18T15:31:04Z", "2026-11-18 15:31:04", "2026-11-18T15:31:04+01:00", "2026-02-30",
          "12:30", "1_000", "0o17", "0x1F", "+1", "-", "---", "...", "'q'", '"d"', "'it''s'", "''", "'", '"',
          "[", "]", "{", "}", ",", ", ", ":", ": ", "#", " #", "&x", "*x", "!t", "|", ">", "?", "%", "@", "`",
          "<<", "- ", "é", "\u00a0", "\u2000", "\u3000", "\u202f", "\ufeff", "\u200b", "x:y", "http://a#b",
          " ", "  ", "\n", "\n ", "\n  ", "\n- ", "\n  - ", "\n\n", "9" * 20, ".inf", ".nan"]


def _random_frontmatter(r: random.Random) -> str:
    def words(most: int) -> str:
        return "".join(r.choice(_ATOMS) for _ in range(r.randint(0, most)))

    def value() -> str:
        k = r.random()
        if k < 0.15:
            return "[" + ", ".join(words(2) for _ in range(r.randint(0, 4))) + r.choice(["]", ",]", ""])
        if k < 0.25:
            return "{" + ", ".join(f"{r.choice(['p', 'yes', '1'])}: {words(2)}" for _ in range(r.randint(0, 3))) + "}"
        if k < 0.4:
            ind = r.choice(["", " ", "  "])
            return "".join(f"\n{ind}- {words(3)}" for _ in range(r.randint(1, 4)))
        if k < 0.5:
            return "".join(f"\n  {r.choice(['p', 'q', 'yes'])}: {words(3)}" for _ in range(r.randint(1, 3)))
        return words(5)

    lines = [f"{r.choice(['', '', '', ' ', '  '])}{r.choice(['a', 'links', 'yes', '1', 'a-b', '_k'])}:"
             f"{r.choice([' ', ' ', '', '  '])}{value()}" for _ in range(r.randint(1, 6))]
    return "\n".join(lines) + r.choice(["\n", ""])


@pytest.mark.parametrize("seed", [1, 2])
def test_random_frontmatter_is_read_as_csafeloader_reads_it_or_left_to_it(seed: int) -> None:
    """A hostile file must not mean one thing to memstore and another to every other YAML
    reader (a reviewer's tools, the C path): whatever the fast path accepts, CSafeLoader reads
    the same, value for value and type for type."""
    r = random.Random(seed)
    fast = 0
    for _ in range(30_000):
        fm = _random_frontmatter(r)
        if plainyaml.parse(fm) is None:
            assert plainyaml.parse(fm, normalise=True) is None, fm
            continue
        try:
            yaml.load(fm, Loader=yaml.CSafeLoader)
        except yaml.YAMLError as e:
            raise AssertionError(f"the fast path read what CSafeLoader refuses: {fm!r}") from e
        _check(fm)
        fast += 1
    assert fast > 500  # the generator reaches the fast path, or this test proves nothing


def test_a_line_read_before_is_read_again_only_where_it_stands_alone() -> None:
    """Whole top-level lines are memoised across files: the same line followed by its value's
    continuation, repeated in one mapping, or mutated after it was handed out reads as
    CSafeLoader reads it each time."""
    alone = "kind: fact\nrationale: seen in every file\ntags: [deploy, auth]\n"
    continued = "kind: fact\nrationale: seen in every file\n  and one more line\ntags: [deploy, auth]\n"
    twice = "kind: fact\nkind: fact\n"
    for fm in (alone, continued, alone, continued):
        got = _check(fm)
        assert got is not None, fm
        assert got["rationale"] == ("seen in every file" if fm is alone else "seen in every file and one more line")
    assert plainyaml.parse(twice) is None  # a duplicate key is left to CSafeLoader, memo or not
    first = plainyaml.parse(alone)
    assert first is not None
    first["tags"].append("changed")
    again = plainyaml.parse(alone)
    assert again is not None and again["tags"] == ["deploy", "auth"]
