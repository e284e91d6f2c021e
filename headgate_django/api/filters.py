"""List filters (django-filter): what an operator narrows jobs and quarantine by.

Search is a prefix match on id or kind, not ``LIKE '%…%'``: prefixes use the primary key
and can be served from an index on a large table; a substring scan cannot. Text filters
refuse NUL characters (Django's form fields do), which PostgreSQL could not compare.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import django_filters
from django import forms
from django.db.models import Q, QuerySet

from headgate_django.models import STATE_CHOICES, Job, Quarantine


class SafeIsoDateTimeField(django_filters.fields.IsoDateTimeField):
    """An out-of-range instant (year 1 at +14:00) is a 400, not an OverflowError."""

    def to_python(self, value: Any) -> datetime | None:
        try:
            result = super().to_python(value)
        except OverflowError:
            raise forms.ValidationError("instant out of range", code="invalid") from None
        if result is not None and not 1970 <= result.year <= 9998:
            raise forms.ValidationError("year must be between 1970 and 9998", code="invalid")
        return result


class InstantFilter(django_filters.IsoDateTimeFilter):
    field_class = SafeIsoDateTimeField


class JobFilter(django_filters.FilterSet):
    queue = django_filters.CharFilter(help_text="Exact queue name.")
    kind = django_filters.CharFilter(help_text="Exact job kind.")
    # distinct=False: a filter on one column of one table cannot repeat a row, and a
    # SELECT DISTINCT would make the database sort the whole match before the first page.
    state = django_filters.MultipleChoiceFilter(
        choices=STATE_CHOICES,
        distinct=False,
        help_text="One or more states (repeat the parameter).",
    )
    workflow_id = django_filters.CharFilter(help_text="Jobs of one workflow.")
    created_after = InstantFilter(field_name="enqueued_at", lookup_expr="gte")
    created_before = InstantFilter(field_name="enqueued_at", lookup_expr="lt")
    finalized_after = InstantFilter(field_name="finalized_at", lookup_expr="gte")
    finalized_before = InstantFilter(field_name="finalized_at", lookup_expr="lt")
    q = django_filters.CharFilter(method="search", help_text="Prefix of the job id or of the kind.")

    class Meta:
        model = Job
        fields: list[str] = []

    def search(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        return queryset.filter(Q(id__startswith=value) | Q(kind__startswith=value))


class QuarantineFilter(django_filters.FilterSet):
    kind = django_filters.CharFilter(help_text="Exact job kind.")

    class Meta:
        model = Quarantine
        fields: list[str] = []
