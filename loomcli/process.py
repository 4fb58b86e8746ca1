"""Settings of a loom process made before anything heavy is imported, by both entry
points (the fast path and typer's cli.main), so neither needs the other."""

from __future__ import annotations

import os

# Numerical work in a loom process is one query vector at a time (the scan's embedding
# workers set the same): a second BLAS thread only spins. Measured on the shared 2-core
# machine: one query's embedding 228 ms of CPU with OpenBLAS's default two threads, 3 ms
# with one; a cold hybrid search's CPU 0.55 -> 0.37 s. Set before numpy is imported; a
# value the user set is kept.
BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def one_blas_thread() -> None:
    for name in BLAS_THREADS:
        os.environ.setdefault(name, "1")
