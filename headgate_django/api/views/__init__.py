"""API views, one module per resource; routes are in :mod:`headgate_django.api.urls`."""
