"""The benchmarks this system brings (declared in its manifest; `make bench-<name>` runs one, `make paper` shows its figures)."""
