"""A C++ compiler launcher that reuses the object of a compile it has already done.

The candidates of one `load_inline` host differ in their CUDA source only: the C++ half torch
writes for them (`main.cpp`: the declarations and the pybind11 module, through torch's headers,
tens of seconds of CPU) is the same text under the same flags, in a build folder of its own per
candidate (`gate.extbuild.extension_dir`). Installed as `c++` / `g++` first on the PATH of a
build (`gate.extbuild.tools`), this launcher runs for each command ninja gives that compiler:

- a compile it can key (one source, `-c -o OUT`, dependencies through `-MD`/`-MMD -MF`, no
  option with side files or inputs it cannot see: `parse`) is keyed by the compiler (the
  driver, `cc1plus` and `as`: real path, size, modification time), its arguments (output,
  source and dependency file names aside), the environment variables the compiler reads, and
  the source preprocessed with those arguments (every header's text, every macro, `__DATE__`)
  with the source's folder written as a placeholder in line markers only. Where the key has an
  object, that object is the output (the compile's warnings printed again, the dependency file
  written by the preprocessing); else the compiler compiles as asked, and a compile that
  succeeded is kept under its key;
- every other command (a link, a preprocessing, an option it does not know to be safe, an
  `@file`) runs the real compiler unchanged, as does a compile whose preprocessing fails.

So an object is reused only for the same preprocessed text, arguments, environment and
compiler, and it is the object the compile writes: without debug information gcc names the
source in an object by its base name alone (with `-g` the source's folder and the working
directory are in the key, as they are where a text's code holds its own path, `__FILE__`). A
key is compiled once at a time (a file lock): builds of several candidates at once wait for
the first one's object. At most `MAX_OBJECTS` objects are kept, the least recently used go
first. Options tuned to the machine (`-march=native`) are left to the compiler.

It imports the standard library only: it runs as a script (`python -S -E objcache.py STORE
SHIM_DIR NAME ARGS...`, the shim `install` writes), once per command.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

VERSION = "1"  # of the key and the store's layout
NAMES = ("c++", "g++")  # the compiler names a shim stands for (torch's `CXX`, default `c++`)
MAX_OBJECTS = 64
# What the compiler reads from the environment (gcc's documented variables and the locale,
# which sets the source's character set); the key holds their values.
ENV_KEYS = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "OBJC_INCLUDE_PATH", "GCC_EXEC_PREFIX",
            "COMPILER_PATH", "SOURCE_DATE_EPOCH", "GCC_COMPARE_DEBUG", "LANG", "LC_ALL", "LC_CTYPE")
# gcc writes extra dependency output where these are set: not keyed, left to the compiler.
ENV_REFUSED = ("DEPENDENCIES_OUTPUT", "SUNPRO_DEPENDENCIES")
SOURCE_SUFFIXES = (".cpp", ".cc", ".cxx", ".c++", ".cp", ".CPP", ".C", ".c")
# Options followed by a separate value.
WITH_VALUE = frozenset({"-o", "-MF", "-MT", "-MQ", "-I", "-isystem", "-include", "-imacros",
                        "-iquote", "-idirafter", "-iprefix", "-iwithprefix", "-iwithprefixbefore",
                        "-isysroot", "-D", "-U", "--param", "-Xassembler", "-L", "-l"})
# Options whose compile reads or writes files the key does not see, or that change which
# programs run: such a command is left to the compiler.
REFUSED_PREFIXES = ("@", "-E", "-S", "-M", "-x", "-B", "-wrapper", "-specs", "--specs", "-fplugin",
                    "-fprofile", "-fauto-profile", "-fbranch-probabilities", "--coverage",
                    "-ftest-coverage", "-fcreate-profile", "-save-temps", "-fdump", "-gsplit-dwarf",
                    "-fstack-usage", "-fcallgraph-info", "-fopt-info", "-frecord-gcc-switches",
                    "-flto", "-Wp,", "-Xpreprocessor", "-aux-info", "-v", "-###")
DEP_FLAGS = frozenset({"-MD", "-MMD"})  # allowed among the -M options, with -MF, -MT, -MQ, -MP


@dataclass(frozen=True, slots=True)
class Compile:
    """One compile command: its arguments (the compiler's name aside), its source and output,
    the dependency file it writes (None: none) and whether it names its own dependency
    target (`-MT` / `-MQ`)."""

    args: tuple[str, ...]
    source: str
    output: str
    depfile: str | None
    target_named: bool
    debug: bool


def parse(args: list[str]) -> Compile | None:
    """The compile `args` ask for, or None where the command is not one this launcher keys."""
    source = output = depfile = None
    compiles = deps = target_named = debug = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in WITH_VALUE or arg in ("-MF", "-MT", "-MQ"):
            if i + 1 >= len(args):
                return None
            value = args[i + 1]
            if arg == "-o":
                if output is not None:
                    return None
                output = value
            elif arg == "-MF":
                depfile = value
            elif arg in ("-MT", "-MQ"):
                target_named = True
            i += 2
            continue
        if arg == "-c":
            compiles = True
        elif arg in DEP_FLAGS:
            deps = True
        elif arg == "-MP":
            pass
        elif arg.startswith(REFUSED_PREFIXES) or arg.startswith("-o") or arg.endswith("=native"):
            return None
        elif arg.startswith("-g"):
            debug = debug or arg != "-g0"
        elif arg == "-fworking-directory":
            debug = True
        elif not arg.startswith("-"):
            if source is not None or not arg.endswith(SOURCE_SUFFIXES):
                return None
            source = arg
        i += 1
    if not compiles or source is None or output is None or deps != (depfile is not None):
        return None
    return Compile(tuple(args), source, output, depfile, target_named, debug)


def real_compiler(name: str, shim_dir: str) -> str | None:
    """The compiler `name` resolves to on PATH with the shim's folder left out."""
    shim = os.path.realpath(shim_dir)
    rest = [p for p in os.environ.get("PATH", "").split(os.pathsep)
            if p and os.path.realpath(p) != shim]
    found = shutil.which(name, path=os.pathsep.join(rest))
    return found


def _identity(path: str | None) -> str:
    if not path:
        return "-"
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return real
    return f"{real}:{st.st_size}:{st.st_mtime_ns}"


def _program(compiler: str, prog: str) -> str:
    """The identity of the program `compiler` runs as `prog` (`cc1plus`, `as`)."""
    try:
        named = subprocess.run([compiler, f"-print-prog-name={prog}"], capture_output=True,
                               text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "-"
    return _identity(named if os.sep in named else shutil.which(named))


def _normalized_args(comp: Compile) -> list[str]:
    """`comp`'s arguments with the names that do not change the object written as placeholders."""
    out, skip = [], False
    for i, arg in enumerate(comp.args):
        if skip:
            skip = False
            continue
        if arg in ("-o", "-MF", "-MT", "-MQ"):
            out += [arg, "<name>"]
            skip = True
        elif arg == comp.source and i and comp.args[i - 1] not in WITH_VALUE:
            out.append("<source>")
        else:
            out.append(arg)
    return out


def _normalized_text(text: bytes, comp: Compile) -> tuple[bytes, bool]:
    """The preprocessed `text` with the source's folder written as a placeholder where a line
    marker names it; False (the text kept whole) where it appears elsewhere (the code holds
    its own path: `__FILE__`) or the compile keeps debug information."""
    if comp.debug:
        return text, False
    folder = (os.path.dirname(os.path.abspath(comp.source)) + os.sep).encode()
    at = text.find(folder)
    while at >= 0:
        if not text.startswith(b"# ", text.rfind(b"\n", 0, at) + 1):
            return text, False
        at = text.find(folder, at + len(folder))
    return text.replace(folder, b"<folder>/"), True


def key(comp: Compile, compiler: str, preprocessed: bytes) -> str:
    """The key of `comp`'s object: compiler, arguments, environment and preprocessed text."""
    text, normalized = _normalized_text(preprocessed, comp)
    parts = [VERSION, _identity(compiler), _program(compiler, "cc1plus"), _program(compiler, "as"),
             *_normalized_args(comp), *(f"{k}={os.environ.get(k, '')}" for k in ENV_KEYS)]
    if not normalized:
        parts += [os.path.abspath(comp.source), os.getcwd()]
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() + b"\0")
    digest.update(text)
    return digest.hexdigest()


def preprocess(comp: Compile, compiler: str) -> bytes | None:
    """`comp`'s source preprocessed with its arguments (its dependency file written as the
    compile would write it); None where the preprocessing fails."""
    args, skip = [], False
    for arg in comp.args:
        if skip:
            skip = False
            continue
        if arg == "-o":
            skip = True
            continue
        if arg != "-c":
            args.append(arg)
    if comp.depfile is not None and not comp.target_named:
        args += ["-MQ", comp.output]  # the target a compile's dependency file names
    try:
        done = subprocess.run([compiler, "-E", *args, "-o", "-"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, check=False)
    except OSError:
        return None
    return done.stdout if done.returncode == 0 else None


def _write(path: str, data: bytes) -> None:
    """`data` into `path` whole or not at all."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".objcache-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _evict(store: Path) -> None:
    objects = sorted(store.glob("*.o"), key=lambda p: p.stat().st_mtime_ns)
    for old in objects[:max(0, len(objects) - MAX_OBJECTS)]:
        for suffix in (".o", ".err", ".lock"):
            with contextlib.suppress(OSError):
                old.with_suffix(suffix).unlink()


def run(store: str, shim_dir: str, name: str, args: list[str]) -> int:
    """Run the compiler `name` on `args`, through the store where the command can be keyed."""
    compiler = real_compiler(name, shim_dir)
    if compiler is None:
        print(f"{name}: not found on PATH", file=sys.stderr)
        return 127
    comp = parse(args)
    text = None
    if comp is not None and not any(k in os.environ for k in ENV_REFUSED):
        text = preprocess(comp, compiler)
    if comp is None or text is None:  # not keyed, or the compiler says what is wrong
        os.execv(compiler, [compiler, *args])
    try:
        root = Path(store)
        root.mkdir(parents=True, exist_ok=True)
        lock = root / f"{key(comp, compiler, text)}.lock"
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:  # no store here: compile as asked
        os.execv(compiler, [compiler, *args])
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # the same key compiling elsewhere: wait for its object
        return _through(lock, comp, compiler)
    finally:
        os.close(fd)


def _through(lock: Path, comp: Compile, compiler: str) -> int:
    """Under `lock` (the key's): its object as the output, or compile and keep the object."""
    obj, err = lock.with_suffix(".o"), lock.with_suffix(".err")
    with contextlib.suppress(OSError):
        if obj.exists() and err.exists():
            data, said = obj.read_bytes(), err.read_bytes()
            _write(comp.output, data)
            os.utime(obj)
            sys.stderr.buffer.write(said)
            return 0
    done = subprocess.run([compiler, *comp.args], stderr=subprocess.PIPE, check=False)
    sys.stderr.buffer.write(done.stderr)
    if done.returncode == 0 and os.path.isfile(comp.output):
        with contextlib.suppress(OSError):
            _write(str(err), done.stderr)
            _write(str(obj), Path(comp.output).read_bytes())
            _evict(lock.parent)
    return done.returncode


def install(shim_root: Path, store: Path) -> Path:
    """The folder of shims (`NAMES`) that run this launcher with `store`, written once per
    interpreter, launcher and store."""
    here = Path(__file__).resolve()
    python, launcher, where = (shlex.quote(str(p)) for p in (sys.executable, here, store))
    script = f'#!/bin/sh\nexec {python} -S -E {launcher} {where} "$(dirname "$0")" NAME "$@"\n'
    digest = hashlib.sha256(f"{sys.executable}\0{here}\0{store}\0{script}".encode()).hexdigest()
    folder = shim_root / f"cc-{digest[:16]}"
    if folder.is_dir():
        return folder
    shim_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=shim_root, prefix=".cc-"))
    for name in NAMES:
        shim = tmp / name
        shim.write_text(script.replace(" NAME ", f" {name} "))
        shim.chmod(0o755)
    tmp.chmod(0o755)
    try:
        tmp.rename(folder)
    except OSError:  # written meanwhile by another build
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def works(folder: Path) -> bool:
    """Whether the shims in `folder` run here (a temporary folder may forbid running programs):
    `c++ --version` through the launcher answers as the compiler does."""
    try:
        done = subprocess.run([str(folder / NAMES[0]), "--version"], capture_output=True,
                              timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0 and bool(done.stdout)


if __name__ == "__main__":
    if len(sys.argv) < 4:
        print("usage: objcache.py STORE SHIM_DIR NAME [ARGS...]", file=sys.stderr)
        sys.exit(2)
    sys.exit(run(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]))
