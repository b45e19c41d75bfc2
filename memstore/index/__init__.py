"""Disposable projections of a store (SPEC §5): vectors, keyword index, embedding cache.

Nothing in this package writes canonical files; delete ``.index/`` and the next call rebuilds it.
"""
