from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class HeadgateConfig(AppConfig):
    name = "headgate_django"
    label = "headgate_django"
    verbose_name = "Headgate"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from headgate_django import (
            bulk,  # noqa: F401  (the bulk action job's handler)
            checks,  # registers system checks
            deaths,  # noqa: F401  (death handlers' store hook)
        )
        from headgate_django.conf import DEFAULTS, headgate_settings
        from headgate_django.console import publish  # noqa: F401  (live console hook)
        from headgate_django.durable import handlers as durable_handlers  # noqa: F401
        from headgate_django.exceptions import ConfigurationError
        from headgate_django.workflows import handlers, internal  # noqa: F401  (handlers)

        try:
            modules = headgate_settings.AUTODISCOVER_MODULES
        except ConfigurationError:
            # A misspelt or unknown key: the system check reports it (headgate.E001), and
            # every command that runs checks, runworkers and migrate among them, stops on
            # it. Raising here instead would turn even ``manage.py check`` into a traceback.
            modules = DEFAULTS["AUTODISCOVER_MODULES"]
        if not checks.module_names(modules):
            modules = DEFAULTS["AUTODISCOVER_MODULES"]  # reported as headgate.E016
        autodiscover_modules(*modules)
