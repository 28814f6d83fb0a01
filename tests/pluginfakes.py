"""Declarations and classes of made-up plugins, for the tests of the plugin loader and check-backend (the entry
points that name them are built in the tests: no distribution is installed for them)."""

from cpbench.kernels.backends.spec import BackendSpec

TORCH = "cpbench.kernels.backends.torch_ref:TorchBackend"
# a good plugin: the torch reference under another name
GOOD = BackendSpec("fake-good", TORCH, (), "the torch reference as a plugin", cpu=True, cuda_min=(0, 0))
CLASH = BackendSpec("torch", TORCH, (), "takes cpbench's own name", cpu=True, cuda_min=(0, 0))
NO_FUSED = BackendSpec("fake-no-fused", TORCH, (), "declares no fused call", cpu=True, modes=("two-call",))
NOT_A_SPEC = {"name": "fake-dict"}
SEVERAL = [BackendSpec("fake-one", TORCH, (), "first of two", cpu=True, cuda_min=(0, 0)),
           BackendSpec("Fake Two", TORCH, (), "a name with a space and capitals", cpu=True)]
# its class has no prepare()
NO_PREPARE = BackendSpec("fake-no-prepare", "pluginfakes:NoPrepare", (), "no prepare method", cpu=True,
                         cuda_min=(0, 0))


class NoPrepare:
    """Breaks the protocol: no prepare()."""

    name = "fake-no-prepare"

    def supports(self, device, model, dtype):
        return None


class PatternsAndModes:
    """A class named by module:Class whose attributes give its spec's kernel patterns and modes."""

    name = "patterns-and-modes"
    kernel_patterns = ("my_attention_kernel",)
    modes = ("two-call", "fused", "cp-native")
