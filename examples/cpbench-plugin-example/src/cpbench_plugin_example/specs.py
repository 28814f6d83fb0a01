"""The declaration cpbench reads through the entry point ``example`` (pyproject.toml). No torch here."""

from cpbench.kernels.backends.spec import BackendSpec

EXAMPLE = BackendSpec(
    name="example",
    impl="cpbench_plugin_example.backend:SdpaBackend",
    kernel_patterns=(),  # many generic torch kernels per call, none that is "the" attention kernel: count calls
    cpu=True, cuda_min=(0, 0),  # runs anywhere torch does
    description="example plugin: torch scaled_dot_product_attention per segment over the paged KV cache",
)
