"""Benchmarks: programs that print numbers, not tests (see bench/storage.py)."""
