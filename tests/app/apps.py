from django.apps import AppConfig


class TestAppConfig(AppConfig):
    name = "tests.app"
    label = "testapp"
    default_auto_field = "django.db.models.BigAutoField"
