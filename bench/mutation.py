"""Mutation testing of the modules that guard the store: do the tests notice when the code that
refuses secrets, invalid memories and edits to committed files is quietly broken?

    python bench/mutation.py                                  # every module, every mutant
    python bench/mutation.py --module secrets --sample 60 --seed 1
    python bench/mutation.py --module check --list            # the mutants, not run

Each mutant is one small change to the module's syntax tree (the operators below), written into
a copy of the package under a temporary directory; the module's tests then run against that
copy (``PYTHONPATH``: the CLI subprocesses the tests start import it too) with ``-x -q -p
no:randomly`` and a timeout per mutant. A mutant is *killed* when the tests fail (or time out),
*survives* when they pass. One mutant runs at a time (the tests themselves are the CPU cost);
``--sample N`` runs N mutants drawn with ``random.Random(seed).sample`` from the module's list,
so a sampled run is repeatable.

Operators: a comparison flipped to its negation (``==``/``!=``, ``<``/``>=``, ``in``/``not in``,
``is``/``is not``), ``and``/``or`` swapped, a ``not`` removed, an ``if``/``while`` condition
negated, a number moved (an int by +1, a float by +0.5), an early ``return``/``continue``/
``break`` inside an ``if`` deleted. Docstrings, annotations and regex/string constants are left
alone: a broken pattern is killed by any test and says nothing.

Equivalent mutants (no behaviour a user could see changes) are listed by id in EQUIVALENT with
the reason; a mutant listed there that a test kills counts as killed. Equivalent ones are
reported apart and left out of the killed share.

Measured (2 shared cores, load 10-16; `--ids` reruns a run's survivors after tests were added):

| module | mutants run | killed | equivalent | survived | killed share |
|---|---|---|---|---|---|
| store/secrets.py | all 158 | 148 | 10 | 0 | 1.00 (0.73 before the new tests: 116 killed, 42 alive) |
| store/validate.py | all 128 | 127 | 1 | 0 | 1.00 (0.99 with the rules file alone: 1 alive) |
| git/check.py | all 286 | 280 | 6 | 0 | 1.00 (first full run: 279 killed, 7 alive, 1 of them not equivalent: 0.996) |
| git/prreview.py | all 229: 150 by `--sample 150 --seed 1`, the other 79 by `--ids` | 225 | 4 | 0 | 1.00 (first run) |
| verbs/pending.py | all 47 | 46 | 1 | 0 | 1.00 (0.87 before the new tests: 41 killed, 6 alive) |
| git/review.py | all 51 | 50 | 1 | 0 | 1.00 (0.74 before the new tests: 37 killed, 13 alive) |

    python bench/mutation.py --module secrets --timeout 120             # ~26 min here
    python bench/mutation.py --module validate --timeout 300                         # ~35 min
    python bench/mutation.py --module check --timeout 300                            # ~69 min
    python bench/mutation.py --module check --ids check:_check_event.flip#14 --timeout 300   # ~2 min
    python bench/mutation.py --module prreview --sample 150 --seed 1 --timeout 400   # ~9 min, load 2-3
    python bench/mutation.py --module prreview --ids IDS --timeout 400   # the 79 the sample left out, ~5 min
    python bench/mutation.py --module pending --timeout 120                          # ~8 min
    python bench/mutation.py --module review --timeout 300                           # ~12 min

The secrets run was made before one line of `_token_in_base64` was removed (a printable-text
test that only narrowed the search); the mutants it had are gone with it. Every mutant of each
module listed has been run.

validate and review run their rules file first (``tests/test_<module>_rules.py``: the module's
functions called in process on real repos built once per file, one assertion per rule and
edge; 3-5 s alone), so a killed mutant costs one pytest start and that file; the CLI tests after
it run in full only for a mutant it lets through (here, the equivalent one). At load 7-14
validate took 2,102 s and review 717 s; the rules file alone over validate's 128 took 678 s (a
run with MODULES naming it alone), the rest being the first run of every file on the unmutated
copy and the equivalent mutant's full run. Before the rules files, validate's old files
(test_write.py, test_links.py) took 503 s for `--sample 5` (4 killed, 1 alive:
``check_file_text.negate#1``); the rules file alone killed 126 of all 128, the one alive
(``resolve_link.boolop#1``) then killed by a new test. review's old files (test_review.py and
the links diff test) ran all 51 in 1,995 s: 37 killed, 13 alive and the equivalent one.

check.py's full run took 4,134 s: a killed mutant dies in ~8 s (test_check_rules.py runs first,
in-process on copies of one repo, and fails at once), an equivalent one costs ~5 min (all three
files run to the end, as the unmutated baseline does before the first mutant). Four of the
file's tests (commit "the staged check never scans the work tree copy ...") joined it at mutant
24, before the mutants they kill came up; the one mutant that lived and was not equivalent
(a global event pointing at global memory was refused) is killed by a test added after it.
prreview.py's 229 took 839 s with the machine quieter: test_prreview_rules.py reads git's diff
output first (no repo needed), so most mutants die in a few seconds; the four equivalent ones
ran both files to the end. Both were measured before the store-prefix helpers moved to
git/staged.py (``in_store``, ``repo_path``): check.py has 285 mutants since (one fewer in
``_changed_paths``), and the equivalent ids above still name the same changes. The mutants of
the functions that move touched, rerun with ``--ids`` since, are all killed: check's
``_changed_paths`` and ``_committed_projections`` (13, 199 s) and prreview's ``change`` (4, 45 s).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# module -> (source file, the fast tests that exercise it, most sensitive first; pytest -k or "")
MODULES: dict[str, tuple[str, list[str], str]] = {
    "secrets": ("memstore/store/secrets.py", ["tests/test_secrets.py"], ""),
    # validate: its rules in process first (seconds), then the CLI paths of the same rules
    "validate": ("memstore/store/validate.py",
                 ["tests/test_validate_rules.py", "tests/test_write.py", "tests/test_links.py"], ""),
    # check's rules through the library first (seconds), then the CLI's and the hook's commit tests
    "check": ("memstore/git/check.py", ["tests/test_check_rules.py", "tests/test_check.py", "tests/test_hooks.py"],
              "check or pre_commit"),
    # `memstore diff`: its rules in process first, then the CLI paths (check --base, diff, review)
    "review": ("memstore/git/review.py", ["tests/test_review_rules.py", "tests/test_review.py",
                                          "tests/test_links.py::test_diff_shows_added_links_with_the_text_they_point_at"],
               ""),
    # review's git half through the library first, then the CLI's review tests (not the workflow installs)
    "prreview": ("memstore/git/prreview.py", ["tests/test_prreview_rules.py", "tests/test_prreview.py"],
                 "not integrate_github"),
    # the approval gate: proposals of the global store read back as hostile input
    "pending": ("memstore/verbs/pending.py", ["tests/test_pending.py"], ""),
}

# "module:mutant id" -> why the change cannot be seen by a user.
EQUIVALENT: dict[str, str] = {
    "pending:drop.const#1": "split('-', 2)[0] is split('-', 1)[0]: the id before the first dash either way",
    "secrets:<module>.const#1": "_BASE64_MAX bounds decoding work; only a base64 run of exactly 4097 characters "
                                "differs, and no token is that long",
    "secrets:_token_in_base64.dropexit#1": "the same work bound: past it a run is decoded anyway and holds no token",
    "secrets:redact.dropexit#1": "with no spans the loop below returns the text unchanged and []",
    "secrets:_scan.dropexit#1": "an empty text has no invisible character and scans to [] below",
    "secrets:_scan.dropexit#2": "without invisible characters the general path keeps every index: same spans",
    "secrets:_scan_visible.const#3": "rfind from 1 instead of 0 only misses a newline at index 0, which the "
                                     "context search then covers harmlessly",
    "secrets:_scan_visible.const#5": "find from m.end() > 0 never returns 0, so < 0 and < 1 agree",
    "secrets:_scan_visible.const#12": "spans never overlap (add refuses overlaps): sorted by end is sorted by start",
    "secrets:shannon_entropy.dropexit#1": "for an empty value the sum is -0, equal to 0.0",
    "secrets:_secret_value.const#2": "a value of 4 distinct characters has at most 2 bits/char and fails the entropy "
                                     "tests below anyway",
    "check:name_problem.dropexit#1": "a shortcut: every refused category is unprintable, so for a printable name "
                                     "without a quote or a backslash the loop below returns None too",
    "check:_immutability.const#1": "rel.split('/', 2)[0] is rel.split('/', 1)[0]: the top folder either way",
    "check:_immutability.const#3": "rsplit('/', 2)[-1] is rsplit('/', 1)[-1]: the file name either way",
    "check:_immutability.const#4": "split('-', 2)[0] is split('-', 1)[0]: the part before the first dash either way",
    "check:run_check.boolop#14": "a refresh with nothing fixed re-reads files that did not change: the same catalog",
    "check:run_check.flip#31": "the catalog refreshes itself from file stats on its next use; the refresh after "
                               "--fix only does it sooner",
    "prreview:__init__.boolop#1": "assert a or b for a and b: touched and distance make the carrier only for a "
                                  "repo store with its own work tree (they return before otherwise): both hold",
    "prreview:touched.dropexit#3": "with no candidates the loop below carries nothing and the answer is [] anyway",
    "prreview:distance.dropexit#2": "with no candidates the loop below adds nothing and the answer is {} anyway",
    "prreview:_overlaps.dropexit#1": "a pure insertion (old_count 0) spans no base line: the range below is empty",
    "validate:check_secrets.dropexit#1": "find_secrets('') is [] anyway",
    "review:branch_diff.const#2": "rel.split('/', 2)[0] is rel.split('/', 1)[0]: the folder before the first "
                                  "slash either way",
}

_FLIP: dict[type, type] = {
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE, ast.LtE: ast.Gt,
    ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}


@dataclass
class Mutant:
    id: str  # function.operator#n: the n-th place the operator applies in that function (stable across edits elsewhere)
    line: int
    description: str


def _skippable(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Inside an annotation (types change nothing at run time)."""
    child, parent = node, parents.get(node)
    while parent is not None:
        if isinstance(parent, ast.AnnAssign) and child is parent.annotation:
            return True
        if isinstance(parent, ast.arg) and child is parent.annotation:
            return True
        if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef) and child is parent.returns:
            return True
        child, parent = parent, parents.get(parent)
    return False


def mutation_points(tree: ast.Module) -> list[tuple[Mutant, ast.AST, str, int]]:
    """(mutant, node, operator, index) for every place one operator applies."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    out: list[tuple[Mutant, ast.AST, str, int]] = []
    seen: dict[str, int] = {}

    def key(node: ast.AST, op: str) -> str:
        owner, up = "<module>", parents.get(node)
        while up is not None:
            if isinstance(up, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                owner = up.name
                break
            up = parents.get(up)
        seen[f"{owner}.{op}"] = seen.get(f"{owner}.{op}", 0) + 1
        return f"{owner}.{op}#{seen[f'{owner}.{op}']}"

    nodes = sorted((n for n in ast.walk(tree) if hasattr(n, "lineno")), key=lambda n: (n.lineno, n.col_offset))
    for node in nodes:
        if _skippable(node, parents):
            continue
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in _FLIP:
                    out.append((Mutant(key(node, "flip"), node.lineno,
                                       f"{type(op).__name__} -> {_FLIP[type(op)].__name__}"), node, "flip", i))
        elif isinstance(node, ast.BoolOp):
            other = "or" if isinstance(node.op, ast.And) else "and"
            out.append((Mutant(key(node, "boolop"), node.lineno, f"-> {other}"), node, "boolop", 0))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            out.append((Mutant(key(node, "notdrop"), node.lineno, "not x -> x"), node, "notdrop", 0))
        elif isinstance(node, ast.If | ast.While):
            out.append((Mutant(key(node, "negate"), node.lineno, "condition negated"), node, "negate", 0))
            for i, stmt in enumerate(node.body):
                if isinstance(stmt, ast.Return | ast.Continue | ast.Break):
                    out.append((Mutant(key(stmt, "dropexit"), stmt.lineno,
                                       f"{type(stmt).__name__.lower()} deleted"), node, "dropexit", i))
        elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
            parent = parents.get(node)
            if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.USub):
                continue  # -1 stays -1 (an index from the end)
            out.append((Mutant(key(node, "const"), node.lineno, f"{node.value!r} moved"), node, "const", 0))
    return out


def apply(source: str, index: int) -> str:
    """``source`` with the ``index``-th mutation applied (points are found again on a fresh tree)."""
    tree = ast.parse(source)
    _mutant, node, op, i = mutation_points(tree)[index]
    if op == "flip":
        assert isinstance(node, ast.Compare)
        node.ops[i] = _FLIP[type(node.ops[i])]()
    elif op == "boolop":
        assert isinstance(node, ast.BoolOp)
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif op == "notdrop":
        assert isinstance(node, ast.UnaryOp)
        _replace(tree, node, node.operand)
    elif op == "negate":
        assert isinstance(node, ast.If | ast.While)
        node.test = ast.UnaryOp(op=ast.Not(), operand=node.test)
    elif op == "dropexit":
        assert isinstance(node, ast.If | ast.While)
        node.body[i] = ast.Pass()
    elif op == "const":
        assert isinstance(node, ast.Constant)
        node.value = node.value + 1 if isinstance(node.value, int) else node.value + 0.5
    return ast.unparse(ast.fix_missing_locations(tree))


def _replace(tree: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for name, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, name, new)
                return
            if isinstance(value, list):
                for k, item in enumerate(value):
                    if item is old:
                        value[k] = new
                        return


def run_module(name: str, args: argparse.Namespace) -> dict[str, object]:
    rel, tests, select = MODULES[name]
    source = (ROOT / rel).read_text(encoding="utf-8")
    points = mutation_points(ast.parse(source))
    order = list(range(len(points)))
    if args.sample and args.sample < len(order):
        order = sorted(random.Random(args.seed).sample(order, args.sample))
    if args.ids:
        wanted = {i.split(":", 1)[-1] for i in args.ids.split(",")}
        order = [k for k in order if points[k][0].id in wanted]
    if args.list:
        for k in order:
            print(f"{name}:{points[k][0].id}  line {points[k][0].line}: {points[k][0].description}")
        return {}
    killed, survived, equivalent, timeouts = [], [], [], 0
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="memstore-mutants-") as tmp:
        copy_root = Path(tmp)
        shutil.copytree(ROOT / "memstore", copy_root / "memstore",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        for folder in ("hooks", "templates"):  # data files a source checkout serves from its top level
            shutil.copytree(ROOT / folder, copy_root / folder)
        target = copy_root / rel
        env = {**os.environ, "PYTHONPATH": str(copy_root), "PYTHONDONTWRITEBYTECODE": "1"}
        # The tests import memstore from PYTHONPATH; conftest lives in tests/ and finds it there.
        probe = subprocess.run([sys.executable, "-c", "import memstore; print(memstore.__file__)"], cwd=copy_root,
                               env=env, capture_output=True, text=True, check=True).stdout.strip()
        assert probe.startswith(str(copy_root)), probe  # the tests must import the mutated copy
        baseline = _run_tests(tests, select, env, args.timeout * 3, copy_root)
        if baseline != "pass":
            raise SystemExit(f"{name}: the tests do not pass on the unmutated copy ({baseline})")
        for k in order:
            mutant = points[k][0]
            key = f"{name}:{mutant.id}"
            try:
                mutated = apply(source, k)
                compile(mutated, rel, "exec")
            except (SyntaxError, ValueError):
                continue
            target.write_text(mutated, encoding="utf-8")
            outcome = _run_tests(tests, select, env, args.timeout, copy_root)
            timeouts += outcome == "timeout"
            entry = {"id": mutant.id, "line": mutant.line, "change": mutant.description}
            if outcome != "pass":
                killed.append(entry)  # a test tells it apart, whatever EQUIVALENT says
            elif key in EQUIVALENT:
                equivalent.append({**entry, "why": EQUIVALENT[key]})
            else:
                survived.append(entry)
            if args.verbose:
                print(f"  {key} line {mutant.line} {mutant.description}: {outcome}", flush=True)
        target.write_text(source, encoding="utf-8")
    counted = len(killed) + len(survived)
    return {"module": name, "mutants": counted + len(equivalent), "killed": len(killed), "killed_ids": killed,
            "survived": survived, "equivalent": equivalent, "timeouts": timeouts,
            "killed_share": round(len(killed) / counted, 3) if counted else None,
            "sampled": bool(args.sample), "seconds": round(time.time() - t0)}


def _run_tests(tests: list[str], select: str, env: dict[str, str], timeout: float, cwd: Path) -> str:
    # Run from the copy: ``python -m`` puts the working directory first on sys.path.
    cmd = [sys.executable, "-m", "pytest", *(str(ROOT / t) for t in tests), "-x", "-q", "-p", "no:randomly",
           "-p", "no:cacheprovider", "--no-header", *(["-k", select] if select else [])]
    try:
        # errors="replace": a mutant can make a test print bytes that are not UTF-8
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, errors="replace", timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        return "timeout"
    return "pass" if proc.returncode == 0 else "fail"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--module", action="append", choices=sorted(MODULES), help="repeatable; default: all")
    ap.add_argument("--sample", type=int, default=0, help="mutants per module, drawn with --seed (0: all)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per mutant's test run")
    ap.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    ap.add_argument("--ids", default="", help="comma-separated mutant ids (module:function.op#n): run only these")
    ap.add_argument("--verbose", action="store_true", help="one line per mutant as it is judged")
    args = ap.parse_args()
    results = [r for name in (args.module or sorted(MODULES)) if (r := run_module(name, args))]
    if args.list:
        return 0
    print("| module | mutants | killed | survived | equivalent | killed share | time |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['module']}{' (sampled)' if r['sampled'] else ''} | {r['mutants']} | {r['killed']} "
              f"| {len(r['survived'])} | {len(r['equivalent'])} | {r['killed_share']} | {r['seconds']} s |")
    for r in results:
        for s in r["survived"]:
            print(f"- survived {r['module']}:{s['id']} (line {s['line']}: {s['change']})")
        for e in r["equivalent"]:
            print(f"- equivalent {r['module']}:{e['id']} (line {e['line']}: {e['change']}): {e['why']}")
    print(json.dumps({"results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
