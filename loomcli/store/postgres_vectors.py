"""Passage vectors ranked by the PostgreSQL server, through pgvector, where it has it.

The PostgreSQL store keeps every file's vectors as bytes (`vectors`: int8 rows and their
scales, as the SQLite store does: `loom migrate` and `vectors_of` read them). Where the
server has the `vector` extension, migration 003 adds `passages`: one row per passage,
its vector as pgvector's `vector` (the int8 row times its scale, in float32: the very
numbers loom ranks with), and an HNSW index per vector size (built at the end of the
scan or migration that first stores that size, at once; then kept up row by row.
pgvector indexes one size at a time, hence an expression index on `embedding::vector(N)`
limited to `dim = N`). Until it exists a search is an exact scan in the server. A search
asks the server for the closest passages (ORDER BY <#> LIMIT) instead of loading every
vector into loom.

Inner product (`<#>`, `vector_ip_ops`), not pgvector's cosine: the providers' vectors are
unit length, so the inner product is the cosine, and it is the number loom itself
computes (the cosine operator would divide by the int8 row's norm, which rounding moved
a little off 1). Scores equal loom's to float rounding.

HNSW is approximate: hnsw.ef_search is set to EF_SEARCH (pgvector's largest), which finds
the exact closest passages of a set of a few thousand. pgvector before 0.8 returns at
most ef_search rows per query; 0.8 and later scan on (`hnsw.iterative_scan`) until the
query's limit. A query limited to some files (`among`: --path, -g, --tag) is answered
exactly, by a scan of those files' passages (a filter after HNSW would lose rows).
Without the extension (or the right to create it) nothing here is used: vectors are
bytes, ranked in loom.
"""

from __future__ import annotations

from collections.abc import Sequence

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from typing import Any

EXTENSION = "vector"
HNSW_SINCE = (0, 5, 0)  # the first pgvector with HNSW indexes
ITERATIVE_SINCE = (0, 8, 0)  # the first whose HNSW scans go past ef_search (iterative)
HNSW_MAX_DIM = 2000  # pgvector's largest `vector` an HNSW index takes (larger: exact scan)
EF_SEARCH = 1000  # pgvector's largest hnsw.ef_search: exact on a few thousand passages

PASSAGES = """
CREATE TABLE passages (file_id bigint NOT NULL REFERENCES vectors(file_id) ON DELETE CASCADE,
                       n integer NOT NULL, model text NOT NULL, dim integer NOT NULL,
                       start_at bigint NOT NULL, end_at bigint NOT NULL,
                       embedding vector NOT NULL, PRIMARY KEY (file_id, n));
ALTER TABLE passages ALTER COLUMN embedding SET STORAGE MAIN;
"""  # no index on (model, dim): the planner would sort what it finds instead of asking HNSW
# STORAGE MAIN: a vector stays in its row up to a page (2,000 numbers), where the default
# moves one of 512 numbers (2 kB) out of line, and every exact scan then fetches each from
# TOAST (5,000 passages: 25 ms a query instead of 40-110).


def migration(conn: Any) -> None:
    """003: `passages`, where the server has pgvector and lets loom create it; else
    nothing (vectors stay bytes, ranked in loom). Recorded as applied either way: the
    choice is made once, when the index is made (see docs/scale.md to switch later)."""
    import psycopg

    if not conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = %s",
                        (EXTENSION,)).fetchone():
        return
    try:
        with conn.transaction():  # a savepoint: a refusal leaves the migration going on
            from loomcli.store.pg_connect import create_extension

            create_extension(conn, EXTENSION)
    except psycopg.Error:
        return  # not allowed to (the extension needs a superuser or a trusted install)
    conn.execute(PASSAGES)
    # An index made before: its vectors (bytes) become passages, then the HNSW indexes
    # are built once, over them all (faster than growing them row by row).
    for (file_id,) in conn.execute("SELECT file_id FROM vectors").fetchall():
        model, dim, spans, vecs, scales = conn.execute(
            "SELECT model, dim, spans, vecs, scales FROM vectors WHERE file_id = %s",
            (file_id,)).fetchone()
        put(conn, file_id, model, dim, bytes(spans), bytes(vecs), bytes(scales))
    index_sizes(conn, version(conn) or ())


def index_sizes(conn: Any, pgvector: tuple[int, ...]) -> None:
    """An HNSW index for every size of vector stored, where it is missing (the end of a
    scan, of a migration): built at once over the passages there."""
    if pgvector < HNSW_SINCE:
        return  # before HNSW: every search is an exact scan in the server
    made = False
    for (dim,) in conn.execute("SELECT DISTINCT dim FROM vectors WHERE dim > 0").fetchall():
        made |= hnsw_index(conn, int(dim))
    if made:
        conn.execute("ANALYZE passages")  # else the planner, counting no rows, sorts


def hnsw_index(conn: Any, dim: int) -> bool:
    """The HNSW index of the passages of `dim` numbers, if missing (none past
    HNSW_MAX_DIM: those are ranked by an exact scan); whether it was made now."""
    d = int(dim)
    if not 0 < d <= HNSW_MAX_DIM or conn.execute(
            # In this index's schema only (a corpus's, pg_connect.in_schema): never
            # another's found further along the search path.
            "SELECT to_regclass(quote_ident(current_schema()) || %s) IS NOT NULL",
            (f".passages_hnsw_{d}",)).fetchone()[0]:
        return False
    conn.execute(f"CREATE INDEX IF NOT EXISTS passages_hnsw_{d} ON passages USING hnsw "
                 f"((embedding::vector({d})) vector_ip_ops) WHERE dim = {d}")
    return True


def version(conn: Any) -> tuple[int, ...] | None:
    """pgvector's version in this database when `passages` exists (loom ranks with it),
    else None (vectors ranked in loom)."""
    row = conn.execute("SELECT e.extversion FROM pg_extension e WHERE e.extname = %s "
                       "AND to_regclass(quote_ident(current_schema()) || '.passages') "
                       "IS NOT NULL", (EXTENSION,)).fetchone()
    if row is None:
        return None
    parts = []
    for piece in str(row[0]).split("."):
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def literal(values: Any) -> str:
    """A vector as pgvector's text form. Python's repr of a float32's value reads back
    as the same float32 (the server parses it with strtof)."""
    return "[" + ",".join(map(repr, values)) + "]"


def put(conn: Any, file_id: int, model: str, dim: int, spans: bytes, vecs: bytes,
        scales: bytes) -> None:
    """One file's passages, replacing those it had (in the caller's transaction). The
    HNSW index of their size takes them as they come when it exists; else index_sizes
    builds it at the end of the scan (measured: 5,000 passages of 512 numbers took 7 s
    to index at once, 12 ms each one by one)."""
    import numpy as np

    conn.execute("DELETE FROM passages WHERE file_id = %s", (file_id,))
    n = len(scales) // 4
    if n == 0 or dim <= 0:
        return
    ranges = np.frombuffer(spans, dtype=np.int32).reshape(n, 2).tolist()
    rows = (np.frombuffer(vecs, dtype=np.int8).reshape(n, dim).astype(np.float32)
            * np.frombuffer(scales, dtype=np.float32)[:, None])
    with conn.cursor() as cur, cur.copy(
            "COPY passages (file_id, n, model, dim, start_at, end_at, embedding) "
            "FROM STDIN") as copy:
        for i, row in enumerate(rows.tolist()):
            copy.write_row((file_id, i, model, dim, ranges[i][0], ranges[i][1],
                            literal(row)))


def nearest(conn: Any, pgvector: tuple[int, ...], model: str, dim: int, query: Any,
            limit: int, among: Sequence[int] | None
            ) -> list[tuple[int, int, int, int, float]]:
    """(file id, passage number, start byte, end byte, inner product) of the `limit`
    passages closest to `query`, best first. Through the HNSW index of this size where
    there is one; `among` (some files only): exactly, by a scan of theirs."""
    import numpy as np

    d = int(dim)
    q = literal(np.asarray(query, dtype=np.float32).tolist())
    if among is not None:
        # `embedding <#> q`, not the indexed expression: the planner scans these files'
        # passages (exact) instead of filtering what HNSW found.
        rows = conn.execute(
            "SELECT file_id, n, start_at, end_at, -(embedding <#> %s::vector) FROM passages "
            f"WHERE dim = {d} AND model = %s AND file_id = ANY(%s) "
            "ORDER BY embedding <#> %s::vector LIMIT %s",
            (q, model, list(among), q, limit)).fetchall()
    else:
        if HNSW_SINCE <= pgvector < ITERATIVE_SINCE and d <= HNSW_MAX_DIM:
            limit = min(limit, EF_SEARCH)  # HNSW returns at most ef_search rows
        expr = f"(embedding::vector({d}))"
        rows = conn.execute(
            f"SELECT file_id, n, start_at, end_at, -({expr} <#> %s::vector({d})) "
            f"FROM passages WHERE dim = {d} AND model = %s "
            f"ORDER BY {expr} <#> %s::vector({d}) LIMIT %s", (q, model, q, limit)).fetchall()
    return [(int(f), int(n), int(a), int(b), float(s)) for f, n, a, b, s in rows]


def settings(conn: Any, pgvector: tuple[int, ...]) -> None:
    """This session's HNSW search settings (once per connection)."""
    conn.execute(f"SET hnsw.ef_search = {EF_SEARCH}")
    if pgvector >= ITERATIVE_SINCE:
        conn.execute("SET hnsw.iterative_scan = strict_order")
