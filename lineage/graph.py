"""The lineage DAG: kernel states linked by forward transitions.

A `Lineage` wraps a `networkx.DiGraph` with two node types. A *state* node is one kernel version,
identified by the hash of its source, so that lineages of several experts (and several orders
of one expert) merge where they reach the same kernel. A *transition* node is one validated
forward step; edges run ``state -> transition -> state``. The node attributes are the on-disk
format (networkx node-link JSON) and are documented in docs/INTERFACES.md ("lineage").

Writes are atomic (temp file + fsync + rename), so a killed process leaves either the previous
file or the new one, never a torn one.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

from kir.errors import BadInputError

FORMAT_VERSION = 1


def content_hash(source: str) -> str:
    """The 16-hex-digit content hash that names a state."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]


def state_id(source: str) -> str:
    return f"s:{content_hash(source)}"


@dataclass(frozen=True, slots=True)
class KernelState:
    """One kernel version as recorded in a lineage."""

    source: str
    language: str
    case: str
    tier: str
    anchors: tuple[str, ...] = ()
    features: tuple[Mapping[str, str], ...] = ()
    verdict: Mapping[str, Any] | None = None
    timing: Mapping[str, Any] | None = None
    roles: frozenset[str] = frozenset()

    @property
    def id(self) -> str:
        return state_id(self.source)

    @property
    def hash(self) -> str:
        return content_hash(self.source)


@dataclass(frozen=True, slots=True)
class Transition:
    """One validated forward step ``src -> dst`` (the inverse of an accepted de-optimization)."""

    src: str
    dst: str
    pass_name: str
    category: str
    anchor: str
    options: Mapping[str, Any] = field(default_factory=dict)
    diff: tuple[Mapping[str, Any], ...] = ()
    preconditions: tuple[Mapping[str, Any], ...] = ()
    src_verdict: Mapping[str, Any] | None = None
    dst_verdict: Mapping[str, Any] | None = None
    profile_delta: Mapping[str, Any] | None = None
    backward: Mapping[str, Any] | None = None
    rederived_by: str = "deterministic"
    case: str = ""
    language: str = ""
    platform: str = "cuda"
    expert: str = ""
    step: int = 0

    @property
    def id(self) -> str:
        return f"t:{self.src[2:]}:{self.dst[2:]}:{self.pass_name}"


def jsonable(obj: Any) -> Any:
    """`obj` as JSON data: mappings, sequences and dataclasses recursively, objects with a
    `to_json()` through it, enums by value, sets as sorted lists, anything else as its str."""
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    to_json = getattr(obj, "to_json", None)
    if callable(to_json):
        return to_json()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, set | frozenset):
        return sorted(jsonable(v) for v in obj)
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "value"):
        return jsonable(obj.value)
    return str(obj)


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` so that readers see the old or the new content, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


class Lineage:
    """A lineage DAG. States are deduplicated by content hash; edges state->transition->state."""

    def __init__(self, graph: nx.DiGraph | None = None) -> None:
        self.graph: nx.DiGraph = graph if graph is not None else nx.DiGraph()
        g = self.graph.graph
        g.setdefault("format", FORMAT_VERSION)
        g.setdefault("cases", [])
        g.setdefault("experts", [])
        g.setdefault("rejected", [])
        g.setdefault("runs", [])

    # ---- construction -------------------------------------------------------------------
    def add_state(self, state: KernelState) -> str:
        """Add `state` (or merge it into the node of the same content) and return its id."""
        sid = state.id
        attrs = {
            "type": "state",
            "hash": state.hash,
            "language": state.language,
            "source": state.source,
            "anchors": list(state.anchors),
            "features": [dict(f) for f in state.features],
            "verdict": jsonable(state.verdict) if state.verdict is not None else None,
            "timing": jsonable(state.timing) if state.timing is not None else None,
            "roles": sorted(state.roles),
            "case": state.case,
            "tier": state.tier,
        }
        if sid in self.graph:
            node = self.graph.nodes[sid]
            node["roles"] = sorted(set(node.get("roles", [])) | set(state.roles))
            for key in ("verdict", "timing"):
                if node.get(key) is None and attrs[key] is not None:
                    node[key] = attrs[key]
            for key in ("anchors", "features"):
                if not node.get(key) and attrs[key]:
                    node[key] = attrs[key]
        else:
            self.graph.add_node(sid, **attrs)
        if state.case and state.case not in self.graph.graph["cases"]:
            self.graph.graph["cases"].append(state.case)
        return sid

    def add_transition(self, t: Transition) -> str:
        for end in (t.src, t.dst):
            if end not in self.graph or self.graph.nodes[end].get("type") != "state":
                raise KeyError(f"transition end {end} is not a state of this lineage")
        tid = t.id
        attrs = {
            "type": "transition",
            "pass": t.pass_name,
            "category": t.category,
            "options": jsonable(t.options),
            "anchor": t.anchor,
            "diff": jsonable(t.diff),
            "preconditions": jsonable(t.preconditions),
            "src_verdict": jsonable(t.src_verdict),
            "dst_verdict": jsonable(t.dst_verdict),
            "profile_delta": jsonable(t.profile_delta),
            "backward": jsonable(t.backward),
            "rederived_by": t.rederived_by,
            "case": t.case,
            "language": t.language,
            "platform": t.platform,
            "expert": t.expert,
            "step": t.step,
        }
        if tid not in self.graph:
            self.graph.add_node(tid, **attrs)
            self.graph.add_edge(t.src, tid)
            self.graph.add_edge(tid, t.dst)
        if t.expert and t.expert not in self.graph.graph["experts"]:
            self.graph.graph["experts"].append(t.expert)
        return tid

    def record_rejection(self, state: str, pass_name: str, anchor: str, stage: str,
                         failure_kind: str | None, reason: str, **extra: Any) -> None:
        """Keep a rejected attempt as risk evidence for `pass_name`."""
        record = {"state": state, "pass": pass_name, "anchor": anchor, "stage": stage,
                  "failure_kind": failure_kind, "reason": reason}
        record.update(jsonable(extra))
        if record not in self.graph.graph["rejected"]:
            self.graph.graph["rejected"].append(record)

    def add_run(self, record: Mapping[str, Any]) -> None:
        self.graph.graph["runs"].append(jsonable(record))

    # ---- queries ------------------------------------------------------------------------
    def states(self) -> list[str]:
        return [n for n, d in self.graph.nodes(data=True) if d.get("type") == "state"]

    def transitions(self) -> list[str]:
        return [n for n, d in self.graph.nodes(data=True) if d.get("type") == "transition"]

    def node(self, node_id: str) -> Mapping[str, Any]:
        return self.graph.nodes[node_id]

    def transitions_of(self, pass_name: str) -> list[str]:
        return [t for t in self.transitions() if self.graph.nodes[t]["pass"] == pass_name]

    def successors(self, state: str) -> Iterator[tuple[str, str]]:
        """(transition, next state) pairs leaving `state`."""
        for t in self.graph.successors(state):
            for s in self.graph.successors(t):
                yield t, s

    def roles(self, role: str) -> list[str]:
        return [s for s in self.states() if role in self.graph.nodes[s].get("roles", ())]

    def path_to_expert(self, state: str, expert: str | None = None) -> list[str]:
        """The node path (states and transitions) from `state` to an expert state.

        With no `expert` given, the nearest state with role ``expert`` is used. Raises KeyError
        when no expert is reachable.
        """
        if state not in self.graph:
            raise KeyError(state)
        targets = [expert] if expert else self.roles("expert")
        best: list[str] | None = None
        for target in targets:
            try:
                path = nx.shortest_path(self.graph, state, target)
            except (nx.NetworkXNoPath, nx.NodeNotFound):
                continue
            if best is None or len(path) < len(best):
                best = path
        if best is None:
            raise KeyError(f"no expert reachable from {state}")
        return best

    def frontier(self) -> list[str]:
        """States with no incoming transition: the most simplified kernels reached so far."""
        return [s for s in self.states() if self.graph.in_degree(s) == 0]

    def prior_actions(self, state: str) -> list[str]:
        """Passes applied on every forward path from a root to `state`, earliest first."""
        actions: list[str] = []
        for node in nx.ancestors(self.graph, state):
            if self.graph.nodes[node].get("type") == "transition":
                actions.append(node)
        actions.sort(key=lambda t: -int(self.graph.nodes[t].get("step", 0)))
        seen: list[str] = []
        for t in actions:
            name = self.graph.nodes[t]["pass"]
            if name not in seen:
                seen.append(name)
        return seen

    def main_chain(self) -> list[tuple[str, str | None]]:
        """The longest forward path from a naive root (else a frontier state) to an expert, as
        [(state, transition into it)], the root first with None. Empty when there is none."""
        best: list[str] = []
        experts = set(self.roles("expert"))
        for root in self.roles("naive") or self.frontier():
            for expert in experts:
                try:
                    for path in nx.all_simple_paths(self.graph, root, expert, cutoff=200):
                        if len(path) > len(best):
                            best = path
                except nx.NodeNotFound:
                    continue
        if not best:
            return []
        chain: list[tuple[str, str | None]] = [(best[0], None)]
        for i in range(1, len(best) - 1, 2):
            chain.append((best[i + 1], best[i]))
        return chain

    def reaches(self, a: str, b: str) -> bool:
        """Whether a forward path leads from node `a` to node `b`."""
        return a in self.graph and b in self.graph and nx.has_path(self.graph, a, b)

    def rejections_of(self, pass_name: str) -> list[Mapping[str, Any]]:
        return [r for r in self.graph.graph["rejected"] if r["pass"] == pass_name]

    # ---- persistence --------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return nx.node_link_data(self.graph, edges="edges")

    def save(self, path: str | os.PathLike[str]) -> None:
        atomic_write_text(Path(path), json.dumps(self.to_json(), indent=1, sort_keys=False))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Lineage":
        """A lineage from its node-link JSON; raises `BadInputError` saying what is wrong when
        the data is not of that shape (see `check_shape`)."""
        check_shape(data)
        key = "edges" if "edges" in data else "links"
        graph = nx.node_link_graph(data, directed=True, multigraph=False, edges=key)
        return cls(graph)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "Lineage":
        """Read a lineage file (or a folder's lineage.json); every problem with it is a
        `BadInputError` naming the file."""
        p = Path(path)
        if p.is_dir():
            p = p / "lineage.json"
        if not p.is_file():
            raise BadInputError(f"{p}: no such lineage file")
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except UnicodeDecodeError as exc:
            raise BadInputError(f"{p}: not a lineage JSON file (not UTF-8: {exc.reason} at "
                                f"byte {exc.start})") from None
        except json.JSONDecodeError as exc:
            raise BadInputError(f"{p}: not a lineage JSON file ({exc})") from None
        except OSError as exc:
            raise BadInputError(f"{p}: cannot read ({exc.strerror})") from None
        try:
            return cls.from_json(data)
        except BadInputError as exc:
            raise BadInputError(f"{p}: {exc}") from None

    def merge(self, other: "Lineage") -> None:
        """Merge `other` into this lineage (states by content hash, transitions by id)."""
        for node, attrs in other.graph.nodes(data=True):
            if node not in self.graph:
                self.graph.add_node(node, **attrs)
            elif attrs.get("type") == "state":
                mine = self.graph.nodes[node]
                mine["roles"] = sorted(set(mine.get("roles", [])) | set(attrs.get("roles", [])))
        self.graph.add_edges_from(other.graph.edges())
        for key in ("cases", "experts"):
            for v in other.graph.graph.get(key, []):
                if v not in self.graph.graph[key]:
                    self.graph.graph[key].append(v)
        for key in ("rejected", "runs"):
            for v in other.graph.graph.get(key, []):
                if v not in self.graph.graph[key]:
                    self.graph.graph[key].append(v)

    def summary(self) -> dict[str, Any]:
        roots = self.roles("naive") or self.frontier()
        return {
            "states": len(self.states()),
            "transitions": len(self.transitions()),
            "rejected": len(self.graph.graph["rejected"]),
            "cases": list(self.graph.graph["cases"]),
            "experts": list(self.graph.graph["experts"]),
            "roots": roots,
            "expert_states": self.roles("expert"),
            "runs": list(self.graph.graph["runs"]),
        }


#: Fields every node of a given type must carry, with the JSON type each must have.
_NODE_FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "state": {"source": str, "language": str, "roles": list},
    "transition": {"pass": str, "anchor": str},
}
_GRAPH_LISTS = ("cases", "experts", "rejected", "runs")


def check_shape(data: Any) -> None:
    """Raise `BadInputError` (one line: what is wrong and where) unless `data` is lineage
    node-link JSON: an object with a `nodes` list of objects, each with a string `id` and a
    `type` of state (with `source`, `language`, `roles`) or transition (with `pass`,
    `anchor`); an `edges` (or `links`) list of `{source, target}` objects between those ids;
    and an optional `graph` object whose `cases`, `experts`, `rejected`, `runs` are lists."""
    def fail(what: str) -> None:
        raise BadInputError(f"not a lineage: {what}")

    if not isinstance(data, Mapping):
        fail(f"a JSON object with 'nodes' and 'edges' expected, found {type(data).__name__}")
    if "nodes" not in data:
        fail("no 'nodes'")
    nodes = data["nodes"]
    if not isinstance(nodes, list):
        fail(f"'nodes' is {type(nodes).__name__}, not a list")
    ids: set[Any] = set()
    for i, node in enumerate(nodes):
        if not isinstance(node, Mapping):
            fail(f"node {i} is {type(node).__name__}, not an object")
        nid = node.get("id")
        if not isinstance(nid, str):
            fail(f"node {i} has no string 'id'")
        kind = node.get("type")
        if kind not in _NODE_FIELDS:
            fail(f"node {nid!r} has no type state/transition")
        for name, typ in _NODE_FIELDS[kind].items():
            if not isinstance(node.get(name), typ):
                fail(f"{kind} node {nid!r} lacks {name!r}")
        ids.add(nid)
    edges = data.get("edges", data.get("links", []))
    if not isinstance(edges, list):
        fail(f"'edges' is {type(edges).__name__}, not a list")
    for i, edge in enumerate(edges):
        if not isinstance(edge, Mapping):
            fail(f"edge {i} is {type(edge).__name__}, not an object")
        for end in ("source", "target"):
            if edge.get(end) not in ids:
                fail(f"edge {i} has {end} {edge.get(end)!r}, which is no node")
    graph = data.get("graph", {})
    if not isinstance(graph, Mapping):
        fail(f"'graph' is {type(graph).__name__}, not an object")
    for key in _GRAPH_LISTS:
        if not isinstance(graph.get(key, []), list):
            fail(f"graph '{key}' is not a list")
    for i, record in enumerate(graph.get("rejected", [])):
        if not isinstance(record, Mapping) or "pass" not in record:
            fail(f"rejected attempt {i} is not an object with 'pass'")

