"""What memstore does with git beyond committing its own writes: hooks, the staged-blob
check, review diffs, staleness, sync. Every git command itself runs in ``memstore.gitops``."""
