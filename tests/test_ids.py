"""ULIDs: format, monotonic order, prefix resolution and path-derived ids."""

from __future__ import annotations

import pytest
from conftest import write_req

from memstore.errors import AmbiguousId, InvalidRequest, NotFound
from memstore.store import ids
from memstore.store.workspace import Workspace
from memstore.verbs import api


def test_new_ids_are_valid_and_strictly_increasing() -> None:
    made = [ids.new_id() for _ in range(2000)]  # many share a millisecond
    assert all(len(i) == 26 and ids.is_id(i) for i in made)
    assert made == sorted(made)
    assert len(set(made)) == len(made)


def test_ids_in_the_same_millisecond_still_increase() -> None:
    a = ids.new_id(now_ms=1_700_000_000_000)
    b = ids.new_id(now_ms=1_700_000_000_000)
    c = ids.new_id(now_ms=1_699_999_999_999)  # the clock stepping back must not break the order
    assert a < b < c


def test_id_encodes_its_time() -> None:
    ms = 1_763_000_000_123
    assert ids.id_time_ms(ids.new_id(now_ms=ms + 10_000_000)) >= ms


def test_is_id_rejects_uppercase_and_bad_chars() -> None:
    good = ids.new_id()
    assert not ids.is_id(good.upper())
    assert not ids.is_id(good[:25])
    assert not ids.is_id(good[:-1] + "u")  # u is not in Crockford base32
    assert not ids.is_id(None)


def test_derived_id_is_stable_valid_and_path_dependent() -> None:
    a = ids.derived_id("problems/new-20261122-101010.md")
    assert a == ids.derived_id("problems/new-20261122-101010.md")
    assert ids.is_id(a)
    assert a != ids.derived_id("problems/new-20261122-101011.md")


def _two_with_shared_prefix(ws: Workspace) -> tuple[str, str]:
    first = api.write(ws, write_req("fact", "The API server listens on port 8080."))["id"]
    second = api.write(ws, write_req("fact", "Background jobs run in the worker process."))["id"]
    return first, second


def test_prefix_resolution(ws: Workspace) -> None:
    first, second = _two_with_shared_prefix(ws)
    # Same millisecond-ish: they share the time prefix, so a short prefix is ambiguous.
    common = 0
    while first[common] == second[common]:
        common += 1
    assert ws.find(first).id == first
    assert ws.find(first[: max(common + 1, 6)]).id == first
    assert ws.find(first.upper()).id == first  # Crockford is case-insensitive
    assert ws.find(second[: max(common + 1, 6)]).id == second


def test_ambiguous_prefix_is_a_clear_error(ws: Workspace) -> None:
    api.write(ws, write_req("fact", "Fact one about caching."))
    api.write(ws, write_req("fact", "Fact two about logging."))
    # Both ids share their first 6 characters (the time prefix of the same minute).
    prefix = next(iter(ws.catalog("repo").memories))[:6]
    with pytest.raises(AmbiguousId) as exc:
        ws.find(prefix, field_name="memory_id")
    assert exc.value.code == "ambiguous_id"
    assert exc.value.field == "memory_id"
    assert "give more characters" in (exc.value.hint or "")


def test_too_short_prefix_is_refused(ws: Workspace) -> None:
    mid = api.write(ws, write_req("fact", "The cache lives in redis."))["id"]
    with pytest.raises(InvalidRequest) as exc:
        ws.find(mid[:5])
    assert exc.value.code == "bad_id"
    assert "at least 6" in exc.value.message


def test_unknown_prefix_is_not_found(ws: Workspace) -> None:
    api.write(ws, write_req("fact", "Deploys go through ArgoCD."))
    with pytest.raises(NotFound):
        ws.find("zzzzzzzz")
