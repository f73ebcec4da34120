"""Hosts (one per agent) and the devices they offer."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Enum, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from backend.db import Base, UTCDateTime, utcnow
from backend.hosts.states import HostStatus


class Host(Base):
    __tablename__ = "hosts"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    address: Mapped[str] = mapped_column(String(255))
    status: Mapped[HostStatus] = mapped_column(
        Enum(HostStatus, native_enum=False, length=16, validate_strings=True)
    )
    port_range_start: Mapped[int] = mapped_column(Integer)
    port_range_end: Mapped[int] = mapped_column(Integer)
    agent_version: Mapped[str | None] = mapped_column(String(64))
    # The identity its agent presented (Hello.identity): while the host is online, a hello
    # under its name with another identity is another machine, and is refused.
    identity: Mapped[str | None] = mapped_column(String(128))
    info: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # What its agent's hello said about its container engine (an EngineInfo's fields); SQL
    # NULL when it has none, so that placement asks only `engine IS NOT NULL`.
    engine: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    registered_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Since when it is drained: it takes no new task, and what runs there is moved off.
    draining_since: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Cordoned: it takes no new task, but what runs there goes on. Why, since when, and by
    # what: "manual" (an operator), "fault" (its agent's probes), "failures" (its tasks'
    # infrastructure failures). Cleared only by an operator (backend.hosts.health).
    cordon_reason: Mapped[str | None] = mapped_column(String(512))
    cordoned_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    cordon_cause: Mapped[str | None] = mapped_column(String(16))
    # What its agent's last health report found (HealthFault fields), and since when.
    faults: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    warnings: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    faults_since: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Faults an operator cleared the cordon for: they cordon it again only once they change.
    acknowledged_faults: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)

    devices: Mapped[list[Device]] = relationship(
        back_populates="host", cascade="all, delete-orphan", order_by="Device.index"
    )


class Device(Base):
    __tablename__ = "devices"
    __table_args__ = (UniqueConstraint("host_id", "index"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"), index=True)
    index: Mapped[int] = mapped_column(Integer)  # the CUDA device index on its host
    kind: Mapped[str] = mapped_column(String(16), default="gpu")
    name: Mapped[str] = mapped_column(String(128))
    uuid: Mapped[str | None] = mapped_column(String(128))
    memory_mb: Mapped[int | None] = mapped_column(Integer)
    simulated: Mapped[bool] = mapped_column(default=False)

    host: Mapped[Host] = relationship(back_populates="devices")
