"""Job ids: ULIDs in Crockford's base32, ordered by creation time."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pytest

from headgate_django import envelope
from headgate_django.envelope import new_id, new_ids

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


@pytest.fixture
def empty_pool() -> Iterator[None]:
    """No random parts made ahead, before and after: a test that fakes ``os.urandom`` must
    not leave its fake parts for the ids of later tests."""
    envelope._RANDOM_PARTS.clear()
    yield
    envelope._RANDOM_PARTS.clear()


def _decode(ulid: str) -> int:
    value = 0
    for char in ulid:
        value = value * 32 + _CROCKFORD.index(char)
    return value


def test_an_id_is_26_crockford_characters_holding_the_millisecond_clock() -> None:
    before = int(time.time() * 1000)
    ulid = new_id()
    after = int(time.time() * 1000)
    assert len(ulid) == 26 and set(ulid) <= set(_CROCKFORD)
    assert ulid[0] in "01234567"  # the top character holds two zero bits
    assert before <= _decode(ulid) >> 80 <= after


def test_ids_sort_by_creation_time_and_do_not_repeat(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([1_000.000, 1_000.001, 1_000.002, 2_000_000_000.0])
    monkeypatch.setattr(time, "time", lambda: next(clock))
    ids = [new_id() for _ in range(4)]
    assert ids == sorted(ids) and len(set(ids)) == 4
    assert [_decode(i) >> 80 for i in ids] == [1_000_000, 1_000_001, 1_000_002, 2 * 10**12]


def _random_part(random_bytes: bytes) -> int:
    """The 80 bits an id's last sixteen characters hold: each byte's low five bits."""
    value = 0
    for byte in random_bytes:
        value = value << 5 | byte & 31
    return value


@pytest.mark.parametrize(
    "random_bytes", [b"\x00" * 16, b"\xff" * 16, bytes(range(16)), bytes(range(240, 256))]
)
def test_the_random_part_is_the_low_80_bits(
    monkeypatch: pytest.MonkeyPatch, random_bytes: bytes, empty_pool: None
) -> None:
    monkeypatch.setattr(os, "urandom", lambda n: (random_bytes * (n // 16))[:n])
    assert _decode(new_id()) & (2**80 - 1) == _random_part(random_bytes)


def test_every_character_of_the_random_part_is_equally_likely() -> None:
    """Each random byte maps to one of 32 characters, 8 bytes to each: no character is
    favoured, so the 80 bits are as random as the bytes."""
    from headgate_django.envelope import _RANDOM_CHAR

    chars = bytes(range(256)).translate(_RANDOM_CHAR).decode()
    assert {chars.count(c) for c in _CROCKFORD} == {8}


def test_a_batch_of_ids_is_the_same_encoding_one_id_at_a_time(
    monkeypatch: pytest.MonkeyPatch, empty_pool: None
) -> None:
    randoms = bytes(range(256))[:80]
    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.123)
    monkeypatch.setattr(os, "urandom", lambda n: randoms[:n])
    batch = new_ids(5)
    assert len(batch) == 5 and all(len(i) == 26 and set(i) <= set(_CROCKFORD) for i in batch)
    for n, ulid in enumerate(batch):
        value = _decode(ulid)
        assert value >> 80 == 1_700_000_000_123
        assert value & (2**80 - 1) == _random_part(randoms[16 * n : 16 * n + 16])


def test_threads_making_ids_at_once_never_repeat_one() -> None:
    made: list[list[str]] = [[] for _ in range(8)]

    def make(out: list[str]) -> None:
        out.extend(new_id() for _ in range(5_000))

    threads = [threading.Thread(target=make, args=(out,)) for out in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [i for out in made for i in out]
    assert len(set(everything)) == len(everything) == 40_000


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
# Python 3.12 warns about forking while other threads (the test runner's) exist; the child
# here only makes an id and leaves.
@pytest.mark.filterwarnings("ignore:.*multi-threaded.*fork:DeprecationWarning")
def test_a_forked_child_does_not_hand_out_its_parents_random_parts() -> None:
    """The parent has random parts made ahead; a child forked from it must make its own, or
    the child's next id and the parent's would share their random part."""
    new_id()  # fill the pool
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report one id's random part and leave at once
        os.write(write, new_id()[10:].encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child_part = os.read(read, 16).decode()
    os.close(read)
    assert len(child_part) == 16
    assert child_part != new_id()[10:]
