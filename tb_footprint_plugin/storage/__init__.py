"""Layer 1, the storage layer: path containment, fsync, atomic writes, copies, hashes, locks.

All file I/O of the engine goes through these helpers, so a remote filesystem backend can
extend this one layer instead of every module above it.
"""
