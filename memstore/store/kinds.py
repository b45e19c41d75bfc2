"""The vocabulary of memstore: kinds, scopes, event types, episode sources, git hooks. A leaf module with no imports, so
the thin CLI client can name them without loading anything else."""

KINDS = ("problem", "solution", "failed_tactic", "fact", "preference", "change")
SCOPES = ("repo", "global")
EVENT_TYPES = ("utility_vote", "archive", "fact_update_link", "link")
KIND_DIRS = {
    "problem": "problems",
    "solution": "solutions",
    "failed_tactic": "failed_tactics",
    "fact": "facts",
    "preference": "preferences",
    "change": "changes",
}
DIR_KINDS = {v: k for k, v in KIND_DIRS.items()}
EVIDENCE_KINDS = ("event", "commit", "file", "repo", "memory", "user", "url")
LINK_KEYS = ("problem", "related", "relations", "change_targets", "supersedes", "via_change")
LIST_LINKS = ("related", "change_targets", "supersedes")
# Typed links between memories (links.relations): ``related`` is read as ``relates_to``.
RELATION_TYPES = ("relates_to", "elaborates_on", "depends_on", "contradicts")
# A memory that elaborates on or depends on another is shown next to it when both are read.
ATTACHING = ("elaborates_on", "depends_on")
EPISODE_SOURCES = ("user", "assistant", "tool", "git", "memstore", "note")  # who produced an episode event
HOOK_NAMES = ("pre-commit", "post-commit", "post-merge", "post-checkout")  # the git hooks memstore installs
AGENTS = ("claude", "codex", "cursor", "generic", "github")  # what `memstore integrate` wires memstore into
# What the agent hooks `integrate` writes run: `memstore integrate <agent> --hook <event>`.
AGENT_HOOK_EVENTS = ("session-start", "prompt", "file", "tool", "compact", "stop", "end")
