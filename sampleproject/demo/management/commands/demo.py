"""``manage.py demo``: an admin user and demo jobs, idempotently."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Q

from headgate_django import DuplicateError, Envelope, enqueue
from sampleproject.demo import tasks

USERNAME = "admin"
PASSWORD = "headgate-demo"


class Command(BaseCommand):
    help = "Create the demo admin user and enqueue demo jobs (safe to run again)."

    def handle(self, *args: Any, **options: Any) -> None:
        # Else the first query below fails with a traceback about a missing table.
        executor = MigrationExecutor(connection)
        if executor.migration_plan(executor.loader.graph.leaf_nodes()):
            raise CommandError("the database is not migrated: run `manage.py migrate` first")
        User = get_user_model()
        if not User.objects.filter(username=USERNAME).exists():
            User.objects.create_superuser(USERNAME, "admin@example.com", PASSWORD)
        self._operator()
        today = date.today()
        envelopes: list[Envelope] = []
        for user_id in range(1, 21):
            envelopes.append(
                _keyed(tasks.send_welcome_email.envelope(user_id=user_id), f"welcome:{user_id}")
            )
        for days in range(5):
            day = (today - timedelta(days=days)).isoformat()
            envelopes.append(_keyed(tasks.build_report.envelope(day=day), f"report:{day}"))
        envelopes.append(_keyed(tasks.import_pages.envelope(pages=30), "import:demo"))
        envelopes.append(_keyed(tasks.wait_for_partner.envelope(order=42), "partner:42"))
        created = self._workflows(today.isoformat()) + self._durable()
        for env in envelopes:
            try:
                enqueue(env)
                created += 1
            except DuplicateError:
                pass  # already waiting from an earlier run
        self.stdout.write(self.style.SUCCESS(f"Enqueued {created} demo job(s) and workflow(s)."))
        self.stdout.write(f"Admin user: {USERNAME} / password: {PASSWORD}")

    def _operator(self) -> None:
        """The API user of rundemo's operator port: may read everything headgate stores
        (payloads included) and operate it, with no password to log in with."""
        from django.contrib.auth.models import Permission

        from sampleproject.auth import OPERATOR

        user, created = get_user_model().objects.get_or_create(username=OPERATOR)
        if created:
            user.set_unusable_password()
            user.save()
        permissions = Permission.objects.filter(content_type__app_label="headgate_django").filter(
            Q(codename__startswith="view_") | Q(codename="operate")
        )
        user.user_permissions.add(*permissions)

    def _workflows(self, day: str) -> int:
        """Each example once: a workflow that already exists is left as it is."""
        from headgate_django.models import Job
        from sampleproject.demo import workflows as w

        examples = {
            f"daily-import:{day}": lambda: w.daily_import(day).prepare(),
            "onboarding:42": lambda: w.onboarding(42).prepare(),
            "release:42": lambda: w.release(42).prepare(),
            "follow-up:42": lambda: w.follow_up(42).prepare(),
            "approval:42": lambda: w.approval_gate(42).prepare(),
            "checkout:42": lambda: w.checkout(42),
        }
        created = 0
        for workflow_id, build in examples.items():
            if not Job.objects.filter(pk=f"{workflow_id}:coordinator").exists():
                enqueue(build())
                created += 1
        return created

    def _durable(self) -> int:
        """Two durable checkouts: one that completes, one whose charge ends uncertain."""
        from headgate_django import durable

        client = durable.Client()
        orders = {
            "order:42": {"order": 42, "amount": 99},
            "order:43": {"order": 43, "amount": 15, "provider_times_out": True},
        }
        return sum(
            not client.start("checkout", "1", order, business_idempotency_key=key).deduplicated
            for key, order in orders.items()
        )


def _keyed(env: Envelope, key: str) -> Envelope:
    from dataclasses import replace

    return replace(env, unique_key=key)
