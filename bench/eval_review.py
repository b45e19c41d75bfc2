"""``memstore review`` replayed on a real project's history.

    python bench/eval_review.py --repo PATH [--sample 150] [--split 0.7] [--judge 20] [--json-out FILE]

PATH is any git repository or bundle; nothing here knows which project it is.

Protocol:

1. Clone PATH into a temporary folder. Its first-parent history (``git rev-list --first-parent``
   of the default branch, oldest first) is the sequence of changes the project merged: a merge
   commit stands for its pull request, a commit pushed directly for itself. The first ``--split``
   of that sequence is the past; the rest is reviewed.
2. Memories from the past: every commit (merged branches included) dated before the split whose
   subject says it fixes something (``fix``, ``bug``, ``regression``, ``crash``, ``broken``,
   ``typo`` excluded), touching 1 to 8 files and at most 400 lines, becomes one ``problem``
   memory: its subject and the first paragraph of its body, evidence ``commit:SHA`` and up to
   six ``file:PATH@SHA#La-Lb``: the lines each hunk left in the fix commit (a pure deletion
   cites the two lines around it). Written straight into ``.memory/`` of the clone (not
   committed), dated as the commit.
   With ``--reverts``, also every revert dated before the split (``Revert "SUBJECT"``, the
   reverted commit found by its ``This reverts commit SHA`` line) becomes a ``problem`` (the
   revert's subject and the first paragraph of its body that is not git's line, citing the
   lines the revert left, as above) and a ``failed_tactic`` linked to it: the reverted commit's
   subject and first paragraph, "tried and reverted", evidence ``commit:SHA`` of both. A
   history's reverts are its failed tactics; section 2 shows a failed tactic with no code
   anchor, so these show how often that is noise.
3. Each of ``--sample`` changes from the reviewed part, evenly spaced from ``--offset``
   (deterministic; another offset is another sample, for checking a rule on changes it was not
   written from), is reviewed
   as a pull request: ``review(base=C^1, head=C)``, with the commit's subject as title and its
   body as body (a merge: the first line of its body, GitHub's PR title), through the same
   library call the CLI makes, after every memory has its vector (so the times are of the
   analysis, not of Python start-up or a cold index: bench/review_speed.py times those).
4. Section 1 against an oracle that shares no code with it: each memory citing a file the change
   touches has its cited lines carried from the fix commit to C^1 with Python's difflib (not
   git's diff), then compared with C^1 -> C by difflib again. The memory *should be flagged* when
   at least one cited line that still stands, unchanged, at C^1 is replaced or deleted by C
   (blank lines are not counted: they say nothing, and difflib pairs them across a file).
   Precision: share of flagged memories that should be; recall: share of those that should be
   that are flagged. A flag on lines already rewritten before C, or on an insertion inside the
   cited block that replaces none of its lines, counts against precision here.
5. Section 2 has no oracle: ``--judge`` reviews that have seen-before hits are printed, sampled
   evenly over the reviewed changes that have any, each hit with why it was shown, for a person
   to accept or reject.
6. Also: the share of changes with nothing to say, the sizes of the Markdown comment, and the
   time per review. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FIX = re.compile(r"\b(fix(e[sd])?|bug|regression|crash(es|ed)?|broken)\b", re.I)
NOT_FIX = re.compile(r"\btypos?\b|\bspelling\b", re.I)
MAX_FILES = 8
MAX_LINES = 400
MAX_REFS = 6


def git(repo: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=False,
                          errors="replace")
    if check and proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args[:3])}: {proc.stderr[-300:]}")
    return proc.stdout


class Blobs:
    """File contents at commits, through one ``git cat-file --batch``."""

    def __init__(self, repo: Path) -> None:
        self.proc = subprocess.Popen(["git", "cat-file", "--batch"], cwd=repo, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE)
        self.cache: dict[tuple[str, str], list[str] | None] = {}

    def lines(self, rev: str, path: str) -> list[str] | None:
        key = (rev, path)
        if key not in self.cache:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(f"{rev}:{path}\n".encode())
            self.proc.stdin.flush()
            head = self.proc.stdout.readline().split()
            if len(head) < 3 or head[1] == b"missing":
                self.cache[key] = None
            else:
                data = self.proc.stdout.read(int(head[2]) + 1)[:-1]
                self.cache[key] = data.decode("utf-8", "replace").split("\n")
        return self.cache[key]


# -- memories from the past --------------------------------------------------------------------------
def fix_commits(repo: Path, before: int) -> list[dict[str, Any]]:
    out = []
    log = git(repo, "log", "--no-merges", f"--before={before}", "--format=%x01%H%x02%ct%x02%an%x02%s%x02%b")
    for rec in log.split("\x01")[1:]:
        sha, ts, author, subject, body = (rec.split("\x02") + [""] * 5)[:5]
        if FIX.search(subject) and not NOT_FIX.search(subject):
            out.append({"sha": sha, "ts": int(ts), "author": author, "subject": subject.strip(),
                        "body": body.strip()})
    return out


def hunks_of(repo: Path, sha: str) -> dict[str, list[tuple[int, int, int, int]]] | None:
    text = git(repo, "show", "-U0", "--no-renames", "--format=", "--no-color", sha, check=False)
    files: dict[str, list[tuple[int, int, int, int]]] = {}
    cur: str | None = None
    changed = 0
    for line in text.split("\n"):
        if line.startswith("+++ "):
            cur = line[6:] if line.startswith("+++ b/") else None
        elif line.startswith("@@") and cur is not None:
            m = re.match(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", line)
            if m:
                o, oc, n, nc = int(m[1]), int(m[2] or 1), int(m[3]), int(m[4] or 1)
                files.setdefault(cur, []).append((o, oc, n, nc))
                changed += oc + nc
    if not files or len(files) > MAX_FILES or changed > MAX_LINES:
        return None
    return files


def build_memories(repo: Path, fixes: list[dict[str, Any]]) -> int:
    from memstore.store import ids as idmod
    from memstore.store.config import Config
    from memstore.store.disk import Store
    from memstore.store.model import Memory

    config = Config().with_overrides({"git": {"stage": False, "commit": False}})
    store = Store(root=repo / ".memory", scope="repo", config=config, worktree=None)
    store.init()
    made = 0
    for fx in fixes:
        files = hunks_of(repo, fx["sha"])
        if files is None:
            continue
        refs = []
        for path, hks in sorted(files.items()):
            for _o, _oc, n, nc in hks:
                a, b = (n, n + nc - 1) if nc > 0 else (max(n, 1), n + 1)
                refs.append(f"file:{path}@{fx['sha'][:12]}#L{a}-L{b}")
        para = fx["body"].split("\n\n", 1)[0].replace("\n", " ").strip()
        if para.lower().startswith(("signed-off", "co-authored")):
            para = ""
        text = fx["subject"] + (f". {para}" if para else "")
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(fx["ts"]))
        mem = Memory(id=idmod.new_id(), kind="problem", text=text[:600], scope="repo", created=created,
                     author=fx["author"][:60] or "unknown", evidence=[f"commit:{fx['sha'][:12]}", *refs[:MAX_REFS]],
                     links={}, tags=["from-history"])
        store.create_memory(mem)
        made += 1
    return made


REVERTS = re.compile(r"This reverts commit ([0-9a-f]{7,40})")


def revert_commits(repo: Path, before: int) -> list[dict[str, Any]]:
    out = []
    log = git(repo, "log", "--no-merges", f"--before={before}", "--format=%x01%H%x02%ct%x02%an%x02%s%x02%b")
    for rec in log.split("\x01")[1:]:
        sha, ts, author, subject, body = (rec.split("\x02") + [""] * 5)[:5]
        m = REVERTS.search(body)
        if not subject.startswith('Revert "') or m is None:
            continue
        reverted = git(repo, "show", "-s", "--format=%H%x02%s%x02%b", m.group(1), check=False).split("\x02")
        if len(reverted) < 3:
            continue
        out.append({"sha": sha, "ts": int(ts), "author": author, "subject": subject.strip(), "body": body.strip(),
                    "tried": reverted[0].strip(), "tried_subject": reverted[1].strip(),
                    "tried_body": reverted[2].strip()})
    return out


def _para(body: str) -> str:
    for para in body.split("\n\n"):
        para = para.replace("\n", " ").strip()
        if para and not REVERTS.search(para) and not para.lower().startswith(("signed-off", "co-authored")):
            return para
    return ""


def build_tactics(repo: Path, reverts: list[dict[str, Any]]) -> int:
    from memstore.store import ids as idmod
    from memstore.store.config import Config
    from memstore.store.disk import Store
    from memstore.store.model import Memory

    config = Config().with_overrides({"git": {"stage": False, "commit": False}})
    store = Store(root=repo / ".memory", scope="repo", config=config, worktree=None)
    made = 0
    for rv in reverts:
        files = hunks_of(repo, rv["sha"])
        if files is None:
            continue
        refs = [f"file:{path}@{rv['sha'][:12]}#L{a}-L{b}" for path, hks in sorted(files.items())
                for _o, _oc, n, nc in hks for a, b in [(n, n + nc - 1) if nc > 0 else (max(n, 1), n + 1)]]
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(rv["ts"]))
        why = _para(rv["body"])
        problem = Memory(id=idmod.new_id(), kind="problem", text=(rv["subject"] + (f". {why}" if why else ""))[:600],
                         scope="repo", created=created, author=rv["author"][:60] or "unknown",
                         evidence=[f"commit:{rv['sha'][:12]}", *refs[:MAX_REFS]], links={}, tags=["from-history"])
        store.create_memory(problem)
        what = _para(rv["tried_body"])
        tactic = Memory(id=idmod.new_id(), kind="failed_tactic",
                        text=(f"Tried and reverted: {rv['tried_subject']}" + (f". {what}" if what else ""))[:600],
                        scope="repo", created=created, author=rv["author"][:60] or "unknown",
                        evidence=[f"commit:{rv['tried'][:12]}", f"commit:{rv['sha'][:12]}"],
                        links={"problem": problem.id}, tags=["from-history"])
        store.create_memory(tactic)
        made += 1
    return made


# -- the oracle --------------------------------------------------------------------------------------
def carry(old: list[str], new: list[str], lines: set[int]) -> dict[int, int]:
    """Old line number -> new line number for the lines of ``lines`` difflib keeps equal."""
    out: dict[int, int] = {}
    sm = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, _j2 in sm.get_opcodes():
        if tag == "equal":
            for k in range(i1, i2):
                if k + 1 in lines:
                    out[k + 1] = j1 + (k - i1) + 1
    return out


def should_flag(blobs: Blobs, mem: Any, parent: str, commit: str, changed: set[str]) -> bool:
    from memstore.store.model import parse_evidence

    for raw in mem.evidence:
        if not raw.startswith("file:"):
            continue
        ref = parse_evidence(raw)
        if ref.path not in changed or ref.lines is None or ref.rev is None:
            continue
        at_rev, at_parent, at_commit = (blobs.lines(ref.rev, ref.path), blobs.lines(parent, ref.path),
                                        blobs.lines(commit, ref.path))
        if at_rev is None or at_parent is None:
            continue
        standing = carry(at_rev, at_parent, set(range(ref.lines[0], ref.lines[1] + 1)))
        # a blank line says nothing a memory could cite (and difflib pairs blank lines far apart)
        standing = {k: v for k, v in standing.items() if at_parent[v - 1].strip()}
        if not standing:
            continue
        if at_commit is None:
            return True  # the file is deleted
        kept = carry(at_parent, at_commit, set(standing.values()))
        if any(v not in kept for v in standing.values()):
            return True
    return False


# -- the run -----------------------------------------------------------------------------------------
def pct(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", required=True, help="a git repository or bundle")
    ap.add_argument("--sample", type=int, default=150, help="changes reviewed, evenly spaced (default 150)")
    ap.add_argument("--offset", type=int, default=0,
                    help="start the even sample this many changes in (another sample of the same history)")
    ap.add_argument("--split", type=float, default=0.7, help="share of the history that is the past")
    ap.add_argument("--judge", type=int, default=20, help="seen-before hits printed for judging")
    ap.add_argument("--reverts", action="store_true",
                    help="also a problem and a failed tactic from each revert before the split")
    ap.add_argument("--json-out", metavar="FILE")
    a = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="msevalreview-", dir="/tmp"))
    t_start = time.perf_counter()
    try:
        clone = work / "repo"
        subprocess.run(["git", "clone", "-q", str(Path(a.repo).resolve()), str(clone)], check=True)
        seq = git(clone, "rev-list", "--first-parent", "--reverse", "HEAD").split()
        cut = int(len(seq) * a.split)
        split_ts = int(git(clone, "show", "-s", "--format=%ct", seq[cut]).strip())
        later = seq[cut + 1:]
        step = max(1, len(later) // a.sample) if a.sample else 1
        sampled = later[a.offset::step][: a.sample]
        fixes = fix_commits(clone, split_ts)
        t0 = time.perf_counter()
        made = build_memories(clone, fixes)
        tactics = build_tactics(clone, revert_commits(clone, split_ts)) if a.reverts else 0
        print(f"# {len(seq)} first-parent changes; past: the first {cut} (to "
              f"{time.strftime('%Y-%m-%d', time.gmtime(split_ts))}); {len(fixes)} fix commits there, {made} memories "
              f"({time.perf_counter() - t0:.1f} s); {tactics} reverts as failed tactics; reviewing "
              f"{len(sampled)} of the {len(later)} later changes "
              f"(every {step}th from {a.offset})", flush=True)

        from memstore import gitops
        from memstore.store.workspace import open_workspace
        from memstore.surfaces import reviewfmt
        from memstore.verbs.review import review

        gitops.toplevel.cache_clear()
        ws = open_workspace(cwd=clone)
        from memstore.read.indexes import reindex

        t0 = time.perf_counter()
        reindex(ws)  # every memory embedded first: the review's read at its best, not a cold partial one
        print(f"# embedded the memories in {time.perf_counter() - t0:.1f} s", flush=True)
        mems = ws.catalog("repo").memories
        blobs = Blobs(clone)
        tp = fp = fn = 0
        rows: list[dict[str, Any]] = []
        for i, sha in enumerate(sampled):
            parents = git(clone, "rev-list", "--parents", "-n", "1", sha).split()[1:]
            if not parents:
                continue
            parent = parents[0]
            subject, _, body = git(clone, "show", "-s", "--format=%s%x00%b", sha).partition("\x00")
            # a merge stands for its PR: the first line of its body is the PR's title on GitHub
            title = (body.strip().split("\n", 1)[0] or subject) if len(parents) > 1 else subject
            t = time.perf_counter()
            ans = review(ws, parent, sha, title=title.strip(), body=body.strip())
            dt = time.perf_counter() - t
            md = reviewfmt.markdown(ans)
            changed = set(ans["changed_files"])
            flagged = {e["id"] for e in ans["sections"].get("touched", [])}
            cand = [m for m in mems.values() if any(r.startswith("file:") and r[5:].split("@")[0].split("#")[0]
                                                     in changed for r in m.evidence)]
            truth = {m.id for m in cand if should_flag(blobs, m, parent, sha, changed)}
            tp += len(flagged & truth)
            fp += len(flagged - truth)
            fn += len(truth - flagged)
            rows.append({"sha": sha[:12], "title": title.strip()[:100], "seconds": round(dt, 3),
                         "nothing": ans["nothing_to_say"], "chars": len(md) if not ans["nothing_to_say"] else 0,
                         "flagged": len(flagged), "should": len(truth), "right": len(flagged & truth),
                         "seen": [(s["id"], s["kind"], s["text"][:160], s["score"], s.get("reason"))
                                  for s in ans["sections"].get("seen_before", [])]})
            if (i + 1) % 25 == 0:
                print(f"# {i + 1}/{len(sampled)} reviewed", flush=True)

        with_seen = [r for r in rows if r["seen"]]
        pick = with_seen[:: max(1, len(with_seen) // a.judge)][: a.judge] if with_seen else []
        print(f"\n## seen before: {len(pick)} of the {len(with_seen)} reviews that have any, for judging")
        for n, r in enumerate(pick, 1):
            print(f"{n:2d}. change {r['sha']}: {r['title']}")
            for s in r["seen"]:
                why = f" [{s[4]}]" if s[4] else ""
                print(f"    -> {s[1]} (score {s[3]}){why}: {s[2]}")

        secs = [r["seconds"] for r in rows]
        sizes = [r["chars"] for r in rows if not r["nothing"]]
        out = {
            "repo": Path(a.repo).name, "changes": len(seq), "past": cut, "memories": made, "failed_tactics": tactics,
            "reviewed": len(rows),
            "touched": {"flagged": tp + fp, "should": tp + fn, "right": tp,
                        "precision": round(tp / (tp + fp), 3) if tp + fp else None,
                        "recall": round(tp / (tp + fn), 3) if tp + fn else None,
                        "reviews_with_flags": sum(1 for r in rows if r["flagged"])},
            "seen_before": {"reviews_with_hits": len(with_seen), "hits": sum(len(r["seen"]) for r in rows),
                            "failed_tactic_hits": sum(1 for r in rows for x in r["seen"] if x[1] == "failed_tactic")},
            "nothing_to_say": round(sum(1 for r in rows if r["nothing"]) / len(rows), 3) if rows else None,
            "comment_chars": {"p50": pct(sizes, 50), "p90": pct(sizes, 90), "max": max(sizes, default=0)},
            "seconds_per_review": {"p50": round(pct(secs, 50), 3), "p90": round(pct(secs, 90), 3),
                                   "max": round(max(secs, default=0), 3)},
            "total_seconds": round(time.perf_counter() - t_start, 1),
        }
        t = out["touched"]
        print(f"\n## section 1: {t['flagged']} flags, {t['right']} right (precision {t['precision']}), "
              f"{t['should']} should have been (recall {t['recall']}), in {t['reviews_with_flags']} reviews")
        print(f"## nothing to say: {out['nothing_to_say']}; comment chars p50 {out['comment_chars']['p50']}, "
              f"p90 {out['comment_chars']['p90']}, max {out['comment_chars']['max']}; seconds per review p50 "
              f"{out['seconds_per_review']['p50']}, p90 {out['seconds_per_review']['p90']}")
        if a.json_out:
            Path(a.json_out).write_text(json.dumps({**out, "rows": rows}, indent=1))
        print(json.dumps(out))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
