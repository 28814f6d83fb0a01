import os

import pytest
import torch


def _cuda() -> bool:
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# The CPU reference runs many small ops: one intra-op thread is faster and far steadier on small CI
# machines, where several threads contend for 2 cores (pytest-xdist runs 2 workers). A CPU sweep run in
# a test keeps that one thread: the runner honours OMP_NUM_THREADS.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)
