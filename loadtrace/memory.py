"""Process memory from /proc/self/status (Linux); zeros elsewhere rather than an error."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Memory:
    rss: int = 0  # VmRSS, bytes
    hwm: int = 0  # VmHWM: the process's resident high-water mark, bytes

    def peak_since(self, before: "Memory") -> int:
        """Peak RSS since ``before``: the high-water mark if it rose in between, else the larger of the two RSS
        readings (the earlier high-water mark belongs to something before)."""
        return self.hwm if self.hwm > before.hwm else max(self.rss, before.rss)


def process_memory() -> Memory:
    values = {}
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith((b"VmRSS:", b"VmHWM:")):
                    key, value = line.split(b":", 1)
                    values[key] = int(value.split()[0]) * 1024
    except (OSError, ValueError):
        return Memory()
    return Memory(values.get(b"VmRSS", 0), values.get(b"VmHWM", 0))
