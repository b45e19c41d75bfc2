"""The library API each command calls: validates a request, calls the floors below,
returns the answer as data (never prints)."""
