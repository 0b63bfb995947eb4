"""Benchmark scripts (a package, so that tests can import their yardsticks by this name)."""
