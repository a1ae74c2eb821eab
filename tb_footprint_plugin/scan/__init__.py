"""Layer 2, scan: what a logdir holds — categories, the footprint model, TFRecord and event-file
readers, run discovery, the scan cache, and ``scan()`` itself (in ``scan.scanner``).

Kept import-free so that importing e.g. ``scan.categories`` does not load the scanner.
"""


def __getattr__(name):
    # ``from tb_footprint_plugin.scan import scan`` keeps working without an eager import.
    if name == "scan":
        from tb_footprint_plugin.scan.scanner import scan

        return scan
    raise AttributeError(name)
