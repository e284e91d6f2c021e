import os
import time

from django.apps import AppConfig


class TestAppConfig(AppConfig):
    name = "tests.app"
    label = "testapp"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # HEADGATE_TEST_SLOW_DUTIES="<count>:<seconds>": a worker subprocess also runs that
        # many extra duties on every heartbeat, each sleeping that long (a busy maintenance
        # pass, for tests/integration/test_lease_renewal.py).
        if slow := os.environ.get("HEADGATE_TEST_SLOW_DUTIES"):
            from headgate_django.worker.duties import EXTRA_DUTIES, Duty

            count, seconds = slow.split(":")

            def sleep() -> dict[str, object]:
                time.sleep(float(seconds))
                return {}

            for n in range(int(count)):
                EXTRA_DUTIES.append(lambda n=n: Duty(f"test-slow-{n}", 0.0, sleep))
