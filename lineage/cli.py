"""The `klineage` command line.

Every sub-command lives in its own module under `lineage/commands/` and is imported only when it
is invoked, so `klineage --help` stays fast and a GPU library is never imported by a command that
does not need it. Expected failures (`KLineageError`) become one line on stderr and exit code 2;
with `--json` among the arguments the same failure is also one JSON object on stdout,
`{"error": <message>, "exit": <code>}` (also for SIGTERM, 143, and Ctrl-C, 130), so a program
reading stdout always gets JSON.
"""
from __future__ import annotations

import importlib
import signal
import sys
import threading
from collections.abc import Sequence

import click

from kir.errors import KLineageError

# command name -> (module under lineage.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "anchors": ("anchors", "List the anchors of a kernel file, optionally filtered by a query."),
    "diff": ("diff", "Structured (GumTree-style) diff of two kernels."),
    "gate": ("gate", "Run the compile / correctness / profile gate on a kernel."),
    "cases": ("cases", "List the workloads (cases) and their expert kernels."),
    "bench": ("bench", "Benchmark the expert kernels against their vendor references on the GPU."),
    "passes": ("passes", "List the optimization passes and their declarations."),
    "deps": ("deps", "The pass-dependency graph, optionally for one kernel."),
    "induce": ("induce", "Induce a lineage from an expert kernel by guided de-optimization."),
    "show": ("show", "Summarize a lineage directory."),
    "export": ("export", "Export a lineage as GraphML, DOT or node-link JSON."),
    "report": ("report", "Write the HTML report of a lineage."),
    "skills": ("skills", "List or retrieve SkillCards from a library."),
    "optimize": ("optimize", "Optimize a kernel with admitted SkillCards under the gate."),
    "demo": ("demo", "The main job: induce the gemm expert's lineage and write its report."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module_name, help_text = COMMANDS[cmd_name]
        try:
            module = importlib.import_module(f"lineage.commands.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"lineage.commands.{module_name}":
                raise

            @click.command(cmd_name, help=help_text + " (not available in this build)")
            def unavailable() -> None:
                raise KLineageError(f"command '{cmd_name}' is not available in this build")

            return unavailable
        return module.command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="klineage")
def cli() -> None:
    """KLineage: learn when a GPU-kernel optimization is sound."""


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is so that it unwinds as from Ctrl-C: each gate's
    worker group (and the ptxas it runs) is stopped on the way out, not left to run."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated


def main(argv: list[str] | None = None) -> int:
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return _main(argv)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        cli.main(args=argv, prog_name="klineage", standalone_mode=False)
    except click.exceptions.Abort as exc:
        if isinstance(exc.__cause__, _Terminated) or isinstance(exc.__context__, _Terminated):
            return _fail(args, 143, "terminated")
        return _fail(args, 130, "aborted")
    except _Terminated:
        return _fail(args, 143, "terminated")
    except click.ClickException as exc:  # usage errors: bad option, missing argument
        return _fail(args, 2, _one_line(exc.format_message()), "error: ")
    except KLineageError as exc:
        return _fail(args, 2, _one_line(str(exc)), "error: ")
    except OSError as exc:  # a file the user named cannot be read or written
        where = f"{exc.filename}: " if exc.filename else ""
        return _fail(args, 2, f"{where}{exc.strerror or exc}", "error: ")
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except SystemExit as exc:  # a command chose its exit code (e.g. gate: 1 = rejected)
        return int(exc.code or 0)
    return 0


def _fail(args: Sequence[str], code: int, message: str, label: str = "") -> int:
    """Report a failure: `klineage: <label><message>` on stderr and, when `--json` was asked for,
    `{"error": message, "exit": code}` on stdout. Returns `code`."""
    click.echo(f"klineage: {label}{message}", err=True)
    if _json_requested(args):
        from lineage.commands._common import emit_json  # noqa: PLC0415

        try:
            emit_json({"error": message, "exit": code})
        except OSError:  # stdout already closed (a reader that quit): stderr and the code say it
            pass
    return code


def _json_requested(args: Sequence[str]) -> bool:
    """Whether `--json` is among the arguments, before the subcommand or after it, up to a `--`.
    The tokens are read rather than click's parse because the failure may be that parse (and
    `--json` before the subcommand is itself a usage error: each command defines its own)."""
    for token in args:
        if token == "--":
            return False
        if token == "--json":
            return True
    return False


_LONGEST_ERROR = 1000  # characters of an error line; an input echoed into it may be huge


def _one_line(text: str) -> str:
    """An error message as one line (a multi-line message, e.g. from a parser, is joined), cut
    to `_LONGEST_ERROR` characters with the length it had."""
    line = " ".join(part.strip() for part in text.splitlines() if part.strip())
    if len(line) <= _LONGEST_ERROR:
        return line
    return f"{line[:_LONGEST_ERROR]}... (cut: {len(line)} characters)"


if __name__ == "__main__":
    sys.exit(main())
