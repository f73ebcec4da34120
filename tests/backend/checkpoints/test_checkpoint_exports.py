"""Exports of the trained model, reported through the runtime channel like checkpoints: listed
with their format and Keras, written over in place, and never deleted by retention."""

from __future__ import annotations

from fastapi.testclient import TestClient

from agents.protocol import CheckpointAck
from tests.backend.checkpoints.test_checkpoints import (
    ADMIN,
    checkpoint_dir,
    saved,
    submit,
    welcomed,
)


def test_an_export_is_listed_with_its_format_and_survives_retention(client: TestClient) -> None:
    job_id = submit(client)
    export = saved("export", 40, trigger="export", format="saved_model", keras="tf_keras")
    with welcomed(client, job_id) as ws:
        ws.send_text(saved("ckpt-1", 10, keras="tf_keras").model_dump_json())
        assert ws.receive_json()["type"] == "checkpoint_ack"
        ws.send_text(export.model_dump_json())
        assert ws.receive_json() == CheckpointAck(name="export").model_dump(mode="json")
        # A runtime whose retention named the export (it never does) deletes nothing of it.
        ws.send_text(saved("ckpt-5", 50, deleted=["export", "ckpt-1"]).model_dump_json())
        assert ws.receive_json()["type"] == "checkpoint_ack"

    listed = client.get(f"/jobs/{job_id}/checkpoints", headers=ADMIN).json()
    by_name = {c["name"]: c for c in listed}
    assert sorted(by_name) == ["ckpt-5", "export"]
    exported = by_name["export"]
    assert exported["path"] == str(checkpoint_dir(client, job_id) / "export")
    assert (exported["format"], exported["keras"], exported["trigger"]) == (
        "saved_model",
        "tf_keras",
        "export",
    )
    # Regular checkpoints: a tf.train.Checkpoint, and the Keras when the runtime said it.
    assert (by_name["ckpt-5"]["format"], by_name["ckpt-5"]["keras"]) == ("tf_checkpoint", None)
    events = client.get(f"/jobs/{job_id}/events", headers=ADMIN)
    assert events.status_code == 200, events.text
    messages = [e["message"] for e in events.json()]
    assert any("model exported to export (saved_model)" in m for m in messages), messages


def test_an_export_written_again_updates_its_row(client: TestClient) -> None:
    job_id = submit(client, "mirrored")
    with welcomed(client, job_id) as ws:
        for step in (20, 20, 60):  # the first resent, then a second fit's export
            ws.send_text(
                saved(
                    "model.keras", step, trigger="export", format="keras", keras="keras3"
                ).model_dump_json()
            )
            assert ws.receive_json()["type"] == "checkpoint_ack"
    listed = client.get(f"/jobs/{job_id}/checkpoints", headers=ADMIN).json()
    assert [(c["name"], c["step"], c["format"], c["keras"]) for c in listed] == [
        ("model.keras", 60, "keras", "keras3")
    ]
