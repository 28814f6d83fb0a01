"""A declaration module that imports torch (what check-backend flags: every cpbench command would pay for it)."""

import torch  # noqa: F401

from cpbench.kernels.backends.spec import BackendSpec

SPEC = BackendSpec("fake-heavy", "cpbench.kernels.backends.torch_ref:TorchBackend", (), "imports torch to declare",
                   cpu=True, cuda_min=(0, 0))
