"""PostgreSQL stores: one statement (a PL/pgSQL function call) per check.

The stores are in ``_store`` (the I/O), the SQL in ``_sql`` and ``apply.sql``
(``bucket.lua`` in PL/pgSQL); what travels is the Redis script's language
(``limiter.backends._wire``).  Needs the ``postgres`` extra (psycopg 3
and psycopg_pool).
"""

from limiter.backends.postgres._store import AsyncPostgresStore as AsyncPostgresStore
from limiter.backends.postgres._store import PostgresStore as PostgresStore
from limiter.backends.postgres._store import row_key as row_key
