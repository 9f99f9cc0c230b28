"""Helpers shared by the `klineage` sub-commands."""
from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from kir.errors import BadInputError


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


def lineage_dir(path: str) -> Path:
    p = Path(path)
    if p.is_file() and p.name.endswith(".json"):
        return p.parent
    if not p.exists():
        raise BadInputError(f"{path}: no such lineage directory")
    if not (p / "lineage.json").is_file():
        raise BadInputError(f"{path}: not a lineage directory (no lineage.json)")
    return p


def output_dir(path: str | Path, option: str = "--out") -> Path:
    """The folder an option names for output, created now: a path that is a file, or a folder
    that cannot be created or written, is a `BadInputError` naming it (checked before any work
    starts, so a long run never fails at its end)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise BadInputError(f"{p}: {option} names a file, not a folder")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInputError(f"{p}: cannot create the {option} folder ({exc.strerror})") from None
    if not os.access(p, os.W_OK | os.X_OK):
        raise BadInputError(f"{p}: the {option} folder is not writable")
    return p


def output_file(path: str | Path, option: str = "--output") -> Path:
    """A file an option names for output: its folder is created now; a path that is a folder,
    or under something that is not one, is a `BadInputError` naming it."""
    p = Path(path)
    if p.is_dir():
        raise BadInputError(f"{p}: {option} names a folder, not a file")
    output_dir(p.parent if str(p.parent) else ".", option)
    return p


def set_aside(folder: Path, patterns: Sequence[str]) -> Path | None:
    """Move the files an earlier run wrote into `folder` (those matching `patterns`) into
    `folder/previous-<UTC time of the newest>/`, so that a new run writes beside them and loses
    nothing. Returns that folder, or None when there was nothing to move."""
    found = sorted({p for pattern in patterns for p in folder.glob(pattern) if p.is_file()})
    if not found:
        return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(max(p.stat().st_mtime for p in found)))
    dest, n = folder / f"previous-{stamp}", 1
    while dest.exists():
        dest, n = folder / f"previous-{stamp}-{n}", n + 1
    dest.mkdir()
    for p in found:
        p.replace(dest / p.name)
    return dest


def kernel_text(path: str | Path) -> str:
    """The text of a kernel file given on the command line: a missing path, a folder, an
    unreadable, binary, non-UTF-8 or blank file is a `BadInputError` naming it."""
    p = Path(path)
    if not p.exists():
        raise BadInputError(f"{p}: no such file")
    if not p.is_file():
        raise BadInputError(f"{p}: not a regular file")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise BadInputError(f"{p}: cannot read ({exc.strerror})") from None
    if not data.strip():
        raise BadInputError(f"{p}: empty file (no kernel source)")
    if b"\x00" in data:
        raise BadInputError(f"{p}: binary file, not kernel source")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInputError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


class Progress:
    """Progress of a long run on stderr (a live line on a terminal, plain lines otherwise)."""

    def __init__(self, label: str, enabled: bool = True) -> None:
        self.label = label
        self.enabled = enabled
        self._console = None
        self._status = None
        if enabled:
            from rich.console import Console

            self._console = Console(stderr=True)

    def __enter__(self) -> "Progress":
        if self._console is not None and self._console.is_terminal:
            self._status = self._console.status(self.label)
            self._status.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.__exit__(*exc)

    def __call__(self, event: str, data: Mapping[str, Any]) -> None:
        if self._console is None:
            return
        text = f"[{event}] " + " ".join(f"{k}={v}" for k, v in data.items() if k != "reason")
        if event == "rejected":
            text += f" ({str(data.get('reason', ''))[:120]})"
        if self._status is not None:
            self._status.update(f"{self.label}: {text}")
            if event in ("accepted", "rejected"):
                self._console.log(text)
        else:
            print(f"klineage: {text}", file=sys.stderr, flush=True)


def executor_options(command: Any) -> Any:
    """`--executor local|ray` and `--ray-address` (see `gate.executor`) on a command that runs
    many gates; the command takes `executor` and `ray_address` and opens it with
    `gate.executor.open_executor`."""
    from gate.executor import EXECUTORS

    command = click.option(
        "--ray-address", "ray_address", default=None, metavar="ADDRESS",
        help="With --executor ray: the Ray cluster (default $RAY_ADDRESS, else a cluster "
             "started on this machine for the command).")(command)
    return click.option(
        "--executor", "executor", type=click.Choice(EXECUTORS), default="local", show_default=True,
        help="Where the gates run: this machine, or a Ray cluster (one GPU per device-tier "
             "gate; needs pip install 'klineage[ray]').")(command)
