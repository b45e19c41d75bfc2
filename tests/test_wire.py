"""The daemon's wire encodes and decodes with json's C encoder and scanner (no `import json`,
which imports `re`, on a CLI call's path): the text must be what json.dumps writes and the
values what json.loads reads, for anything a message or an answer can hold."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import pytest

from memstore.surfaces import wire

VALUES: list[object] = [
    {"verb": "cli", "argv": ["read", "caf\udce9", "\udcff\udcfe"], "stdin": None, "tty": False, "env": {}},
    {"text": 'Zürich 東京 🚀 "q" \\ \t\n\r\x00\x1f\x7f\x85\u2028\u2029\u202e\ufeff end', "n": -0, "big": 10**30},
    {"stdout": "x" * 70_000, "stderr": "", "exit_code": 3, "nested": [[[], {}], {"a": [1, 2.5, -1e-9, 1e300]}]},
    {"ok": True, "fallback": False, "none": None, "floats": [0.1, 1.0, 3.141592653589793, -2.5e-310]},
    {"keys": {"": 1, "é": 2, "🚀": 3, "a\"b": 4}},
    [], {}, "", "plain", 0, -1, 1.5, True, False, None,
]


def _random_text(rng: random.Random) -> str:
    return "".join(chr(rng.choice([rng.randrange(0, 0x80), rng.randrange(0x80, 0xD800),
                                   rng.randrange(0xD800, 0xE000), rng.randrange(0xE000, 0x110000)]))
                   for _ in range(rng.randrange(0, 40)))


def test_dumps_writes_what_json_dumps_writes() -> None:
    rng = random.Random(7)
    values = VALUES + [{_random_text(rng): [_random_text(rng), rng.random(), rng.randrange(-10**12, 10**12)]}
                       for _ in range(300)]
    for value in values:
        assert wire.dumps(value) == json.dumps(value, separators=(",", ":")), value


def test_loads_reads_what_json_loads_reads() -> None:
    rng = random.Random(11)
    texts = [json.dumps(v, ensure_ascii=ascii, indent=indent) for v in VALUES
             for ascii in (True, False) for indent in (None, 2)]
    texts += [json.dumps({_random_text(rng): _random_text(rng)}, ensure_ascii=False) for _ in range(300)]
    texts += ['  {"a": 1}\n', '\t[1, 2]\r\n', '"\\ud83d\\ude80"', '"\\udcff"', "NaN", "[Infinity, -Infinity]"]
    for text in texts:
        got, want = wire.loads(text), json.loads(text)
        assert json.dumps(got) == json.dumps(want), text
    assert math.isnan(wire.loads("NaN"))  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["", "   ", "{", '{"a": }', '{"a": 1} x', '{"a": 1}{"b": 2}', "[1,]", "tru",
                                  '"unterminated', '"\x01 raw control"', "{'a': 1}", "\udcff"])
def test_loads_refuses_what_json_loads_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        wire.loads(text)


def test_dumps_refuses_what_json_cannot_hold() -> None:
    for value in ({"a": object()}, {"a": b"bytes"}, {("tuple", "key"): 1}):
        with pytest.raises(TypeError):
            json.dumps(value)
        with pytest.raises(TypeError):
            wire.dumps(value)


def test_the_wire_imports_neither_json_nor_re() -> None:
    code = ("import sys; from memstore.surfaces import wire; wire.loads(wire.dumps({'a': ['b', 1]})); "
            "print(' '.join(m for m in ('json', 're', 'json.decoder') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""
