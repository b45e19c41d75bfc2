"""The canonical side: memory and event files, their model, parsing, the one writer
(``disk.Store``), catalog, link graph, episodes, config. Knows nothing of indexes
(ARCHITECTURE.md)."""
