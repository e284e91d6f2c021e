"""List filters (django-filter): what an operator narrows jobs and quarantine by.

Search is a prefix match on id or kind, not ``LIKE '%…%'``: prefixes use the primary key
and can be served from an index on a large table; a substring scan cannot.

The filters are as strict as their OpenAPI declarations (:mod:`headgate_django.api.query`):
an empty or blank value is an error, text has no control characters, an instant is RFC 3339
with its offset, and a bad ``state`` lists the valid ones. Errors are 400
``invalid_query_parameter`` keyed by parameter, raised by :class:`StrictFilterBackend`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import django_filters
from django import forms
from django.core.validators import RegexValidator
from django.db.models import QuerySet
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework.request import Request

from headgate_django.api import query
from headgate_django.api.errors import InvalidQueryParameter
from headgate_django.api.serializers.common import parse_instant
from headgate_django.models import STATE_CHOICES, Job, Quarantine
from headgate_django.store.index_hints import prefix_search

NO_CONTROL = RegexValidator(r"^[^\x00-\x1f]+\Z", "must not contain control characters")


class SafeIsoDateTimeField(django_filters.fields.IsoDateTimeField):
    """An RFC 3339 instant; one outside 1970–9998 is clamped to that range."""

    def to_python(self, value: Any) -> datetime | None:
        if value in self.empty_values:
            return None
        result = parse_instant(value) if isinstance(value, str) else None
        if result is None:
            raise forms.ValidationError(
                "must be an RFC 3339 date-time with an offset", code="invalid"
            )
        return result


class InstantFilter(django_filters.IsoDateTimeFilter):
    field_class = SafeIsoDateTimeField


class TextFilter(django_filters.CharFilter):
    """Text read exactly as sent, like :func:`query.text`: the form field's default strip
    would drop control characters at either end unchecked (``?kind=%1fx`` filtered by
    ``x``) and turn a blank value into no filter at all."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("validators", [NO_CONTROL])
        kwargs.setdefault("strip", False)
        super().__init__(*args, **kwargs)


STATES = [value for value, _ in STATE_CHOICES]


class StrictFilterBackend(DjangoFilterBackend):
    """Refuses empty filter values, and a value filter (all but ``state``) given twice, as
    :class:`query.QueryParam` does; answers filter errors as ``invalid_query_parameter``.

    A blank value (only whitespace, which to Python includes the control characters
    U+001C–U+001F) is empty too: ``?kind=%20`` names no kind, and a list that ignored it
    would answer with every job."""

    def filter_queryset(self, request: Request, queryset: Any, view: Any) -> Any:
        filterset = self.get_filterset(request, queryset, view)
        if filterset is None:
            return queryset
        for name, spec in filterset.filters.items():
            values = request.query_params.getlist(name)
            if any(not value.strip() for value in values):
                raise InvalidQueryParameter.of(name, f"{name} must not be empty")
            # The form would keep the last of two values: the answer for one of the two.
            if len(values) > 1 and not isinstance(spec, django_filters.MultipleChoiceFilter):
                raise InvalidQueryParameter.of(name, f"give {name} at most once")
        if not filterset.is_valid():
            name, messages = next(iter(filterset.errors.items()))
            raise InvalidQueryParameter(
                f"{name}: {' '.join(messages)}",
                **{field: list(errors) for field, errors in filterset.errors.items()},
            )
        return filterset.qs


class JobFilter(django_filters.FilterSet):
    queue = TextFilter(help_text="Exact queue name.")
    kind = TextFilter(help_text="Exact job kind.")
    # distinct=False: a filter on one column of one table cannot repeat a row, and a
    # SELECT DISTINCT would make the database sort the whole match before the first page.
    state = django_filters.MultipleChoiceFilter(
        choices=STATE_CHOICES,
        distinct=False,
        help_text="One or more states (repeat the parameter).",
        error_messages={
            "invalid_choice": f"%(value)s is not a job state; valid states: {', '.join(STATES)} "
            "(a job that failed for good is archived; one that will be retried is retryable)"
        },
    )
    workflow_id = TextFilter(help_text="Jobs of one workflow.")
    created_after = InstantFilter(field_name="enqueued_at", lookup_expr="gte")
    created_before = InstantFilter(field_name="enqueued_at", lookup_expr="lt")
    finalized_after = InstantFilter(field_name="finalized_at", lookup_expr="gte")
    finalized_before = InstantFilter(field_name="finalized_at", lookup_expr="lt")
    q = TextFilter(method="search", help_text="Prefix of the job id or of the kind.")

    class Meta:
        model = Job
        fields: list[str] = []

    def search(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        return prefix_search(queryset, value)


class QuarantineFilter(django_filters.FilterSet):
    kind = TextFilter(help_text="Exact job kind.")

    class Meta:
        model = Quarantine
        fields: list[str] = []


def openapi_parameters(filterset: type[django_filters.FilterSet]) -> list[Any]:
    """The filters' OpenAPI declarations, exact where django-filter's own are loose (it
    states neither the text pattern nor that an instant is RFC 3339)."""
    params = []
    for name, spec in filterset.base_filters.items():
        description = str(spec.field.help_text or "")
        if isinstance(spec, TextFilter):
            params.append(query.text(name, description).openapi())
        elif isinstance(spec, InstantFilter):
            schema = {"type": "string", "format": "date-time"}
            params.append(query.QueryParam(name, schema, str, description).openapi())
    return params
