"""Payload encryption: AES-256-GCM per payload with a key id, decrypted only in the
worker; fingerprints, results and logs stay plaintext; an unknown key id or an altered
ciphertext makes the job undecodable with that reason; keys rotate through the ring."""

from __future__ import annotations

import base64
import dataclasses
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from headgate_django import enqueue, store, task, testing
from headgate_django.enqueue import enqueue_one
from headgate_django.envelope import fingerprint
from headgate_django.exceptions import ConfigurationError
from headgate_django.kernel import sealed
from headgate_django.models import Job
from headgate_django.store.operator import job_replace_payload
from headgate_django.workflows import Workflow

pytest.importorskip("cryptography", reason="needs cryptography (the [encryption] extra)")
pytestmark = pytest.mark.django_db

K1, K2 = b"1" * 32, base64.b64encode(b"2" * 32).decode()
ON_K1 = {"ENCRYPTION_KEYS": {"k1": K1}, "ENCRYPTION_KEY_ID": "k1"}
SECRET = "card-4242"


@task(kind="test.sealed.card")
def echo(ctx, card: str):
    ctx.log.info("charged", last4=card[-4:])
    return {"card_tail": card[-4:]}


def payload_of(job_id: str) -> bytes:
    return bytes(Job.objects.get(pk=job_id).payload)


def test_the_stored_payload_is_sealed_and_the_worker_opens_it():
    with override_settings(HEADGATE=ON_K1):
        job_id = echo.enqueue(card=SECRET)
        stored = payload_of(job_id)
        assert sealed.is_sealed(stored) and SECRET.encode() not in stored
        assert sealed.key_id_of(stored) == "k1"
        plain = echo.envelope(card=SECRET).payload
        assert Job.objects.get(pk=job_id).fingerprint == fingerprint(echo.kind, plain)
        assert testing.run_one() == (job_id, "completed")
    job = Job.objects.get(pk=job_id)
    assert job.result == {"card_tail": "4242"}
    assert job.logs[0]["entries"][0]["fields"] == {"last4": "4242"}


def test_keys_rotate_through_the_ring():
    with override_settings(HEADGATE=ON_K1):
        old = echo.enqueue(card="old-1111")
    ring = {"ENCRYPTION_KEYS": {"k1": K1, "k2": K2}, "ENCRYPTION_KEY_ID": "k2"}
    with override_settings(HEADGATE=ring):
        new = echo.enqueue(card="new-2222")
        assert sealed.key_id_of(payload_of(new)) == "k2"
        assert {testing.run_one()[1], testing.run_one()[1]} == {"completed"}
    assert Job.objects.get(pk=old).result == {"card_tail": "1111"}


def test_an_unknown_key_id_is_undecodable_with_that_reason():
    with override_settings(HEADGATE=ON_K1):
        job_id = echo.enqueue(card=SECRET)
    with override_settings(HEADGATE={"ENCRYPTION_KEYS": {"k2": K2}}):
        assert testing.run_one() == (job_id, "undecodable")
    job = Job.objects.get(pk=job_id)
    assert job.errors[-1]["error"] == "payload is encrypted with unknown key id 'k1'"


def test_an_altered_ciphertext_is_undecodable():
    with override_settings(HEADGATE=ON_K1):
        job_id = echo.enqueue(card=SECRET)
        stored = bytearray(payload_of(job_id))
        stored[-1] ^= 1
        Job.objects.filter(pk=job_id).update(payload=bytes(stored))
        assert testing.run_one() == (job_id, "undecodable")
    assert "does not decrypt with key 'k1'" in Job.objects.get(pk=job_id).errors[-1]["error"]


def test_plain_payloads_still_run_with_encryption_on():
    job_id = echo.enqueue(card=SECRET)
    with override_settings(HEADGATE=ON_K1):
        assert testing.run_one() == (job_id, "completed")


def test_internal_jobs_stay_plain_and_workflow_nodes_are_sealed():
    with override_settings(HEADGATE=ON_K1):
        enqueue(Workflow("sealed-wf").add("pay", echo.envelope(card=SECRET), []).prepare())
        jobs = {j.kind: bytes(j.payload) for j in Job.objects.filter(workflow_id="sealed-wf")}
        assert not sealed.is_sealed(jobs["headgate:workflow"])
        assert sealed.is_sealed(jobs[echo.kind])
        testing.run_jobs(include_scheduled=True)
    assert Job.objects.get(workflow_id="sealed-wf", kind=echo.kind).state == "completed"


def test_a_repaired_payload_is_sealed_too():
    from headgate_django.kernel.states import State
    from tests.conformance.helpers import job_in_state

    job_id, _ = job_in_state(State.UNDECODABLE, kind=echo.kind)
    with override_settings(HEADGATE=ON_K1):
        job_replace_payload(job_id, payload=echo.envelope(card=SECRET).payload)
        assert sealed.is_sealed(payload_of(job_id))
        store.job_operator_retry(job_id)
        assert testing.run_one() == (job_id, "completed")


@pytest.mark.parametrize(
    "mode",
    [
        {"deadline": timedelta(hours=1)},
        {"unique_key": "card", "unique_window": timedelta(minutes=1)},
        {"unique_key": "card", "unique_debounce": timedelta(minutes=1)},
        {"unique_key": "card", "unique_replace": frozenset({"payload"})},
    ],
    ids=["deadline", "throttle", "debounce", "replace"],
)
def test_enqueue_one_seals_the_payload_of_a_new_job_and_of_a_replaced_holder(mode):
    """``enqueue_one`` (the HTTP enqueue's path) seals as ``enqueue`` does, for a job with a
    uniqueness mode or a deadline too, and for the values a waiting holder takes."""
    with override_settings(HEADGATE=ON_K1):
        first = enqueue_one(dataclasses.replace(echo.envelope(card=SECRET), **mode))
        assert first.replaced is False
        assert sealed.is_sealed(payload_of(first.id))
        assert SECRET.encode() not in payload_of(first.id)
        if "unique_debounce" in mode or "unique_replace" in mode:
            again = enqueue_one(dataclasses.replace(echo.envelope(card="card-5555"), **mode))
            assert again == (first.id, True)
            assert sealed.is_sealed(payload_of(first.id))
            assert b"card-5555" not in payload_of(first.id)
            Job.objects.filter(pk=first.id).update(scheduled_at=timezone.now())
            if "unique_debounce" in mode:
                Job.objects.filter(pk=first.id).update(state="available")
            assert testing.run_one() == (first.id, "completed")
            assert Job.objects.get(pk=first.id).result == {"card_tail": "5555"}


def test_a_current_key_missing_from_the_ring_refuses_the_enqueue_and_writes_nothing():
    missing = override_settings(HEADGATE={"ENCRYPTION_KEY_ID": "k9"})
    with missing, pytest.raises(ConfigurationError, match="cannot encrypt"):
        echo.enqueue(card=SECRET)
    assert not Job.objects.filter(kind=echo.kind).exists()


@pytest.mark.parametrize(
    "raw",
    [{"k": b"short"}, {"k": "not base64!"}, {"": K1}, {"k\n": K1}, {"k" * 65: K1}],
)
def test_bad_rings_are_refused(raw):
    with pytest.raises(ValueError):
        sealed.parse_ring(raw)


def test_the_console_shows_the_key_id_not_the_bytes():
    from django.contrib.auth.models import User
    from django.test import Client

    with override_settings(HEADGATE=ON_K1):
        job_id = echo.enqueue(card=SECRET)
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    page = client.get(f"/admin/headgate_django/job/{job_id}/change/").content.decode()
    assert "encrypted with key id &#x27;k1&#x27;" in page and SECRET not in page


def test_a_project_without_encryption_never_imports_cryptography():
    """Its import costs about 15 ms in every process that starts; only sealing or opening
    a payload needs it."""
    from tests.conftest import fresh_python

    code = (
        "import sys\n"
        "from headgate_django.kernel import sealed\n"
        "assert sealed.AVAILABLE and sealed.is_sealed(b'{}') is False\n"
        "assert 'cryptography' not in sys.modules\n"
    )
    result = fresh_python(code)
    assert result.returncode == 0, result.stderr
