"""Imported first by a subprocess that must run as on a machine without torch: any import of torch
raises ImportError, as it would there (a ``sys.modules['torch'] = None`` stub instead breaks libraries
that look torch up in sys.modules, such as scipy's array-API layer)."""

import sys


class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"No module named {name!r} (torch is hidden by tests/notorch.py)")
        return None


sys.meta_path.insert(0, _NoTorch())
