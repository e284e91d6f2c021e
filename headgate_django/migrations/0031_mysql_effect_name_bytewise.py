"""MySQL/MariaDB: an effect's name is compared byte by byte (``utf8mb4_bin``).

``ctx.once(name, fn)`` finds an earlier attempt's record by ``(job id, name)``. Under the
usual case-insensitive collations (``utf8mb4_general_ci``, ``utf8mb4_0900_ai_ci``) a name
built from a case-sensitive id, ``refund:aB3``, found the record of ``refund:Ab3``: the
second effect returned the first one's result and never ran, and could not have been
recorded beside it (the unique key compared the same way). On PostgreSQL and SQLite the
two were always two effects. Only the column's collation changes; its length and the
unique key ``(job_id, name)`` stay. Other databases are left as they are.
"""

from django.db import migrations


def _collate(collation):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "mysql":
            collate = f" CHARACTER SET utf8mb4 COLLATE {collation}" if collation else ""
            schema_editor.execute(
                f"ALTER TABLE headgate_effect MODIFY name varchar(255){collate} NOT NULL"
            )

    return run


class Migration(migrations.Migration):
    dependencies = [("headgate_django", "0030_governed_claim_read_ahead")]

    # Not atomic: MySQL cannot roll DDL back (elsewhere it does nothing).
    operations = [migrations.RunPython(_collate("utf8mb4_bin"), _collate(None), atomic=False)]
