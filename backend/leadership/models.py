"""The lease (one row) and the replicas that compete for it, written only by the statements
in backend.leadership.statements."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, CheckConstraint, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from backend.db import Base, UTCDateTime

LEASE_ROW = 1  # the one row's id


class Leadership(Base):
    __tablename__ = "leadership"
    __table_args__ = (CheckConstraint(f"id = {LEASE_ROW}", name="one_row"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    holder: Mapped[str] = mapped_column(String(64))  # the leading replica's id
    # One more at each change of holder (and at each take-back by a restarted replica): a
    # write fenced by an older epoch is refused.
    epoch: Mapped[int] = mapped_column(BigInteger)
    # The database's clock, never a replica's: replicas' clocks may disagree.
    renewed_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)


class ServerReplica(Base):
    """A replica that ran on this database: where the others forward to it while it leads."""

    __tablename__ = "server_replicas"

    replica: Mapped[str] = mapped_column(String(64), primary_key=True)
    url: Mapped[str] = mapped_column(String(2048))  # its STRATA_ADVERTISE_URL
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    renewed_at: Mapped[datetime] = mapped_column(UTCDateTime)  # its last tick, leader or not
