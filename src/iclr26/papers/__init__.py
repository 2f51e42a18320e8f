"""One sub-package per paper; each declares `PAPER` in its `__init__.py` (see core.paper)."""
