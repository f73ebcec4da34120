"""POST /hosts/{name}/cordon and /uncordon: audited, shown in GET /hosts, GET /cluster and
/metrics; a heartbeat's fault reaches the host through the controller's next pass."""

from __future__ import annotations

import time

from agents.protocol import HealthFault, HostHealth
from tests.conftest import Api
from tests.support.factories import make_host


async def test_an_operator_cordons_and_clears_a_host(api: Api) -> None:
    async with api.session() as session:
        await make_host(session, "host-a")
        await session.commit()
    missing = await api.http.post("/hosts/nowhere/cordon", json={"reason": "x"})
    assert missing.status_code == 404
    assert (await api.http.post("/hosts/host-a/cordon", json={})).status_code == 422

    cordoned = await api.http.post("/hosts/host-a/cordon", json={"reason": "fan noise"})
    assert cordoned.status_code == 200, cordoned.text
    body = cordoned.json()
    assert (body["cordon_reason"], body["cordon_cause"]) == ("fan noise", "manual")
    [listed] = (await api.http.get("/hosts")).json()
    assert listed["cordon_reason"] == "fan noise" and listed["cordoned_at"] is not None
    [shown] = (await api.http.get("/cluster")).json()["hosts"]
    assert (shown["cordon_reason"], shown["cordon_cause"]) == ("fan noise", "manual")
    metrics = (await api.http.get("/metrics")).text
    assert 'strata_host_cordoned{cause="manual",host="host-a"} 1.0' in metrics

    cleared = await api.http.post("/hosts/host-a/uncordon")
    assert cleared.status_code == 200 and cleared.json()["cordon_reason"] is None
    [shown] = (await api.http.get("/cluster")).json()["hosts"]
    assert shown["cordon_reason"] is None
    assert "strata_host_cordoned{" not in (await api.http.get("/metrics")).text
    audit = (await api.http.get("/audit", params={"action": "host.cordon"})).json()["items"]
    assert [(e["target"], e["detail"]) for e in audit] == [("host host-a", {"reason": "fan noise"})]
    audit = (await api.http.get("/audit", params={"action": "host.uncordon"})).json()["items"]
    assert audit[0]["detail"]["cleared"] == {"reason": "fan noise", "cause": "manual"}


async def test_a_reported_fault_cordons_the_host_in_the_next_pass(api: Api) -> None:
    async with api.session() as session:
        await make_host(session, "host-a")
        await session.commit()
    app = api.app
    reports = app.state.agent_reports  # type: ignore[attr-defined]
    now = time.time()
    disk = HealthFault(kind="disk_space", path="/data", detail="200 MiB free, below 1 GiB")
    reports.on_health("host-a", HostHealth(faults=[disk], checked_at=now, wall_time=now))
    await app.state.controller.reconcile()  # type: ignore[attr-defined]
    [host] = (await api.http.get("/hosts")).json()
    assert host["cordon_reason"] == "/data: 200 MiB free, below 1 GiB"
    assert host["cordon_cause"] == "fault"
    assert [f["kind"] for f in host["faults"]] == ["disk_space"]
    metrics = (await api.http.get("/metrics")).text
    assert 'strata_host_faults{host="host-a",kind="disk_space"} 1.0' in metrics
    # Cleared while it is still reported: acknowledged, so the same report does not cordon.
    assert (await api.http.post("/hosts/host-a/uncordon")).status_code == 200
    reports.on_health("host-a", HostHealth(faults=[disk], checked_at=now, wall_time=now))
    await app.state.controller.reconcile()  # type: ignore[attr-defined]
    assert (await api.http.get("/hosts")).json()[0]["cordon_reason"] is None
