"""Package version, kept in a module with no imports so setup.py and the loader can read it."""
__version__ = "0.1.0"
