"""Per-partition work rates (``placement.service.load_meter``) and where a node takes them:
``Node.record_load``, the work sink's accepted items, ``GET /v1/load``."""

from __future__ import annotations

import asyncio
import math

import httpx
import pytest

from placement.service.http_api import create_app
from placement.service.load_meter import LoadMeter
from placement.service.node import Node
from placement.service.work_sink import create_sink_app

from test_node import config


def test_a_rate_halves_every_half_life_and_a_steady_stream_reads_its_rate():
    meter = LoadMeter(half_life_s=10.0)
    for t in range(0, 100):  # 5 units a second for 100 s
        meter.record(7, 5.0, float(t))
    assert meter.rate(7, 99.0) == pytest.approx(5.0, rel=0.05)
    assert meter.rate(7, 109.0) == pytest.approx(meter.rate(7, 99.0) / 2, rel=1e-9)
    assert meter.rate(3, 99.0) == 0.0  # never recorded


def test_idle_partitions_are_forgotten_and_bad_units_refused():
    meter = LoadMeter(half_life_s=1.0, forget_below=0.01)
    meter.record(1, 1.0, 0.0)
    meter.record(2, 100.0, 0.0)
    assert set(meter.rates(0.0)) == {1, 2}
    assert set(meter.rates(10.0)) == {2}  # 1's rate fell below 0.01 in 10 half-lives: dropped
    assert meter.rate(1, 10.0) == 0.0
    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(ValueError):
            meter.record(1, bad, 11.0)
    with pytest.raises(ValueError):
        LoadMeter(half_life_s=0)


def test_a_node_measures_what_it_is_told_and_what_its_work_sink_accepts():
    async def main():
        node = await Node(config("n1", ownership="available")).start()
        try:
            node.record_load(3, 2.0)
            with pytest.raises(ValueError):
                node.record_load(node.config.partitions)  # not a partition
            sink = create_sink_app(node)
            key = next(f"k{i}" for i in range(100) if node.table.partition_of(f"k{i}") != 3)
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=sink), base_url="http://t") as client:
                r = await client.post("/v1/work", json={"job": "j", "items": [{"id": 1, "key": key}]})
                assert r.status_code == 200, r.text
                load = (await client.get("/v1/load")).json()
            rates = node.load_rates()
            assert set(rates) == {3, node.table.partition_of(key)}
            assert rates[3] > rates[node.table.partition_of(key)] > 0  # 2 units against 1
            assert set(load["partitions"]) == {str(p) for p in rates}  # (the rates decay between the two reads)
            assert load["total"] > 0 and load["half_life_s"] == 60.0
            plain = create_app(node)
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=plain), base_url="http://t") as client:
                assert (await client.get("/v1/load")).json()["node"] == "n1"
        finally:
            await node.leave()

    asyncio.run(main())
