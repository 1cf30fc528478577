"""Version patterns for patches: exact `0.8.0`, wildcard `0.8.*`, comparisons `>=0.8` `<0.17` `>` `<=` `==`,
and inclusive ranges `0.8.0~0.8.5`. An unknown version never matches a pattern."""
from __future__ import annotations

import re

_NUMERIC_PREFIX = re.compile(r"^\s*v?(\d+(?:\.\d+)*)")


def parse_version(text: str) -> tuple[int, ...] | None:
    """`2.13.0+cpu` -> (2, 13, 0); `0.16.1rc2` -> (0, 16, 1); garbage -> None."""
    match = _NUMERIC_PREFIX.match(text or "")
    return tuple(int(part) for part in match.group(1).split(".")) if match else None


def _compare(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    width = max(len(a), len(b))
    a, b = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
    return (a > b) - (a < b)


def version_matches(version: str | None, pattern: str) -> bool:
    current = parse_version(version) if version and version != "unknown" else None
    if current is None:
        return False
    pattern = pattern.strip()
    if "~" in pattern:
        low, high = (parse_version(part) for part in pattern.split("~", 1))
        if low is None or high is None:
            raise ValueError(f"bad version range {pattern!r}; expected e.g. 0.8.0~0.8.5")
        return _compare(current, low) >= 0 and _compare(current, high) <= 0
    for operator in (">=", "<=", "==", ">", "<"):
        if pattern.startswith(operator):
            bound = parse_version(pattern[len(operator):])
            if bound is None:
                raise ValueError(f"bad version pattern {pattern!r}")
            order = _compare(current, bound)
            return {">=": order >= 0, "<=": order <= 0, "==": order == 0, ">": order > 0, "<": order < 0}[operator]
    if pattern.endswith(".*"):
        prefix = parse_version(pattern[:-2])
        if prefix is None:
            raise ValueError(f"bad version pattern {pattern!r}")
        return current[: len(prefix)] == prefix
    exact = parse_version(pattern)
    if exact is None:
        raise ValueError(f"bad version pattern {pattern!r}")
    return _compare(current, exact) == 0


def any_version_matches(version: str | None, patterns: tuple[str, ...]) -> bool:
    """No patterns: the patch is not version-gated and always matches."""
    return not patterns or any(version_matches(version, pattern) for pattern in patterns)


def cpu_patches_failure(backend: str, library: str, version: str | None, versions: tuple[str, ...],
                        install: str) -> str | None:
    """One line when a CPU run's library release is outside the versions its `<backend>.cpu.*` patches were written
    for (`install`: the release to install instead); None when they cover it."""
    if any_version_matches(version, versions):
        return None
    return (f"backend={backend} on the CPU: {library} {version or '(not installed)'} is outside the releases the "
            f"{backend}.cpu.* patches were written for ({', '.join(versions)}); install {install} "
            f"(pip install 'primus-hydra[{backend}]') or run on GPUs")
