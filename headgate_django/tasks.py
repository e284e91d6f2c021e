"""``headgate_django.tasks.HeadgateBackend``: a Django Tasks backend that is also a
workflow engine. See :mod:`headgate_django.tasks_backend` for the implementation.

Django imports every app's ``tasks`` module at start-up, in every process, whether or not
the project uses Django's Tasks framework. So this module imports nothing itself: the
backend and the framework (about 30 ms) load when a name below is first used, as Django
does when ``TASKS`` names ``headgate_django.tasks.HeadgateBackend``. Without
``django.tasks`` (Django 6) or the ``django-tasks`` backport (Django 5.2) that first use
raises a clear ImproperlyConfigured.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from headgate_django.tasks_backend import HeadgateBackend, HeadgateTask, task_envelope

__all__ = ["HeadgateBackend", "HeadgateTask", "task_envelope"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        from headgate_django import tasks_backend
    except ImportError as exc:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            "headgate_django.tasks needs Django's Tasks framework: Django ≥ 6.0, or "
            f"`pip install django-tasks` on Django 5.2 ({exc})"
        ) from exc
    value = getattr(tasks_backend, name)
    globals()[name] = value  # later lookups skip this function
    return value
