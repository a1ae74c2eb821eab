"""TensorBoard entry point: ``footprint = tb_footprint_plugin.loader:FootprintLoader``.

TensorBoard imports this module at startup with no ``try``: an ``ImportError`` here stops
TensorBoard itself. So it imports nothing but ``os``, TensorBoard's own ``base_plugin`` and the
``plugin.options`` it shares with the plugin (defaults and flag rules, dependency-free);
the plugin (and the library under it) is imported lazily in ``load``, where TensorBoard
catches failures and just skips the plugin.
"""
from __future__ import annotations

import os

from tensorboard.plugins import base_plugin

# dependency-free (``os`` only); the plugin reads the same defaults and rules from there
from tb_footprint_plugin.plugin.options import (DEFAULT_POLICY, DEFAULT_QUIET_PERIOD, is_local_logdir,
                                                parse_quiet_period)

_TRUE = ("1", "true", "t", "yes", "y", "on")
_FALSE = ("0", "false", "f", "no", "n", "off")


def _bool(text):
    """``--footprint_read_only`` alone means true; ``=true``/``=false`` also work."""
    if isinstance(text, bool):
        return text
    t = str(text).strip().lower()
    if t in _TRUE:
        return True
    if t in _FALSE:
        return False
    raise ValueError(f"not a boolean: {text!r}")


class FootprintLoader(base_plugin.TBLoader):
    """Adds the ``footprint`` flags and builds the plugin for a local ``--logdir``."""

    def define_flags(self, parser):
        group = parser.add_argument_group("footprint")
        group.add_argument(
            "--footprint_backup_dir",
            metavar="PATH",
            type=str,
            default=None,
            help="Absolute path of the backup vault (default: <logdir>/.tb-footprint). A vault on "
            "another disk frees space at once when a run is reduced.",
        )
        group.add_argument(
            "--footprint_policy",
            metavar="POLICY",
            type=str,
            default=DEFAULT_POLICY,
            help="Policy selected in the Footprint tab: lossless, keep-latest, keep-latest=N, archive, "
            "or a JSON/TOML policy file (default: %(default)s).",
        )
        group.add_argument(
            "--footprint_read_only",
            metavar="BOOL",
            type=_bool,
            nargs="?",
            const=True,
            default=False,
            help="Show the Footprint tab without any write action (no reduce, restore or purge).",
        )
        group.add_argument(
            "--footprint_allow_remote_actions",
            metavar="BOOL",
            type=_bool,
            nargs="?",
            const=True,
            default=False,
            help="Allow reduce/restore/purge even when TensorBoard listens beyond loopback "
            "(--bind_all or a non-loopback --host). Off by default: anyone who can reach the "
            "port could change your logdir.",
        )
        group.add_argument(
            "--footprint_allow_unidentified_writers",
            metavar="BOOL",
            type=_bool,
            nargs="?",
            const=True,
            default=False,
            help="Accept reduce/restore/purge from clients whose Unix user cannot be identified "
            "(no /proc/net/tcp, e.g. not Linux; a client in another network namespace). Off by "
            "default: only the user running TensorBoard (or root) may change the logdir.",
        )
        group.add_argument(
            "--footprint_quiet_period",
            metavar="SECONDS",
            type=str,
            default=str(int(DEFAULT_QUIET_PERIOD)),
            help="A run whose files changed less than this long ago is treated as still being "
            "written and left alone (seconds, or 10m/1h; default: %(default)s).",
        )

    def fix_flags(self, flags):
        backup = getattr(flags, "footprint_backup_dir", None)
        if backup and "://" in backup:
            pass  # a bucket prefix: the api checks it against the logdir (same store, server-side copies)
        elif backup:
            backup = os.path.expanduser(backup)
            if not os.path.isabs(backup):
                raise base_plugin.FlagsError(
                    f"--footprint_backup_dir must be an absolute path, got {flags.footprint_backup_dir!r}"
                )
            backup = os.path.normpath(backup)
            logdir = getattr(flags, "logdir", None)
            if is_local_logdir(logdir):
                from tb_footprint_plugin.storage.paths import is_within  # dependency-free

                if is_within(os.path.expanduser(logdir), backup):
                    raise base_plugin.FlagsError(
                        f"--footprint_backup_dir {backup} contains the logdir; choose a separate folder"
                    )
            flags.footprint_backup_dir = backup
        policy = getattr(flags, "footprint_policy", None) or DEFAULT_POLICY
        flags.footprint_policy = policy
        try:
            from tb_footprint_plugin.plan.policies import PolicyError, get_policy
        except Exception:  # a broken install must not stop TensorBoard: load() will fail and be skipped
            get_policy = None
        if get_policy is not None:
            try:
                get_policy(policy)
            except (PolicyError, ValueError) as e:
                raise base_plugin.FlagsError(f"--footprint_policy: {e}") from None
        try:
            flags.footprint_quiet_period = parse_quiet_period(
                getattr(flags, "footprint_quiet_period", DEFAULT_QUIET_PERIOD)
            )
        except ValueError as e:
            raise base_plugin.FlagsError(f"--footprint_quiet_period: {e}") from None

    def load(self, context):
        logdir = getattr(context, "logdir", None)
        if not is_local_logdir(logdir):
            from tb_footprint_plugin.storage.remote import is_bucket_url  # dependency-free

            if not (logdir and is_bucket_url(logdir)):
                # --logdir_spec (logdir == "") or a URL of a store Footprint has no bucket verbs for
                return None
        from tb_footprint_plugin.plugin.plugin import FootprintPlugin

        return FootprintPlugin(context)
