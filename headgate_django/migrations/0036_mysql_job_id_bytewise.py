"""MySQL/MariaDB: job ids are compared byte by byte, trailing spaces included.

The job table took the database's collation, and the usual ones (``utf8mb4_general_ci``,
``utf8mb4_0900_ai_ci``) compare without case, every ``PAD SPACE`` one (``utf8mb4_bin``
too) without trailing spaces: ``Order-7``, ``order-7`` and ``order-7 `` were one id to the
primary key. Enqueuing the second was refused as a conflict with the first, and a lookup
by either id found the other's job; on PostgreSQL and SQLite they were always three jobs.
Now the id column, and the ``job_id`` and ``name`` of the at-most-once effect records
(keyed by job id and name), use the server's binary ``NO PAD`` collation:
``utf8mb4_nopad_bin`` on MariaDB, ``utf8mb4_0900_bin`` on MySQL 8. Comparisons of these
columns with other text columns take the binary collation. The job table is rebuilt
(its primary key changes). Other databases are left as they are.
"""

from django.db import migrations

#: Each column: its table, type and NOT NULL, and its collation before (None: the table's).
_COLUMNS = (
    ("headgate_job", "id", "varchar(255)", None),
    ("headgate_effect", "job_id", "varchar(255)", None),
    ("headgate_effect", "name", "varchar(255)", "utf8mb4_bin"),  # migration 0031
)


def _bytewise(connection):
    return "utf8mb4_nopad_bin" if connection.mysql_is_mariadb else "utf8mb4_0900_bin"


def _collate(forwards):
    def run(apps, schema_editor):
        connection = schema_editor.connection
        if connection.vendor != "mysql":
            return
        for table, column, sql_type, before in _COLUMNS:
            collation = _bytewise(connection) if forwards else before
            collate = f" CHARACTER SET utf8mb4 COLLATE {collation}" if collation else ""
            schema_editor.execute(
                f"ALTER TABLE {table} MODIFY {column} {sql_type}{collate} NOT NULL"
            )

    return run


class Migration(migrations.Migration):
    dependencies = [("headgate_django", "0035_effect_created_index")]

    # Not atomic: MySQL cannot roll DDL back (elsewhere it does nothing).
    operations = [migrations.RunPython(_collate(True), _collate(False), atomic=False)]
