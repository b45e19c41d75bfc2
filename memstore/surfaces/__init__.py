"""How people and agents reach memstore: CLI, daemon, MCP server, git and agent hooks.
Each parses, calls one verb, renders, and maps typed errors at its one boundary."""
