"""Zones on the offline paths (issue 33 item 4): ``placement table --zone/--zones`` and
``spark-route --members ... --zone/--zones`` compute the table a zoned cluster with those members
serves - its checksum, its replica sets - where before they could only compute the unzoned one."""

from __future__ import annotations

import json

from placement.table import PlacementTable
from spark_jobs import route

from test_cli_validation import run

MEMBERS = {"a1": 1.0, "a2": 1.0, "b1": 2.0, "b2": 1.0, "c1": 1.0, "x": 1.0}
ZONES = {"a1": "a", "a2": "a", "b1": "b", "b2": "b", "c1": "c"}  # x: a zone of its own



def _member_args():
    return [arg for m, w in MEMBERS.items() for arg in ("--member", f"{m}={w:g}")]


def test_table_with_zones_is_the_zoned_library_table(capsys, tmp_path):
    want = PlacementTable.build(MEMBERS, partitions=512, replicas=3, zones=ZONES)
    code, out, _ = run(["table", *_member_args(), "--partitions", "512", "--replicas", "3", "--json",
                        *[arg for m, z in ZONES.items() for arg in ("--zone", f"{m}={z}")]], capsys)
    assert code == 0 and json.loads(out) == json.loads(want.to_json())
    zones_file = tmp_path / "zones.json"
    zones_file.write_text(json.dumps(ZONES))
    members_file = tmp_path / "members.json"
    members_file.write_text(json.dumps(MEMBERS))
    code, out, _ = run(["table", "--members", str(members_file), "--partitions", "512", "--replicas", "3",
                        "--zones", str(zones_file), "--json"], capsys)
    assert code == 0 and json.loads(out) == json.loads(want.to_json())
    # What zones buy: 3 replicas in 3 distinct zones (4 zones with x's own), leaders unchanged.
    plain = PlacementTable.build(MEMBERS, partitions=512, replicas=3)
    for p in range(512):
        owners = want.owners(p)
        assert len({want.zone_of(m) or m for m in owners}) == 3 and owners[0] == plain.owners(p)[0]
    code, out, _ = run(["table", *_member_args(), "--partitions", "512", "--zone", "a1=a", "--zone", "b1=b"],
                       capsys)
    header = out.splitlines()[1].split()
    rows = {r.split()[0]: r.split() for r in out.splitlines()[2:]}
    assert code == 0 and header[-1] == "zone" and rows["a1"][-1] == "a" and rows["x"][-1] == "-"
    code, out, _ = run(["table", *_member_args(), "--partitions", "512"], capsys)
    assert code == 0 and out.splitlines()[1].split()[-1] == "share"  # no zones: no zone column


def test_bad_zones_are_one_line_errors(capsys, tmp_path):
    args = ["table", "--member", "n1", "--member", "n2", "--partitions", "64"]
    for extra, detail in ((["--zone", "n9=a"], "'n9', which is not a member"),
                          (["--zone", "n1=a", "--zone", "n1=b"], "names member 'n1' twice"),
                          (["--zone", "n1"], "ID=ZONE"),
                          (["--zone", "n1= a"], "surrounding blanks")):
        code, _, err = run([*args, *extra], capsys)
        assert code == 2 and detail in err and len(err.strip().splitlines()) <= 2, (extra, err)
    bad = tmp_path / "zones.json"
    for content, detail in (('["n1", "a"]', 'expected zones as {"id": "zone", ...}'),
                            ('{"n1": 3}', 'expected zones as {"id": "zone", ...}'), ("{nope", "not valid JSON")):
        bad.write_text(content)
        code, _, err = run([*args, "--zones", str(bad)], capsys)
        assert code == 2 and str(bad) in err and detail in err, (content, err)
    code, _, err = run([*args, "--zone", "n1=a", "--zones", str(bad)], capsys)
    assert code == 2 and "not allowed with argument" in err


def test_spark_offline_snapshot_takes_zones_and_routes_to_the_same_leaders(tmp_path, capsys):
    members = tmp_path / "members.json"
    members.write_text(json.dumps(MEMBERS))
    zoned = route.offline_snapshot(str(members), partitions=1000, replicas=2, seed=7, zones=ZONES)
    plain = route.offline_snapshot(str(members), partitions=1000, replicas=2, seed=7)
    want = PlacementTable.build(MEMBERS, partitions=1000, replicas=2, seed=7, zones=ZONES)
    assert zoned.table.checksum == want.checksum != plain.table.checksum
    assert zoned.table.zones == ZONES
    # Items go to leaders, which zones do not move (README, "Zones"): the same routing.
    assert (zoned.table.owner_indices()[1][:, 0] == plain.table.owner_indices()[1][:, 0]).all()
    # Errors come before a Spark session starts.
    base = ["spark-route", "--input", "x", "--key-column", "k"]
    code, _, err = run([*base, "--url", "http://h", "--deliver", "--zone", "a1=a"], capsys)
    assert code == 2 and "--zone/--zones go with --members" in err
    code, _, err = run([*base, "--members", str(members), "--output", "o", "--zone", "nobody=a"], capsys)
    assert code == 2 and "'nobody', which is not a member" in err
