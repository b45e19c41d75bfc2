"""The read pipeline: both lanes, gating, fusion, association, selection, dedupe."""
