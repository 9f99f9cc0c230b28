"""The lineage DAG model, persistence, export and report, on hand-built lineages."""
from __future__ import annotations

import json
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import networkx as nx
import pytest

from kir.errors import BadInputError
from lineage.export import export, to_dot, to_graphml
from lineage.graph import KernelState, Lineage, Transition, state_id
from lineage.report import layered_svg, render, write_report

SOURCES = [f"# kernel version {i}\nx = {i}\n" for i in range(4)]


def _state(i: int, roles=frozenset(), ms: float | None = None) -> KernelState:
    timing = {"candidate_ms": ms, "reference_ms": 1.0, "speedup": 1.0 / ms} if ms else None
    return KernelState(source=SOURCES[i], language="triton", case="gemm", tier="interpret",
                       anchors=(f"triton:k/assign[{i}]",), features=({"pass": f"p{i}", "anchor": "a"},),
                       verdict={"ok": True}, timing=timing, roles=roles)


def _chain(ms: list[float] | None = None) -> Lineage:
    """naive(0) -> 1 -> 2 -> expert(3)."""
    lin = Lineage()
    ids = [lin.add_state(_state(i, frozenset({"naive", "root"}) if i == 0 else
                                frozenset({"expert"}) if i == 3 else frozenset(),
                                ms[i] if ms else None)) for i in range(4)]
    for i in range(3):
        delta = {"src_ms": ms[i], "dst_ms": ms[i + 1], "ratio": ms[i] / ms[i + 1]} if ms else None
        lin.add_transition(Transition(src=ids[i], dst=ids[i + 1], pass_name=f"pass-{i}",
                                      category="expression-level", anchor=f"triton:k/assign[{i}]",
                                      diff=({"action": "update", "anchor": f"triton:k/assign[{i}]", "kind": "assign"},),
                                      preconditions=({"expr": "K % 16 == 0", "value": True, "facts": {"K": 64}},),
                                      profile_delta=delta, backward={"pass": f"pass-{i}", "anchor": "a"},
                                      case="gemm", language="triton", expert="experts/gemm/gemm_triton.py",
                                      step=3 - i))
    lin.record_rejection(ids[3], "tensor-core-dot", "triton:k/call:tl.dot[0]", "correctness",
                         "mismatch", "max rel err 0.3 > 0.005")
    return lin


def test_states_are_deduplicated_by_content_and_roles_merge() -> None:
    lin = _chain()
    again = lin.add_state(_state(3, frozenset({"root"})))
    assert again == state_id(SOURCES[3])
    assert len(lin.states()) == 4
    assert set(lin.node(again)["roles"]) == {"expert", "root"}


def test_edges_run_state_transition_state_and_queries_answer() -> None:
    lin = _chain()
    s0, s3 = state_id(SOURCES[0]), state_id(SOURCES[3])
    for a, b in lin.graph.edges():
        assert {lin.node(a)["type"], lin.node(b)["type"]} == {"state", "transition"}
    path = lin.path_to_expert(s0)
    assert path[0] == s0 and path[-1] == s3 and len(path) == 7
    assert lin.frontier() == [s0]
    assert len(lin.transitions_of("pass-1")) == 1
    assert lin.prior_actions(s3) == ["pass-0", "pass-1", "pass-2"]
    assert lin.rejections_of("tensor-core-dot")[0]["failure_kind"] == "mismatch"
    with pytest.raises(KeyError):
        lin.path_to_expert("s:doesnotexist")


def test_transition_needs_known_states() -> None:
    lin = Lineage()
    lin.add_state(_state(0))
    with pytest.raises(KeyError):
        lin.add_transition(Transition(src=state_id(SOURCES[0]), dst="s:missing", pass_name="x",
                                      category="c", anchor="a"))


def test_save_load_roundtrip_is_node_link_with_edges(tmp_path: Path) -> None:
    lin = _chain([4.0, 2.0, 1.5, 1.0])
    lin.save(tmp_path / "lineage.json")
    data = json.loads((tmp_path / "lineage.json").read_text())
    assert "edges" in data and all(n["type"] in ("state", "transition") for n in data["nodes"])
    back = Lineage.load(tmp_path)
    assert nx.utils.graphs_equal(back.graph, lin.graph)
    assert back.graph.graph["rejected"] == lin.graph.graph["rejected"]
    assert not list(tmp_path.glob(".*.tmp"))


def test_load_rejects_bad_files(tmp_path: Path) -> None:
    (tmp_path / "lineage.json").write_text("{not json")
    with pytest.raises(BadInputError):
        Lineage.load(tmp_path)
    (tmp_path / "lineage.json").write_text(json.dumps({"nodes": [{"id": "x"}], "edges": []}))
    with pytest.raises(BadInputError, match="no type"):
        Lineage.load(tmp_path)
    with pytest.raises(BadInputError):
        Lineage.load(tmp_path / "missing")


def test_merge_joins_lineages_on_shared_states() -> None:
    a = _chain()
    b = Lineage()
    ids = [b.add_state(_state(i)) for i in (2, 3)]
    b.add_state(KernelState(source="other\n", language="triton", case="conv2d", tier="interpret"))
    b.add_transition(Transition(src=state_id("other\n"), dst=ids[0], pass_name="autotune",
                                category="expression-level", anchor="a", expert="x.py"))
    a.merge(b)
    assert len(a.states()) == 5
    assert set(a.graph.graph["cases"]) == {"gemm", "conv2d"}
    assert state_id(SOURCES[3]) in nx.descendants(a.graph, state_id("other\n"))


def test_graphml_is_flat_and_parses_back() -> None:
    text = to_graphml(_chain([4.0, 2.0, 1.5, 1.0]))
    g = nx.parse_graphml(text)
    assert g.number_of_nodes() == 7
    t = next(n for n, d in g.nodes(data=True) if d["type"] == "transition")
    assert json.loads(g.nodes[t]["diff"])[0]["action"] == "update"
    for _, d in g.nodes(data=True):
        assert all(isinstance(v, (str, int, float, bool)) for v in d.values())


def test_dot_export_is_valid_graphviz() -> None:
    dot = to_dot(_chain())
    assert dot.startswith("digraph lineage {") and dot.rstrip().endswith("}")
    assert dot.count("->") == 6
    if shutil.which("dot"):
        proc = subprocess.run(["dot", "-Tsvg"], input=dot, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    with pytest.raises(BadInputError):
        export(_chain(), "png")


def test_report_is_self_contained_and_shows_every_transition(tmp_path: Path) -> None:
    lin = _chain([4.0, 2.0, 1.5, 1.0])
    page = render(lin)
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "").replace(
        "http://www.w3.org/1999/xlink", "")
    assert "https://" not in page
    assert page.count('class="transition"') == 3
    assert "speedup over the naive root" in page
    assert "K % 16 == 0" in page and "max rel err 0.3" in page
    svg = layered_svg(lin)
    ET.fromstring(svg)  # well-formed SVG
    assert svg.count('class="node"') == 7
    path = write_report(lin, tmp_path)
    written = path.read_text()
    assert written.count('class="transition"') == 3 and "<title>KLineage report: gemm</title>" in written


def test_report_without_timings_lists_the_chain_instead_of_a_chart() -> None:
    lin = _chain()
    page = render(lin)
    assert "No device timings" in page and 'class="lineage-plot"' not in page
    passes = [lin.node(t)["pass"] for _, t in lin.main_chain() if t]
    assert passes and page.count("<li>") >= len(passes)
    assert all(p in page for p in passes)
    timed = render(_chain([4.0, 2.0, 1.5, 1.0]))
    assert 'class="lineage-plot"' in timed and "speedup over the naive root" in timed


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed")
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    lin = _chain([4.0, 2.0, 1.5, 1.0])
    path = write_report(lin, tmp_path)
    proc = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=2000", "--dump-dom",
         path.as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    assert '<svg' in dom and 'class="lineage-plot"' in dom
    assert dom.count('class="transition"') == 3
    assert '<td id="n-transitions">3</td>' in dom
