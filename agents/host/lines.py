"""Splitting a process's output into lines as it arrives, in chunks of any size."""

from __future__ import annotations

from agents.protocol import MAX_LOG_LINE, cut_line


class LineSplitter:
    r"""Bytes in, complete lines out. "\n", "\r\n" and a lone "\r" each end a line.

    Progress bars redraw with "\r"; treating it as a line end makes each redraw a line
    instead of one endless line. A "\r" at the end of a chunk is held back until the next
    chunk shows whether a "\n" follows it.
    """

    def __init__(self, limit: int = MAX_LOG_LINE) -> None:
        self._pending = b""
        self.limit = limit  # characters of a line; the server says how many (welcome)

    def feed(self, chunk: bytes) -> list[str]:
        data = self._pending + chunk
        lines: list[str] = []
        start = 0
        i = 0
        while i < len(data):
            byte = data[i]
            if byte == 0x0A:  # \n
                lines.append(self._decode(data[start:i]))
                start = i + 1
            elif byte == 0x0D:  # \r
                if i + 1 == len(data):
                    break  # wait for the next chunk
                lines.append(self._decode(data[start:i]))
                start = i + 2 if data[i + 1] == 0x0A else i + 1
                i = start - 1
            i += 1
        self._pending = data[start:]
        # A line that never ends must not grow without bound.
        while len(self._pending) > self.limit:
            lines.append(self._decode(self._pending[: self.limit]))
            self._pending = self._pending[self.limit :]
        return lines

    def close(self) -> list[str]:
        """The last, unterminated line, if any."""
        rest, self._pending = self._pending.rstrip(b"\r"), b""
        return [self._decode(rest)] if rest else []

    def _decode(self, raw: bytes) -> str:
        return cut_line(raw.decode("utf-8", errors="replace"), self.limit)
