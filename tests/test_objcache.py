"""gate.objcache: a compile's object reused only where the same compile was done, and the build
tools of a load_inline extension (gate.extbuild.tools)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gate import extbuild, objcache

needs_cxx = pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler on PATH")

SOURCE = """#include <vector>
#include "scale.h"
int grow(int n) { std::vector<int> v(n); return (int)v.size() * SCALE; }
static int first = grow(3);
int first_value() { return first; }
"""


@pytest.fixture
def shimmed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH with the launcher's shims first; the store is `tmp_path / "store"`."""
    shims = objcache.install(tmp_path / "shims", tmp_path / "store")
    monkeypatch.setenv("PATH", f"{shims}{os.pathsep}{os.environ['PATH']}")
    return tmp_path / "store"


def _tree(root: Path, name: str, scale: int = 2, source: str = SOURCE) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "m.cpp").write_text(source)
    (folder / "scale.h").write_text(f"#define SCALE {scale}\n")
    return folder


def _compile(folder: Path, *flags: str, compiler: str = "c++") -> subprocess.CompletedProcess:
    return subprocess.run([compiler, "-MMD", "-MF", "m.o.d", "-fPIC", *flags, "-c",
                           str(folder / "m.cpp"), "-o", "m.o"], cwd=folder, capture_output=True,
                          text=True, check=False)


def _objects(store: Path) -> list[Path]:
    return sorted(store.glob("*.o"))


@pytest.mark.parametrize(("args", "keyed"), [
    (["-MMD", "-MF", "m.o.d", "-O2", "-c", "m.cpp", "-o", "m.o"], True),
    (["-DX=1", "-isystem", "/inc", "-c", "a.cc", "-o", "a.o"], True),
    (["m.o", "c.o", "-shared", "-o", "x.so"], False),  # a link
    (["-E", "m.cpp", "-o", "m.ii"], False),
    (["-c", "m.cpp"], False),  # no -o
    (["-MMD", "-c", "m.cpp", "-o", "m.o"], False),  # a dependency file named by gcc
    (["-c", "m.cpp", "b.cpp", "-o", "m.o"], False),
    (["@args.rsp"], False),
    (["-fprofile-use", "-c", "m.cpp", "-o", "m.o"], False),
    (["-save-temps", "-c", "m.cpp", "-o", "m.o"], False),
    (["-x", "c++", "-c", "m.txt", "-o", "m.o"], False),
    (["-march=native", "-c", "m.cpp", "-o", "m.o"], False),
])
def test_only_a_compile_of_one_source_with_no_side_files_is_keyed(args: list[str],
                                                                   keyed: bool) -> None:
    assert (objcache.parse(args) is not None) is keyed


@needs_cxx
def test_the_same_compile_in_another_folder_is_the_object_the_compiler_writes_there(
        tmp_path: Path, shimmed: Path) -> None:
    a, b = _tree(tmp_path, "a"), _tree(tmp_path, "b")  # same-length folders, same text
    assert _compile(a, "-O1").returncode == 0
    assert len(_objects(shimmed)) == 1
    stored = _objects(shimmed)[0]
    os.utime(stored, ns=(0, 0))
    assert _compile(b, "-O1").returncode == 0
    assert len(_objects(shimmed)) == 1 and stored.stat().st_mtime_ns > 0  # found, not compiled
    reused, depfile = (b / "m.o").read_bytes(), (b / "m.o.d").read_text()
    real = objcache.real_compiler("c++", str(next((tmp_path / "shims").iterdir())))
    assert _compile(b, "-O1", compiler=real).returncode == 0
    assert reused == (b / "m.o").read_bytes()  # byte for byte
    assert depfile == (b / "m.o.d").read_text() and str(b / "scale.h") in depfile


@needs_cxx
def test_a_changed_header_flag_or_own_path_is_compiled_again(tmp_path: Path,
                                                             shimmed: Path) -> None:
    assert _compile(_tree(tmp_path, "a")).returncode == 0
    stored = _objects(shimmed)[0]
    stored.write_bytes(b"not an object")  # a stale object would show as this
    header = _tree(tmp_path, "b", scale=3)  # same path length, same source, another header
    flag = _tree(tmp_path, "c")
    for folder, flags in ((header, ()), (flag, ("-O2",))):
        assert _compile(folder, *flags).returncode == 0
        assert (folder / "m.o").read_bytes() != b"not an object"
    assert len(_objects(shimmed)) == 3
    own = 'const char* where() { return __FILE__; }\n'
    assert _compile(_tree(tmp_path, "d", source=SOURCE + own)).returncode == 0
    assert _compile(_tree(tmp_path, "e", source=SOURCE + own)).returncode == 0
    assert str(tmp_path / "e") in (tmp_path / "e" / "m.o").read_bytes().decode("latin-1")
    assert len(_objects(shimmed)) == 5  # the text holds its path: one object per folder


@needs_cxx
def test_a_failing_compile_says_why_and_keeps_nothing(tmp_path: Path, shimmed: Path) -> None:
    folder = _tree(tmp_path, "a", source=SOURCE + "int broken( {\n")
    done = _compile(folder)
    assert done.returncode != 0 and "error" in done.stderr
    assert _objects(shimmed) == []
    version = subprocess.run(["c++", "--version"], capture_output=True, text=True, check=False)
    assert version.returncode == 0 and version.stdout  # not a compile: the compiler's own answer


@needs_cxx
def test_the_compilers_warnings_are_said_again_when_its_object_is_found(
        tmp_path: Path, shimmed: Path) -> None:
    source = SOURCE + "int unused_warning(int x) { int y; return x; }\n"
    first = _compile(_tree(tmp_path, "a", source=source), "-Wall")
    again = _compile(_tree(tmp_path, "b", source=source), "-Wall")
    assert "unused" in first.stderr and again.stderr == first.stderr
    assert len(_objects(shimmed)) == 1


def test_the_build_tools_are_set_for_the_body_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KLINEAGE_BUILD_REUSE", raising=False)
    before = dict(os.environ)
    with extbuild.tools():
        first = os.environ["PATH"].split(os.pathsep)[0]
        assert sorted(p.name for p in Path(first).iterdir()) == sorted(objcache.NAMES)
        assert os.environ["PATH"].split(os.pathsep)[1:] == before["PATH"].split(os.pathsep)
    assert dict(os.environ) == before
    monkeypatch.setenv("KLINEAGE_BUILD_REUSE", "off")
    with extbuild.tools():
        assert dict(os.environ) == {**before, "KLINEAGE_BUILD_REUSE": "off"}


def test_shims_that_cannot_run_here_are_left_off_the_path(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extbuild, "_root", lambda: tmp_path)
    extbuild._shims.cache_clear()
    try:
        assert extbuild.tool_env({"PATH": "/usr/bin"})["PATH"] != "/usr/bin"
        extbuild._shims.cache_clear()
        monkeypatch.setattr(objcache, "works", lambda folder: False)  # e.g. a noexec /tmp
        assert extbuild.tool_env({"PATH": "/usr/bin"}) == {"PATH": "/usr/bin"}
    finally:
        extbuild._shims.cache_clear()


def test_nvccs_flags_of_the_callers_environment_choose_the_folder() -> None:
    env = {"PATH": "/bin"}
    assert extbuild.extension_dir("t", env) != extbuild.extension_dir(
        "t", {**env, "NVCC_APPEND_FLAGS": "-G"})


HOST = '''from torch.utils.cpp_extension import load_inline
ext = load_inline(name="kl_twice", cpp_sources="""
#include <pybind11/pybind11.h>
static int twice(int x) { return 2 * x; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("twice", &twice); }
""", no_implicit_headers=True)
'''


@needs_cxx
def test_a_load_inline_build_in_a_new_folder_finds_the_object_and_works(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(root)}
    env.pop("KLINEAGE_BUILD_REUSE", None)
    store = tmp_path / "klineage-extensions" / "objects"
    for folder in ("one", "two"):  # each in a process of its own, as the gate's workers build
        scratch = tmp_path / f"scratch_{folder}"  # the build's process removes it
        scratch.mkdir()
        (scratch / "host.py").write_text(HOST)
        env["TORCH_EXTENSIONS_DIR"] = str(tmp_path / folder)
        subprocess.run([sys.executable, "-m", "gate.extbuild", str(scratch / "host.py"), "",
                        str(tmp_path / folder), "own"], env=env, cwd=tmp_path, check=True)
        assert len(_objects(store)) == 1
        if folder == "one":
            os.utime(_objects(store)[0], ns=(0, 0))
        load = (f"import sys; sys.path.insert(0, {str(tmp_path / folder / 'kl_twice')!r}); "
                "import torch, kl_twice; print(kl_twice.twice(21))")
        ran = subprocess.run([sys.executable, "-c", load], capture_output=True, text=True,
                             check=True)
        assert ran.stdout.strip() == "42"
    assert _objects(store)[0].stat().st_mtime_ns > 0  # the second build found the first's object
