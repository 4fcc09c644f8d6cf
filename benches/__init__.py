"""Benchmarks: shared cases (cases.py), modes (modes.py), metrics (measure.py); asv, pytest-benchmark and scripts."""
