"""Conformance suite: NPBench-class NumPy programs written for this repository (see programs.py)."""
