"""The agent forgets log lines only once the server acknowledges them."""

from __future__ import annotations

from agents.host.supervisor import LOG_BUFFER_LINES, LogBuffer


def test_sent_lines_stay_until_acked_and_are_resent_after_a_reconnect() -> None:
    buffer = LogBuffer()
    buffer.add(["a", "b", "c"])
    assert buffer.unsent() == (0, ["a", "b", "c"])
    buffer.sent(3)
    assert buffer.unsent() == (3, [])
    buffer.acked(2)  # the server stored a and b
    assert (buffer.first_line, buffer.lines) == (2, ["c"])
    buffer.add(["d"])
    buffer.resend()  # new connection: c may never have arrived
    assert buffer.unsent() == (2, ["c", "d"])


def test_stale_or_excess_acks_are_harmless() -> None:
    buffer = LogBuffer()
    buffer.add(["a", "b"])
    buffer.sent(2)
    buffer.acked(2)
    buffer.acked(1)
    buffer.acked(99)
    assert (buffer.first_line, buffer.lines, buffer.in_flight) == (2, [], 0)


def test_overflow_drops_the_oldest_and_keeps_numbering() -> None:
    buffer = LogBuffer()
    buffer.add([str(i) for i in range(LOG_BUFFER_LINES + 5)])
    first, batch = buffer.unsent()
    assert first == 5 and batch[0] == "5"
