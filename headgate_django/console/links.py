"""Admin URLs of console objects, built for whichever admin site hosts the console.

A graph links every node to its job's admin page; reversing 999 URLs one by one is
measurable, so :func:`job_url_builder` reverses once and substitutes quoted ids.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.admin.utils import quote
from django.urls import NoReverseMatch, reverse

ID_MARK = "__headgate_id__"


def admin_url(name: str, *args: str, site_name: str = "admin") -> str | None:
    """``admin:<name>`` on the site called ``site_name``; None where it is not mounted."""
    try:
        return reverse(f"admin:{name}", args=args, current_app=site_name)
    except NoReverseMatch:
        return None


def job_url_builder(site_name: str = "admin") -> Callable[[str], str]:
    """A function from job id to the job's admin change page."""
    template = admin_url("headgate_django_job_change", ID_MARK, site_name=site_name) or ""
    return lambda job_id: template.replace(ID_MARK, quote(job_id)) if template else ""


def workflow_url(workflow_id: str, site_name: str = "admin") -> str | None:
    return admin_url("headgate_django_workflow", workflow_id, site_name=site_name)


def execution_url(execution_id: str, site_name: str = "admin") -> str | None:
    return admin_url("headgate_django_execution_page", execution_id, site_name=site_name)
