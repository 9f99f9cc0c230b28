"""The pass-dependency graph: derived edges, orders, must-precede, invalidation, cycles."""
from __future__ import annotations

import pytest

from kir.errors import BadInputError, KLineageError
from passes.graph import Declaration, PassGraph


def _graph() -> PassGraph:
    return PassGraph([
        Declaration("tile", provides=("tiled",)),
        Declaration("stage", requires=("tiled",), provides=("staged",)),
        Declaration("pipeline", requires=("staged",), provides=("pipelined",)),
        Declaration("swizzle", requires=("tiled",)),
        Declaration("tma", requires=("tiled",), provides=("staged",), conflicts=("pipelined",)),
        Declaration("specialize", requires=("pipelined",)),
        Declaration("loose"),
    ])


def test_edges_come_from_requires_and_provides() -> None:
    graph = _graph()
    edges = {(e["from"], e["to"]) for e in graph.to_json()["edges"]}
    assert ("tile", "stage") in edges and ("stage", "pipeline") in edges
    assert ("tma", "pipeline") in edges  # tma also provides "staged"
    assert ("pipeline", "specialize") in edges
    assert not any("loose" in edge for edge in edges)


def test_optimization_order_respects_every_edge() -> None:
    graph = _graph()
    order = graph.optimization_order()
    for edge in graph.to_json()["edges"]:
        assert order.index(edge["from"]) < order.index(edge["to"])
    assert sorted(order) == sorted(graph.declarations)


def test_deopt_order_is_the_reverse_on_present_passes() -> None:
    graph = _graph()
    present = ["tile", "specialize", "pipeline", "stage", "stage"]
    assert graph.deopt_order(present) == ["specialize", "pipeline", "stage", "tile"]


def test_must_precede_is_transitive() -> None:
    graph = _graph()
    assert graph.must_precede("specialize") == ["tile", "stage", "tma", "pipeline"]
    assert graph.must_precede("tile") == []
    assert graph.requirements("pipeline") == {"staged": ["stage", "tma"]}


def test_invalidates_follows_conflicts_and_lost_features() -> None:
    graph = _graph()
    # applying tma conflicts with the pipeline; specialize needs "pipelined", whose only
    # provider is gone
    assert graph.invalidates("tma") == ["pipeline", "specialize"]
    assert graph.invalidates("pipeline") == ["tma"]  # conflicts are symmetric
    assert graph.invalidates("tile") == []
    assert graph.check_present(["tma", "pipeline", "tile"]) == ["pipeline conflicts with tma"]


def test_cycles_are_errors() -> None:
    with pytest.raises(KLineageError, match="cycle"):
        PassGraph([Declaration("a", requires=("y",), provides=("x",)),
                   Declaration("b", requires=("x",), provides=("y",))])


def test_duplicates_and_unknown_names() -> None:
    with pytest.raises(KLineageError, match="twice"):
        PassGraph([Declaration("a"), Declaration("a")])
    with pytest.raises(BadInputError, match="unknown pass"):
        _graph().must_precede("nope")


def test_registry_graph_is_acyclic_and_ordered() -> None:
    graph = PassGraph.from_registry()
    order = graph.optimization_order()
    assert order.index("tile-sizes") < order.index("autotune")
    assert order.index("smem-staging") < order.index("cp-async-pipeline")
    assert order.index("cp-async-pipeline") < order.index("warp-specialization")
    assert "tma-descriptors" in graph.conflicts_of("even-k-fast-path")
    assert graph.deopt_order(["tile-sizes", "autotune", "grouped-ordering"])[-1] == "tile-sizes"
    dot = graph.to_dot(["autotune"])
    assert dot.startswith("digraph passes {") and '"tile-sizes" -> "autotune"' in dot
