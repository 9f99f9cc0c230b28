"""Helpers shared by the `klineage` sub-commands."""
from __future__ import annotations

import json
import sys
from collections.abc import Mapping
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
    if not (p / "lineage.json").is_file():
        raise BadInputError(f"{path}: not a lineage directory (no lineage.json)")
    return p


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
