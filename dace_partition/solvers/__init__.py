"""Solvers: implementations of DistributedMemlet nodes (thesis 4.4 and ch. 5)."""
