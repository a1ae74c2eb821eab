"""Transforms: the actions that produce a run's new files (gzip a trace, rewrite an event file)."""
