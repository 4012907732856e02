# cython: language_level=3
"""BLAS-backed complex expressions (dot, batch_dot): being written (issue 4)."""
