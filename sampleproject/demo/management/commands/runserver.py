"""``manage.py runserver`` served by Daphne (ASGI), so the console's live pages work in development.

Listing ``"daphne"`` first in INSTALLED_APPS gives the same command, but Daphne's app
module imports Twisted while Django sets up: a fifth of a second that every command would
pay, each ``runworkers`` process included, although only this one serves HTTP. Here Daphne
is imported only when ``runserver`` runs. The demo app is listed before
``django.contrib.staticfiles`` so that this command replaces the static-files one.
"""

from daphne.management.commands.runserver import Command

__all__ = ["Command"]
