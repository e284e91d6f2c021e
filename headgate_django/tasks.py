"""``headgate_django.tasks.HeadgateBackend``: a Django Tasks backend that is also a
workflow engine. See :mod:`headgate_django.tasks_backend` for the implementation.

Importing this module never fails, because Django imports every app's ``tasks`` module:
without ``django.tasks`` (Django 6) or the ``django-tasks`` backport (Django 5.2) the
names below raise a clear ImproperlyConfigured when they are used.
"""

from __future__ import annotations

from typing import Any

try:
    from headgate_django.tasks_backend import HeadgateBackend, HeadgateTask, task_envelope
except ImportError as exc:  # pragma: no cover - depends on the installed Django
    _MISSING = exc

    def __getattr__(name: str) -> Any:
        if name in __all__:
            from django.core.exceptions import ImproperlyConfigured

            raise ImproperlyConfigured(
                "headgate_django.tasks needs Django's Tasks framework: Django ≥ 6.0, or "
                f"`pip install django-tasks` on Django 5.2 ({_MISSING})"
            )
        raise AttributeError(name)


__all__ = ["HeadgateBackend", "HeadgateTask", "task_envelope"]
