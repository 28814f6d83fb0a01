"""Tolerances of the output check (no torch): a row whose max |output - fp32 reference|, or whose fused vs
two-call difference, exceeds its dtype's value is marked ``mismatch``. Outputs are O(1) (v ~ N(0, 1)); bf16
allows 2e-2 since fa2 and fa3 on an H200 stayed within 0.0154 of the reference in every test and sweep row
(sinks and window 127 included; docs/design.md §3), and compiled FlexAttention within 0.0152 (§12)."""

REFERENCE_TOLERANCE = {"bf16": 2e-2, "fp16": 4e-3, "fp32": 1e-4}  # by --dtype name, absolute
