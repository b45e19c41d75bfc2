"""Terminal text for the verbs' answers that ``output.pretty`` does not render itself: a pure
function from answer to text each, chosen by the surface that ran the verb. ``output`` makes
control and bidi characters visible in whatever these return."""

from __future__ import annotations

import json
import textwrap
from typing import Any

from ..store.relations import doubt_label


def _short100(text: str, n: int = 100) -> str:
    one = " ".join(text.split())
    return one if len(one) <= n else one[: n - 1] + "…"


# -- diff (memstore diff) ----------------------------------------------------------------------------
def _wrap96(text: str, indent: str = "    ") -> str:
    return "\n".join(textwrap.fill(p, 96, initial_indent=indent, subsequent_indent=indent) or indent
                     for p in text.splitlines() or [""])


def _flag(e: dict[str, Any]) -> str:
    return "" if e.get("committed") else "  [not committed]"


def _render_link(link: dict[str, Any]) -> str:
    word = link["type"].replace("_", " ")
    what = _wrap96(link["text"][:300], "      > ") if link.get("text") else "      (no such memory)"
    return f"  {word} {link['id']}:\n{what}"


def diff(answer: dict[str, Any]) -> str:
    s = answer["summary"]
    out = [f"memstore diff {answer['base']} (merge-base {answer['merge_base'][:10]}): {s['memories']} memor"
           f"{'y' if s['memories'] == 1 else 'ies'}, {s['events']} event(s), {s['episodes']} episode(s)"]
    for m in answer["memories"]:
        provisional = " (id written by the pre-commit hook)" if m.get("id_is_provisional") else ""
        out.append(f"\n+ {m['kind']} {m['id']}{provisional}  [{m['scope']}, by {m.get('author') or '?'}, "
                   f"confidence {m.get('confidence', '-')}]{_flag(m)}"
                   + ("  LOW CONFIDENCE: confirm or archive" if m.get("review") else ""))
        out.append(f"  {m['path']}")
        out.append(_wrap96(m["text"]))
        plain = {k: v for k, v in (m.get("links") or {}).items() if k not in ("relations", "related")}
        if plain:
            out.append("  links: " + ", ".join(f"{k}={json.dumps(v)}" for k, v in plain.items()))
        for link in m.get("relations", []):
            out.append(_render_link(link))
        if m.get("evidence"):
            out.append("  evidence: " + ", ".join(m["evidence"]))
        if m.get("rationale"):
            out.append(f"  rationale: {m['rationale']}")
        if m.get("tags"):
            out.append(f"  tags: {', '.join(m['tags'])}")
    for e in answer["events"]:
        what = {"utility_vote": f"vote {e.get('vote') or 0:+g} on {e.get('memory')}"
                + (f" (problem {e['problem']})" if e.get("problem") else ""),
                "archive": f"{'archive' if e.get('archived') else 'unarchive'} {e.get('memory')}",
                "fact_update_link": f"fact {e.get('old_fact')} -> {e.get('new_fact')} via change {e.get('change')}",
                "link": f"link {e.get('memory')} {e.get('relation')} {e.get('target')}",
                }.get(e["type"], e["type"])
        out.append(f"\n+ event {e['id']}: {what}{_flag(e)}")
        if e.get("target_text"):
            out.append(_wrap96(e["target_text"][:300], "    > "))
        if e.get("link"):
            out.append(_render_link(e["link"]))
        if e.get("rationale"):
            out.append(f"  rationale: {e['rationale']}")
        if e.get("evidence"):
            out.append("  evidence: " + ", ".join(e["evidence"]))
    for ep in answer["episodes"]:
        verb = "new episode" if ep["status"] == "A" else "episode"
        out.append(f"\n+ {verb} {ep['episode']} ({ep.get('agent')}): {ep['events']} event(s), "
                   f"{ep['new_rows']} new row(s){_flag(ep)}  {ep.get('task') or ''}".rstrip())
    for p in answer["problems"]:
        out.append(f"\n! {p['path']}: {p['message']}")
    return "\n".join(out) + "\n"


# -- the agent loop -------------------------------------------------------------------------------
def context(answer: dict[str, Any]) -> str:
    """The session start's text for a person at a terminal: every memory in full (each line
    quoted, as the hooks quote memory text), then the index of what did not fit, to fetch with
    ``memstore show``. The agents' guidance is left out: it is in the JSON an agent reads."""
    out = [f"write mode: {answer['write_mode']}"
           + (f"; episode {answer['episode']}" if answer.get("episode") else "; no episode open")]
    for title, key in (("Relevant to " + repr(answer.get("query") or ""), "relevant"), ("Preferences", "preferences"),
                       ("Current facts", "facts"),
                       ("Disputed (they contradict each other: settle against the code, never pick one silently)",
                        "disputed"),
                       ("Failed tactics (watch-outs)", "failed_tactics"),
                       ("Open problems", "open_problems"), ("Recent changes", "recent_changes"),
                       ("History (failed before; a later solution worked)", "tactics_history")):
        items = answer.get(key) or []
        if not items:
            continue
        out.append(f"\n{title}:")
        for m in items:
            out.append(f"  [{m['kind']} {m['id']}]{doubt_label(m.get('doubts'))}")
            out.extend("  | " + line for line in str(m["text"]).splitlines() or [""])
    if answer.get("index"):
        out.append("\nAlso known (not shown in full; `memstore show <id>`):")
        out.extend(f"  {e['kind']:<13} {e['id']}  {e['first_line']}" for e in answer["index"])
    if answer.get("not_listed"):
        out.append(f"  ... and {answer['not_listed']} more (`memstore list`)")
    if answer.get("note"):
        out.append(f"\n{answer['note']}")
    return "\n".join(out) + "\n"


def agent_context(answer: dict[str, Any]) -> str:
    """The session start as an agent's hook injects it: the guidance first, then ``context``."""
    return f"{answer['guidance']}\n{context(answer)}"


def reflect(answer: dict[str, Any]) -> str:
    h = answer.get("header") or {}
    out = [f"Episode {answer['episode']}  agent {h.get('agent')}  started {h.get('started')}"
           + (f"  ended {answer['ended'].get('ended')} ({answer['ended'].get('outcome')})" if answer.get("ended")
              else "  (open)"),
           f"task: {h.get('task') or '-'}", "", "Events:"]
    for e in answer["events"]:
        out.append(f"  {e['ref'].rsplit(':', 1)[1]:>4} {e['source']:<9} {_short100(str(e['content']), 110)}")
    if answer.get("written"):
        out.append("\nWritten in the session (not to vote on):")
        out.extend(f"  {m['kind']:<13} {m['id'][:10]}  {_short100(m['text'], 90)}" for m in answer["written"])
    out.append("\nMemories read during the session (vote: +1 helped, -1 misled):")
    if not answer["reads"]:
        out.append("  (none)")
    for r in answer["reads"]:
        out.append(f"  {r.get('kind', '?'):<13} {r['id'][:10]}  {_short100(r.get('text', '(no longer exists)'), 90)}")
        out.append(f"      {json.dumps(r['vote'])}")
    out.append("\nChecklist:")
    for c in answer["checklist"]:
        out.append(f"- {c['item']}: {c['ask']}")
        if c["template"]:
            out.append(f"      {json.dumps(c['template'])}")
    out.append(f"\n{answer['mode_note']}")
    out.append(answer["next"])
    return "\n".join(out) + "\n"


def episode_log(ans: dict[str, Any]) -> str:
    extra = f"  (truncated; sha256 {ans['sha256'][:12]})" if ans.get("truncated") else ""
    return f"{ans['ref']}{extra}\n"


def episode(ans: dict[str, Any]) -> str:
    h = ans.get("header") or {}
    out = [f"episode {ans['episode']}  agent {h.get('agent')}  started {h.get('started')}"
           + ("  (current)" if ans.get("current") else ""), f"task: {h.get('task') or '-'}", f"path: {ans['path']}"]
    for e in ans["events"]:
        text = " ".join(str(e.get("content", "")).split())
        out.append(f"{e['seq']:>4} {e.get('ts', '')} {e.get('source', ''):<9} {text[:120]}")
    if ans.get("ended"):
        out.append(f"ended {ans['ended'].get('ended')}: {ans['ended'].get('outcome') or '-'}")
    return "\n".join(out) + "\n"


def episodes(ans: dict[str, Any]) -> str:
    out = []
    for e in ans["episodes"]:
        state = "current" if e["current"] else (e.get("outcome") or "ended") if e.get("ended") else "open"
        local = " local" if e["local_only"] else ""
        out.append(f"{e['episode']}  {e.get('started') or '':<20} {e['events']:>4} events  {state}{local}  "
                   f"{e.get('agent') or ''}: {(e.get('task') or '')[:60]}")
    out.append(f"{ans['count']} episode(s)")
    return "\n".join(out) + "\n"


def hooks(ans: dict[str, Any]) -> str:
    out = [f"hooks in {ans['hooks_dir']}"]
    for h in ans["hooks"]:
        legacy = " (+ previous hook kept as .legacy, runs first)" if h.get("legacy") else ""
        out.append(f"  {h['hook']:<14} {h['state']}{legacy}")
    return "\n".join(out) + "\n"


# -- integrate, sync --------------------------------------------------------------------------------
def integrate(answer: dict[str, Any]) -> str:
    """The answer on a terminal (``output.pretty`` makes control characters visible)."""
    verb = "integrated" if answer["action"] == "install" else "removed"
    out = [f"memstore {verb} for {answer['agent']} in {answer['repo']}"]
    for f in answer["files"]:
        out.append(f"  {f['state']:<10} {f['path']:<28} {f['what']}")
    if "store" in answer:
        out.append(f"  {answer['store']['state']:<10} {answer['store']['path']:<28} the repo's memory store")
    hooks_ = answer["git_hooks"].get("hooks")
    if hooks_:
        out.append("  git hooks: " + ", ".join(f"{k} {v}" for k, v in hooks_.items()))
    else:
        out.append(f"  git hooks: {answer['git_hooks'].get('state')}")
    if answer.get("undo"):
        out.append(f"undo with `{answer['undo']}`")
    return "\n".join(out) + "\n"


def sync(answer: dict[str, Any]) -> str:
    """The answer on a terminal."""
    sync_part = answer.get("sync", answer)
    lines = [] if sync_part.get("global_synced", True) else [f"  warning: {w}" for w in sync_part.get("warnings", [])]
    for shared in answer.get("shared", []):
        state = ("offline" if shared["offline"] else "diverged, left as it is" if shared["diverged"]
                 else f"received {shared['received']} file(s)")
        lines.append(f"shared {shared['name']}: {state}" + (f" ({shared['problem']})" if shared.get("problem") else ""))
    if not sync_part.get("global_synced", True):
        return "\n".join(lines) + "\n"
    if "sync" in answer:
        lines.append(("cloned " if answer.get("cloned") else "set up ") + f"{answer['root']} with remote "
                     f"{answer['url']}")
    state = "offline: nothing pushed" if sync_part.get("offline") else "synced"
    lines.append(f"{state}: {sync_part['root']} <-> {sync_part['url']} ({sync_part['branch']})")
    lines.append(f"  committed {sync_part['committed']} file(s), received {sync_part['received']} file(s), "
                 f"pushed {sync_part['pushed']} commit(s)" + (" after one retry" if sync_part.get("retried") else ""))
    if sync_part.get("offline"):
        lines.append(f"  {sync_part['unpushed']} commit(s) wait for the next sync")
    if sync_part.get("pending"):
        n = sync_part["pending"]
        lines.append(f"  {n} proposed memor{'y waits' if n == 1 else 'ies wait'} for approval and did not sync: "
                     "`memstore pending` lists them, `memstore approve ID` commits one for the next sync")
    lines += [f"  warning: {w}" for w in sync_part.get("warnings", [])]
    return "\n".join(lines) + "\n"


# -- read --explain / --expect ----------------------------------------------------------------------
def _gate_text(g: dict[str, Any]) -> str:
    if g["gate"] == "query":
        return f"query best {g['top_similarity']:.2f} vs bar {g['bar']:.2f} ({g['how']})"
    if g["gate"] == "result_floor":
        return f"score {g['score']:.2f} >= bar {g['bar']:.2f}"
    if g["gate"] == "relative_gap":
        return f"no drop of {g['drop']:.2f} before it"
    if g["gate"] == "limit":
        return f"position {g['position']} of limit {g['limit']}"
    return str(g.get("how", g["gate"]))


def read_explain(ex: dict[str, Any]) -> list[str]:
    """The lines ``read --explain`` adds under one result."""
    ln, out = ex["lanes"], []
    parts = []
    if ln.get("vector"):
        v = ln["vector"]
        parts.append(f"vector {v['similarity']:.2f} (#{v['rank']})")
    if ln.get("keyword"):
        k = ln["keyword"]
        cover = f", covers {k['coverage']:.0%} of the query" if k.get("coverage") is not None else ""
        parts.append(f"keyword {k['bm25']:.2f} of best (#{k['rank']}{cover})")
    if ln.get("fused") is not None:
        parts.append(f"fused {ln['fused']:.2f}")
    out.append(f"    lanes: {' · '.join(parts) or 'none (brought by a link)'}")
    out.append(f"    gates: {' · '.join(_gate_text(g) for g in ex['gates'])}")
    steps = []
    for s in ex["steps"]:
        if s["step"] == "link":
            steps.append(f"link {s['type']} from {s['from'][:10]}")
        elif s["step"] == "association":
            steps.append(f"association from {s['from'][:10]} ({s['similarity']:.2f})")
        elif s["step"] == "supersedes":
            steps.append(f"replaces {s['replaces'][:10]}")
        else:
            steps.append(s["step"])
    out.append(f"    brought by: {', '.join(steps)}")
    v, sc = ex["votes"], ex.get("scores", {})
    if v["count"]:
        moved = f" ({sc['after_links']:.2f} -> {sc['final']:.2f})" if "final" in sc and "after_links" in sc else ""
        out.append(f"    votes: {v['count']} vote(s), U_local {v['local']:+.2f}, U_global {v['global']:+.2f}: "
                   f"score x{v['factor']:.2f}{moved}")
    return out


def read_expected(entries: list[dict[str, Any]]) -> list[str]:
    """The lines ``read --expect`` adds after the results."""
    out = []
    for e in entries:
        state = (f"returned at position {e['position']}" if e["returned"]
                 else f"not returned ({e['why'].replace('_', ' ')})")
        out.append(f"\nexpected {e['kind']} {e['id'][:10]}: {state}")
        if not e["returned"]:
            out.append(_wrap96(e["detail"]))
    return out


# -- eval (memstore eval) ----------------------------------------------------------------------------
_SYSTEM_NAMES = {"memstore": "memstore read", "keyword_only": "keyword lane alone", "vector_only": "vector lane alone"}


def _settings(overrides: dict[str, Any]) -> list[str]:
    return [f"read.{k}.{kk}={vv}" for k, v in overrides.items() if isinstance(v, dict) for kk, vv in v.items()] + [
        f"read.{k}={v}" for k, v in overrides.items() if not isinstance(v, dict)]


def evaluation(answer: dict[str, Any]) -> str:
    n = answer["queries"]
    if not n:
        return f"0 queries: {answer['message']}\n"
    src = answer["sources"]
    out = [f"memstore eval: {n} quer{'y' if n == 1 else 'ies'} (problems' texts; {src['links']} with linked "
           f"solutions or failed tactics, {src['votes']} with memories voted up), "
           f"{answer['expected_answers']} expected answers"]
    ks = answer["k"]
    for run in answer["runs"]:
        label = ", ".join(_settings(run["overrides"])) or "the settings in force"
        out.append(f"\n{label}:")
        out.append(f"  {'':<20}" + "".join(f"{'recall@' + str(k):>10}" for k in ks)
                   + f"{'MRR':>8}{'empty':>8}{'n':>6}")
        for name, m in run["systems"].items():
            if m is None:
                out.append(f"  {_SYSTEM_NAMES.get(name, name):<20}  (not available)")
                continue
            out.append(f"  {_SYSTEM_NAMES.get(name, name):<20}" + "".join(f"{m[f'recall@{k}']:>10.2f}" for k in ks)
                       + f"{m['mrr']:>8.2f}{m['abstained']:>8}{m['n']:>6}")
    if n < 20:
        out.append(f"\nOnly {n} quer{'y' if n == 1 else 'ies'}: one query moves recall by {1 / n:.2f}; "
                   "read the figures as a smoke test, not a verdict.")
    return "\n".join(out) + "\n"


# -- history ------------------------------------------------------------------------------------------
def _refs(entry: dict[str, Any]) -> str:
    return f" (evidence: {', '.join(entry['evidence'])})" if entry.get("evidence") else ""


def _happened(t: dict[str, Any]) -> str:
    what, by = t["what"], t.get("by") or "?"
    if what == "created":
        where = "".join(f", {k} {t[k]}" for k in ("episode", "commit") if t.get(k))
        return f"created by {by}{where}" + ("" if t.get("commit") else " (not committed yet)")
    if what == "vote":
        problem = f" for problem {t['problem'][:10]}" if t.get("problem") else ""
        return f"vote {t.get('vote') or 0:+g} by {by}{problem}{_refs(t)}"
    if what in ("archived", "unarchived"):
        why = f": {t['why']}" if t.get("why") else ""
        return f"{what} by {by}{why}{_refs(t)}"
    if what == "link":
        return f"link {str(t.get('source'))[:10]} {t.get('relation')} {str(t.get('target'))[:10]} by {by}{_refs(t)}"
    if what == "fact_update_link":
        return (f"fact {str(t.get('old_fact'))[:10]} -> {str(t.get('new_fact'))[:10]} via change "
                f"{str(t.get('change'))[:10]} by {by}{_refs(t)}")
    return f"{what}: {t.get('kind')} {str(t.get('memory'))[:10]} by {by}"


def history(answer: dict[str, Any]) -> str:
    """``memstore history`` on a terminal: the memory, then what happened to it, oldest first."""
    m, c = answer["memory"], answer["created"]
    commit = c.get("commit")
    out = [f"{m['kind']} {m['id']}  ({m['scope']})  {m['path']}",
           _wrap96(_short100(m["text"], 300)),
           f"  created {c.get('at') or '?'} by {c.get('by') or '?'}"
           + (f" in episode {', '.join(c['episodes'])}" if c.get("episodes") else "")
           + (f"; commit {commit['sha'][:12]} by {commit['author']} {commit['date']}: {commit['subject']}"
              if commit else "; not committed yet")]
    links = {k: v for k, v in (answer.get("links") or {}).items() if k != "relations"}
    if links:
        out.append("  links: " + ", ".join(f"{k}={json.dumps(v)}" for k, v in links.items()))
    rels = answer.get("relations") or {}
    out += [f"  {e['type']} -> {e['id']}" for e in rels.get("out", [])]
    out += [f"  {e['type']} <- {e['id']}" for e in rels.get("in", [])]
    for key in ("solutions", "failed_tactics", "changes"):
        if answer.get(key):
            out.append(f"  {key.replace('_', ' ')}: {', '.join(answer[key])}")
    sup = answer.get("supersession") or {}
    if sup.get("supersedes"):
        out.append(f"  supersedes: {', '.join(sup['supersedes'])}")
    if sup.get("chain"):
        out.append(f"  superseded by: {' -> '.join(sup['chain'])} (current: {sup['head']})")
    u = answer.get("utility") or {}
    out.append(f"  utility: {u.get('global', 0):+.2f} from {u.get('votes', 0)} vote(s)")
    arch = answer.get("archived")
    out.append(f"  archived by {arch['by']} at {arch['at']}" + (f": {arch['why']}" if arch.get("why") else "")
               if arch else "  active (not archived)")
    out.append("\nHistory, oldest first:")
    out += [f"  {t.get('at') or '?':<20}  {_happened(t)}" for t in answer["timeline"]]
    return "\n".join(out) + "\n"
