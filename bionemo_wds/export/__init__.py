"""Prepared datasets written out for other toolchains (Megatron's indexed datasets)."""
