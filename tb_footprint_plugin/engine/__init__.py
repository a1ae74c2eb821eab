"""Layer 5, the engine: vault, journal, transaction, restore, purge, ledger and history.

Everything that changes a logdir or the vault lives here, behind ``tb_footprint_plugin.api``.
"""
