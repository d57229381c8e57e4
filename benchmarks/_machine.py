"""The machine a benchmark ran on, in words: the CPU's model name, family and model (the
shared hosts change between runs: a table's ratios hold for the CPU it names)."""

from __future__ import annotations

import platform


def cpu_name() -> str:
    """'<model name> (family F model M)' from /proc/cpuinfo, else platform's processor."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']} model {fields['model']})"
    return name
