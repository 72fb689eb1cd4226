"""Which vector ranking a scope gets: exact (every row of the scope) or HNSW.

A filtered HNSW scan visits about `kv / share` index tuples to find `kv` rows of a scope
holding `share` of the index; the exact ranking reads every row of the scope. Measured at
100k rows (2 cores, kv 20): HNSW 33 / 12 / 7.3 / 3.5 / 2.3 ms for a tenant holding
0.5 / 1.5 / 2.9 / 5.7 / 10.7% of the index, exact 0.4 / 1.8 / 3.8 / 6.5 / 10.4 ms over
the same rows: one HNSW tuple costs about nine exact rows (`cost_ratio`).
"""

from __future__ import annotations


def prefers_exact(scope_rows: float, index_rows: float, kv: int, cost_ratio: float) -> bool:
    """Whether ranking `scope_rows` rows exactly beats HNSW over `index_rows` for `kv`
    nearest rows: scope_rows < cost_ratio * kv * index_rows / scope_rows, that is
    scope_rows < sqrt(cost_ratio * kv * index_rows). An upper bound for `scope_rows`
    keeps the answer right (app/search/repository.py passes the scope's counted index
    entries, or its tenant's rows), since the exact side only gets cheaper and HNSW only
    dearer as the scope shrinks. An unknown index size (<= 0: never analysed) or a ratio
    of 0 says no."""
    if index_rows <= 0 or cost_ratio <= 0:
        return False
    return scope_rows * scope_rows < cost_ratio * kv * index_rows
