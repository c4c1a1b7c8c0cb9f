"""Plan caches: LRU bound, statistics, clearing, the registry, concurrent builds."""
from __future__ import annotations

import threading

import pytest

from dnnbind.highlevel.gpu import cache as cache_module
from dnnbind.highlevel.gpu.cache import CacheInfo, PlanCache, cache_info, clear_caches


def test_hits_misses_and_lru_eviction():
    c = PlanCache("test.lru", maxsize=2)
    built = []

    def build(key):
        return lambda: built.append(key) or f"plan {key}"

    assert c.get("a", build("a")) == "plan a"
    assert c.get("b", build("b")) == "plan b"
    assert c.get("a", build("a")) == "plan a"          # hit; "a" is now the most recently used
    assert c.get("c", build("c")) == "plan c"          # evicts "b", the least recently used
    assert "a" in c and "c" in c and "b" not in c
    assert built == ["a", "b", "c"]
    assert c.info() == CacheInfo("test.lru", hits=1, misses=3, evictions=1, size=2, maxsize=2)
    assert c.get("b", build("b")) == "plan b"          # rebuilt after eviction
    assert built == ["a", "b", "c", "b"]
    assert c.info().evictions == 2 and len(c) == 2


def test_a_failed_build_stores_nothing():
    c = PlanCache("test.failing", maxsize=4)

    def boom():
        raise RuntimeError("no plan")

    with pytest.raises(RuntimeError, match="no plan"):
        c.get("k", boom)
    assert "k" not in c and c.info().misses == 1 and c.info().size == 0
    assert c.get("k", lambda: 7) == 7


def test_resize_evicts_and_clear_resets():
    c = PlanCache("test.resize", maxsize=10)
    for i in range(6):
        c.get(i, lambda i=i: i)
    c.resize(3)
    assert c.info().size == 3 and c.info().evictions == 3
    assert [k for k in range(6) if k in c] == [3, 4, 5]
    c.clear()
    assert c.info() == CacheInfo("test.resize", 0, 0, 0, 0, 3)
    with pytest.raises(ValueError, match=r"maxsize=0 must be a positive int"):
        c.resize(0)
    with pytest.raises(ValueError, match="maxsize"):
        PlanCache("test.bad", maxsize=True)


def test_stays_within_its_bound_under_many_keys():
    c = PlanCache("test.bound", maxsize=16)
    for i in range(1000):
        c.get(i % 37, lambda: object())
        assert len(c) <= 16
    info = c.info()
    assert info.size == 16 and info.hits + info.misses == 1000 and info.evictions == info.misses - 16


def test_registry_by_prefix():
    a = PlanCache("test.reg.one", maxsize=4)
    b = PlanCache("test.reg.two", maxsize=4)
    other = PlanCache("test.other", maxsize=4)
    for c in (a, b, other):
        c.get("k", lambda: 1)
    infos = cache_info("test.reg.")
    assert sorted(infos) == ["test.reg.one", "test.reg.two"]
    assert all(i.size == 1 and i.misses == 1 for i in infos.values())
    clear_caches("test.reg.")
    assert a.info().size == b.info().size == 0
    assert other.info().size == 1
    assert "test.other" in cache_module.cache_info()


def test_concurrent_gets_agree_on_one_plan():
    c = PlanCache("test.threads", maxsize=8)
    start = threading.Barrier(8)
    results = []

    def work():
        start.wait()
        results.append(c.get("same", lambda: object()))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(r) for r in results}) == 1
    assert c.info().size == 1 and c.info().hits + c.info().misses == 8
