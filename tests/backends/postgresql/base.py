"""Django's PostgreSQL backend for the test process, emptying the tables faster between tests.

A transactional test (``transactional_db``: its writes are committed so that the nodes and
runtimes it starts see them) ends with Django's flush: one ``TRUNCATE`` of every table, then the
``post_migrate`` handlers, which write the content types and permissions of every model again.
Here that was about 0.4 s a test over the suite's hundreds of transactional tests: PostgreSQL
gives each truncated table and index a new file (0.17-0.19 s for the suite's few rows, where
``DELETE`` takes 0.005-0.017 s), and the handlers' inserts took most of the rest.

This backend's flush deletes the rows instead, in any order inside the flush's transaction (the
foreign keys Django creates are ``DEFERRABLE INITIALLY DEFERRED``), and keeps the content types
and permissions, which only migrations write and no test changes: the handlers then find them
all and write nothing. A flush that resets sequences or cascades (``reset_sequences``,
``allow_cascade``) is Django's own. Everything else is Django's backend unchanged; the nodes the
tests start use Django's.
"""

from django.db.backends.postgresql import base, operations

#: The tables the flush leaves as they are: what ``post_migrate`` would write again.
KEPT = frozenset({"django_content_type", "auth_permission"})


class DatabaseOperations(operations.DatabaseOperations):
    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if not tables or reset_sequences or allow_cascade:
            return super().sql_flush(
                style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        return [
            "SET CONSTRAINTS ALL DEFERRED",
            *(
                f"{style.SQL_KEYWORD('DELETE FROM')} {self.quote_name(table)};"
                for table in tables
                if table not in KEPT
            ),
        ]


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
