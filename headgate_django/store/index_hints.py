"""Job lists that MySQL/MariaDB read through an index: one state, and prefix searches.

**One state.**
A list of one state, newest first (``WHERE state = %s ORDER BY id DESC LIMIT n``), has two
plans there: walk the primary key backwards and test each row's state, or read the state
index, whose InnoDB entries are ``(state, id)``, backwards from the end of that state.
MariaDB picks the primary key whenever the state is common, on the assumption that
matching rows are spread evenly through the table. They are not: jobs of a state were
mostly enqueued together (scheduled jobs wait behind millions of newer finished ones,
archived ones from last week behind this week's), and the walk then reads every newer
row first — 15 s for 50 scheduled jobs behind 2 million finished ones, against
milliseconds through the index. PostgreSQL and SQLite choose by their own statistics
(PostgreSQL's partial ``(state, id)`` index), so only MySQL/MariaDB get the hint.

Django has no index hints, so the queryset is given a query whose compiler adds
``FORCE INDEX`` after the job table: it stays a queryset (the admin pages it, counts it,
DRF slices it), and every query built from it carries the hint.

**Prefixes.** Django spells a case-sensitive ``startswith`` on MySQL/MariaDB as
``LIKE BINARY``, which compares bytes, not the column's collation, so no index on the
column serves it and a prefix few rows have is found by reading them all (20 s for a rare
kind among 2.5 million jobs). :func:`prefix` adds the collation's own ``LIKE``, which an
index range serves, and keeps the binary one to stay exact. A search of the id or the kind
(:func:`prefix_search`) then has the opposite trap: given the index, MariaDB reads and
sorts every job of a common kind to show the newest 50 (12 s for a kind of 250,000 jobs),
where walking the primary key finds them in a few hundred rows. So the search first
counts, through the kind index and at most :data:`FEW` entries, how many jobs have such a
kind, and walks the primary key when that is many.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, cast

from django.db.models import Q, QuerySet
from django.db.models.constants import LOOKUP_SEP
from django.db.models.functions import Left
from django.db.models.lookups import Exact
from django.db.models.sql import Query
from django.db.models.sql.compiler import SQLCompiler

from headgate_django.kernel.states import State
from headgate_django.store import vendor as v

_STATE_INDEX = "headgate_job_state_my"
_KIND_INDEX = "headgate_job_kind"
#: The states whose jobs in one queue an index gives exactly: ``headgate_job_claim`` the
#: available ones, ``headgate_job_lease`` the running ones (a worker's few), and
#: ``headgate_job_state_rare`` every other but ``completed``, most of a queue.
_QUEUE_INDEXED_STATES = frozenset(s.value for s in State if s is not State.COMPLETED)
#: Up to this many jobs of the searched kinds are found through the kind index and
#: sorted; more are found by walking the primary key, newest first.
FEW = 1000


class _HintedQuery(Query):
    """A query of ``headgate_job`` that names the index MySQL/MariaDB must read."""

    index_hint = ""

    def get_compiler(
        self, using: Any = None, connection: Any = None, elide_empty: bool = True
    ) -> SQLCompiler:
        compiler = super().get_compiler(using, connection, elide_empty)
        if not self.index_hint or compiler.connection.vendor != "mysql":
            return compiler
        assert self.model is not None  # a query of the job table
        plain = compiler.as_sql
        table = compiler.connection.ops.quote_name(self.model._meta.db_table)
        hint = f"{table} FORCE INDEX ({self.index_hint})"

        def as_sql(*args: Any, **kwargs: Any) -> tuple[str, Any]:
            sql, params = plain(*args, **kwargs)
            return sql.replace(f"FROM {table}", f"FROM {hint}", 1), params

        compiler.as_sql = as_sql  # type: ignore[method-assign]
        return compiler


def _force_index(queryset: QuerySet[Any], index: str) -> QuerySet[Any]:
    query = cast(_HintedQuery, queryset.query.chain(klass=_HintedQuery))
    query.index_hint = index
    hinted = queryset.all()
    hinted.query = query
    return hinted


def jobs_of_one_state(queryset: QuerySet[Any]) -> QuerySet[Any]:
    """``queryset`` (jobs filtered to exactly one state) read through the state index on
    MySQL/MariaDB; unchanged elsewhere."""
    if v.connection_for(queryset.db).vendor != "mysql":
        return queryset
    return _force_index(queryset, _STATE_INDEX)


def prefix_search(queryset: QuerySet[Any], value: str) -> QuerySet[Any]:
    """Jobs of ``queryset`` whose id or kind starts with ``value``, in a plan that stays
    cheap on PostgreSQL and MySQL/MariaDB however many jobs match.

    Asked as one condition (``id LIKE … OR kind LIKE …``), neither planner can use a range
    of either index: PostgreSQL read 1.65 million kind-index entries to count the jobs of
    the fourth of ten kinds in 5.5 million. Ids (ULIDs) and kinds (dotted names) rarely
    share a prefix, so the search finds out which of the two the term matches, each
    through its own index and reading a handful of entries, and asks only for that: an id
    prefix is a range of the primary key, in order; one kind is a range of the kind index,
    in order; several kinds are a range of it (on MySQL/MariaDB sorted while they are
    few, :data:`FEW` jobs, else found by a walk of the primary key). SQLite's ``LIKE``
    ignores case (:func:`prefix` compares the prefix exactly besides) and so uses no
    index: there the probes would cost what the search does.
    """
    using = queryset.db
    by_id, by_kind = prefix("id", value, using=using), prefix("kind", value, using=using)
    vendor = v.connection_for(using).vendor
    if vendor == "sqlite":
        return queryset.filter(by_id | by_kind)
    jobs = queryset.model._default_manager.using(using)
    first = jobs.filter(by_kind).order_by("kind").values_list("kind", flat=True).first()
    if first is None:
        return queryset.filter(by_id)
    if jobs.filter(by_id).exists():
        both = queryset.filter(by_id | by_kind)
        return _force_index(both, "PRIMARY") if vendor == "mysql" else both
    if not jobs.filter(by_kind, kind__gt=first).exists():
        return jobs_of_one_kind(queryset.filter(kind=first))
    if vendor == "mysql" and jobs.filter(by_kind).order_by()[: FEW + 1].count() > FEW:
        return _force_index(queryset.filter(by_kind), "PRIMARY")
    return queryset.filter(by_kind)


def jobs_of_one_kind(queryset: QuerySet[Any]) -> QuerySet[Any]:
    """``queryset`` (jobs filtered to exactly one kind) read through the kind index on
    MySQL/MariaDB, for the reason :func:`jobs_of_one_state` gives; unchanged elsewhere."""
    if v.connection_for(queryset.db).vendor != "mysql":
        return queryset
    return _force_index(queryset, _KIND_INDEX)


def prefix(field: str, value: str, *, using: str) -> Q:
    """Rows whose ``field`` starts with ``value`` (case-sensitive), as a condition an index
    on ``field`` serves on every database."""
    exact = Q(**{f"{field}__startswith": value})
    vendor = v.connection_for(using).vendor
    if vendor == "mysql":
        return Q(**{f"{field}__istartswith": value}) & exact
    if vendor == "sqlite":
        # SQLite's LIKE ignores ASCII case (``TEST.`` would find ``test.echo``); its ``=``
        # does not, so the leading characters are compared as well.
        return exact & Q(Exact(Left(field, len(value)), value))
    return exact


#: The lookups :func:`exact_or_prefix` matches, each through an index of its column.
INDEXED_LOOKUPS = ("exact", "startswith")


def exact_or_prefix(lookups: Sequence[str], value: str, *, using: str) -> Q:
    """Rows where one of ``lookups`` (``field__exact`` or ``field__startswith``) holds
    ``value``, compared with case, as conditions an index on each field serves on every
    database (a prefix through :func:`prefix`)."""
    found = Q()
    for lookup in lookups:
        field, _, kind = lookup.rpartition(LOOKUP_SEP)
        if kind not in INDEXED_LOOKUPS:
            raise ValueError(f"{lookup!r} is not one of {INDEXED_LOOKUPS}")
        found |= (
            prefix(field, value, using=using)
            if kind == "startswith"
            else equal(field, value, using=using)
        )
    return found


def equal(field: str, value: str, *, using: str) -> Q:
    """Rows whose ``field`` is ``value`` (case-sensitive), through an index on ``field``.
    MySQL/MariaDB's usual collations ignore case in ``=``, so the binary prefix of
    :func:`prefix` is asked there besides."""
    same = Q(**{field: value})
    if v.connection_for(using).vendor == "mysql":
        return same & Q(**{f"{field}__startswith": value})
    return same


def filtered_list(
    queryset: QuerySet[Any], *, states: Collection[str], kinds: Collection[str]
) -> QuerySet[Any]:
    """A job list filtered by these states and kinds, read through the index of the one
    column it is filtered to a single value of (see :func:`jobs_of_one_state`); left to
    the database when it filters both or neither."""
    if len(set(states)) == 1 and not kinds:
        return jobs_of_one_state(queryset)
    if len(set(kinds)) == 1 and not states:
        return jobs_of_one_kind(queryset)
    return queryset


def job_filters_indexed(filters: Mapping[str, Collection[str]], *, searched: bool) -> bool:
    """Whether an index gives the jobs a list filtered by ``filters`` (``{column: values}``)
    and maybe ``searched`` shows, newest first, without testing rows it finds and drops by
    the thousand.

    A search (:func:`prefix_search`), one kind (``headgate_job_kind``), one workflow
    (``headgate_job_workflow``) or one state (:func:`filtered_list`, the state indexes)
    is served whatever else is filtered. A queue or a worker is led by no index of its own,
    and the job table gets no more: every enqueue, claim and ack writes each index. So a
    queue is served only with one of :data:`_QUEUE_INDEXED_STATES`, a worker only with
    ``running`` (the lease index), and a queue alone or its completed jobs are not: the
    console reads such lists in a window (:mod:`.windows`). MySQL/MariaDB's plain
    ``(state, queue)`` index would serve completed jobs too; one rule for every database
    keeps the page the same on all."""
    if searched or filters.get("kind") or filters.get("workflow_id"):
        return True
    states = set(filters.get("state") or ())
    if filters.get("claimed_by") and states != {State.RUNNING.value}:
        return False
    if filters.get("queue"):
        return len(states) == 1 and states <= _QUEUE_INDEXED_STATES
    return True
