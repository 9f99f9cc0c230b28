"""A self-contained HTML report of a lineage.

The page holds: the DAG as a picture (Graphviz SVG when `dot` is installed, else a layered
layout drawn here), a plot of speedup against the naive root (device tier; without timings
the forward chain as a list, since a chart would carry nothing), and every transition with its preconditions, structured diff and a text diff
of the two kernels. Nothing is fetched from the network: styles and pictures are inline.
"""
from __future__ import annotations

import difflib
import html
import shutil
import subprocess
from pathlib import Path
from typing import Any

import networkx as nx

from lineage.export import state_label, to_dot, transition_label
from lineage.graph import Lineage, atomic_write_text

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,sans-serif;margin:24px;color:#1b1f23;max-width:1200px}
h1{font-size:22px} h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}
.summary td{padding:2px 12px 2px 0} .dag{overflow:auto;border:1px solid #eee;padding:8px}
details{margin:8px 0;border:1px solid #e1e4e8;border-radius:6px;padding:6px 10px}
summary{cursor:pointer;font-weight:600} code,pre{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
pre.diff{background:#fafbfc;padding:8px;overflow:auto;max-height:420px}
.add{color:#22863a} .del{color:#b31d28} .hunk{color:#6f42c1}
table.acts{border-collapse:collapse} table.acts td,table.acts th{border:1px solid #e1e4e8;padding:2px 6px;font-size:12px}
.ok{color:#22863a} .bad{color:#b31d28} .muted{color:#6a737d}
"""


def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def graphviz_svg(lineage: Lineage) -> str | None:
    """The DAG rendered by Graphviz, or None when `dot` is not installed or fails."""
    dot = shutil.which("dot")
    if not dot:
        return None
    try:
        proc = subprocess.run([dot, "-Tsvg"], input=to_dot(lineage), capture_output=True,
                              text=True, timeout=60, check=True)
    except (subprocess.SubprocessError, OSError):
        return None
    svg = proc.stdout
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else None


def layered_svg(lineage: Lineage) -> str:
    """A built-in layered drawing of the DAG (used when Graphviz is absent)."""
    g = lineage.graph
    if g.number_of_nodes() == 0:
        return '<svg xmlns="http://www.w3.org/2000/svg" width="200" height="40"><text x="10" y="25">empty lineage</text></svg>'
    layers = list(nx.topological_generations(g)) if nx.is_directed_acyclic_graph(g) else [list(g.nodes)]
    box_w, box_h, gap_x, gap_y = 150, 46, 30, 40
    width = max(len(layer) for layer in layers) * (box_w + gap_x) + gap_x
    height = len(layers) * (box_h + gap_y) + gap_y
    pos: dict[str, tuple[float, float]] = {}
    for li, layer in enumerate(layers):
        layer = sorted(layer)
        offset = (width - len(layer) * (box_w + gap_x) + gap_x) / 2
        for ni, node in enumerate(layer):
            pos[node] = (offset + ni * (box_w + gap_x), gap_y / 2 + li * (box_h + gap_y))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
             f'viewBox="0 0 {width:.0f} {height:.0f}" class="lineage-dag">',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
             'markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>']
    for a, b in g.edges():
        (x1, y1), (x2, y2) = pos[a], pos[b]
        parts.append(f'<line x1="{x1 + box_w / 2:.1f}" y1="{y1 + box_h:.1f}" x2="{x2 + box_w / 2:.1f}" '
                     f'y2="{y2:.1f}" stroke="#555" marker-end="url(#arrow)"/>')
    for node, attrs in g.nodes(data=True):
        x, y = pos[node]
        if attrs["type"] == "state":
            roles = attrs.get("roles", [])
            stroke = "#2e7d32" if "expert" in roles else "#c62828" if "naive" in roles else "#37474f"
            shape = (f'<rect x="{x:.1f}" y="{y:.1f}" rx="8" width="{box_w}" height="{box_h}" '
                     f'fill="#fff" stroke="{stroke}" stroke-width="2"/>')
            label = state_label(attrs)
        else:
            shape = (f'<ellipse cx="{x + box_w / 2:.1f}" cy="{y + box_h / 2:.1f}" rx="{box_w / 2}" '
                     f'ry="{box_h / 2}" fill="#e3f2fd" stroke="#1565c0"/>')
            label = transition_label(attrs)
        lines = label.split("\n")
        text = "".join(
            f'<tspan x="{x + box_w / 2:.1f}" dy="{0 if i == 0 else 13}">{_esc(line)}</tspan>'
            for i, line in enumerate(lines))
        ty = y + box_h / 2 - 6 * (len(lines) - 1) + 4
        parts.append(f'<g class="node" data-id="{_esc(node)}"><title>{_esc(node)}</title>{shape}'
                     f'<text x="{x + box_w / 2:.1f}" y="{ty:.1f}" font-size="11" text-anchor="middle">{text}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


def plot_svg(lineage: Lineage) -> tuple[str, str]:
    """Speedup over the naive root along the main chain (device tier): (svg, title). Without
    device timings, the chain's passes as a list (no chart: it would carry no information)."""
    chain = lineage.main_chain()
    if not chain:
        return "<p class='muted'>no forward chain from a naive root to the expert yet</p>", "progress"
    g = lineage.graph
    times = [((g.nodes[s].get("timing") or {}).get("candidate_ms")) for s, _ in chain]
    have_timing = all(t is not None and t > 0 for t in times)
    if not have_timing:
        # A step-index chart would be a straight line: list the chain instead.
        tiers = sorted({str(g.nodes[s].get("tier") or "?") for s, _ in chain})
        steps = "".join(
            f"<li>{_esc(g.nodes[t]['pass'])} <span class='muted'>@ "
            f"{_esc(g.nodes[t].get('anchor', ''))}</span></li>" for _, t in chain if t)
        return (f"<p class='muted'>No device timings (validated at the {_esc(', '.join(tiers))} "
                f"tier): no speedup to plot. The forward chain from the naive root:</p>"
                f"<ol class='chain'>{steps}</ol>"), "forward chain (no device timings)"
    ys = [times[0] / t for t in times]
    title, ylabel = "speedup over the naive root (device tier)", "speedup (x)"
    w, h, pad = 720, 340, 70
    ymax = max(ys) if max(ys) > 0 else 1
    n = max(len(ys) - 1, 1)
    pts = [(pad + i * (w - 2 * pad) / n, h - pad - (y / ymax) * (h - 2 * pad)) for i, y in enumerate(ys)]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" class="lineage-plot">',
             f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="#333"/>',
             f'<line x1="{pad}" y1="{pad / 2}" x2="{pad}" y2="{h - pad}" stroke="#333"/>',
             f'<text x="{w / 2}" y="{h - 10}" font-size="12" text-anchor="middle">forward step (pass applied)</text>',
             f'<text x="14" y="{h / 2}" font-size="12" transform="rotate(-90 14 {h / 2})" text-anchor="middle">{_esc(ylabel)}</text>',
             f'<text x="{pad - 6}" y="{pad}" font-size="10" text-anchor="end">{ymax:.2f}</text>',
             f'<text x="{pad - 6}" y="{h - pad}" font-size="10" text-anchor="end">0</text>',
             '<polyline fill="none" stroke="#1565c0" stroke-width="2" points="'
             + " ".join(f"{x:.1f},{y:.1f}" for x, y in pts) + '"/>']
    for (x, y), (state, trans), val in zip(pts, chain, ys):
        label = g.nodes[trans]["pass"] if trans else "naive root"
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="#1565c0"><title>{_esc(label)}: {val:.2f}</title></circle>')
        parts.append(f'<text x="{x:.1f}" y="{h - pad + 14}" font-size="9" text-anchor="end" '
                     f'transform="rotate(-30 {x:.1f} {h - pad + 14})">{_esc(label)}</text>')
    parts.append("</svg>")
    return "".join(parts), title


def _text_diff(before: str, after: str) -> str:
    out = []
    for line in difflib.unified_diff(before.splitlines(), after.splitlines(), "before", "after", lineterm="", n=2):
        cls = "add" if line.startswith("+") else "del" if line.startswith("-") else "hunk" if line.startswith("@@") else ""
        out.append(f'<span class="{cls}">{_esc(line)}</span>' if cls else _esc(line))
    return "\n".join(out) or "(no textual change)"


def _transition_section(lineage: Lineage, tid: str, forward_index: int | None) -> str:
    g = lineage.graph
    t = g.nodes[tid]
    src = next(iter(g.predecessors(tid)))
    dst = next(iter(g.successors(tid)))
    delta = t.get("profile_delta") or {}
    effect = f"{delta['ratio']:.2f}x ({delta['src_ms']:.3f} -> {delta['dst_ms']:.3f} ms)" if delta.get("ratio") else "no device timing"
    pre_rows = "".join(
        f"<tr><td><code>{_esc(p.get('expr'))}</code></td><td class='{'ok' if p.get('value') else 'bad'}'>"
        f"{_esc(p.get('value'))}</td><td><code>{_esc(p.get('facts'))}</code></td></tr>"
        for p in t.get("preconditions", [])) or "<tr><td colspan=3 class='muted'>none declared</td></tr>"
    act_rows = "".join(
        f"<tr><td>{_esc(a.get('action'))}</td><td><code>{_esc(a.get('anchor'))}</code></td><td>{_esc(a.get('kind'))}</td></tr>"
        for a in t.get("diff", [])) or "<tr><td colspan=3 class='muted'>no structural change</td></tr>"
    heading = (f"forward step {forward_index}" if forward_index is not None
               else f"branch transition (de-optimization step {t.get('step')})")
    return (
        f'<details class="transition" id="{_esc(tid)}"><summary>{_esc(heading)}: '
        f'<code>{_esc(t["pass"])}</code> at <code>{_esc(t.get("anchor"))}</code> — {_esc(effect)}</summary>'
        f'<p>category: {_esc(t.get("category"))}; options: <code>{_esc(t.get("options"))}</code>; '
        f're-derived by: {_esc(t.get("rederived_by"))}; from <code>{_esc(src)}</code> to <code>{_esc(dst)}</code></p>'
        f'<h4>Preconditions</h4><table class="acts"><tr><th>expression</th><th>value</th><th>facts</th></tr>{pre_rows}</table>'
        f'<h4>Structured diff</h4><table class="acts"><tr><th>action</th><th>anchor</th><th>kind</th></tr>{act_rows}</table>'
        f'<h4>Text diff</h4><pre class="diff">{_text_diff(g.nodes[src]["source"], g.nodes[dst]["source"])}</pre></details>'
    )


def render(lineage: Lineage, title: str = "KLineage report") -> str:
    s = lineage.summary()
    svg = graphviz_svg(lineage)
    engine = "Graphviz" if svg else "built-in layout"
    svg = svg or layered_svg(lineage)
    plot, plot_title = plot_svg(lineage)
    chain = lineage.main_chain()
    main = [t for _, t in chain if t]
    ordered = main + sorted(
        set(lineage.transitions()) - set(main),
        key=lambda t: (lineage.graph.nodes[t].get("expert", ""), -lineage.graph.nodes[t].get("step", 0)))
    rejected = "".join(
        f"<tr><td><code>{_esc(r['pass'])}</code></td><td><code>{_esc(r.get('anchor'))}</code></td>"
        f"<td>{_esc(r.get('stage'))}</td><td>{_esc(r.get('failure_kind'))}</td><td>{_esc(r.get('reason'))[:300]}</td></tr>"
        for r in lineage.graph.graph["rejected"]) or "<tr><td colspan=5 class='muted'>none</td></tr>"
    runs = "".join(
        f"<li>{_esc(r.get('expert'))} ({_esc(r.get('case'))}, {_esc(r.get('tier'))} tier, branch "
        f"{_esc(r.get('branch'))}): {_esc(r.get('steps'))} steps, termination <b>{_esc(r.get('termination'))}</b></li>"
        for r in s["runs"])
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_esc(title)}</title><style>{_CSS}</style></head>
<body>
<h1>{_esc(title)}</h1>
<table class="summary">
<tr><td>cases</td><td>{_esc(", ".join(s["cases"]))}</td></tr>
<tr><td>experts</td><td>{_esc(", ".join(s["experts"]))}</td></tr>
<tr><td>states</td><td id="n-states">{s["states"]}</td></tr>
<tr><td>transitions</td><td id="n-transitions">{s["transitions"]}</td></tr>
<tr><td>rejected attempts</td><td id="n-rejected">{s["rejected"]}</td></tr>
</table>
<ul>{runs}</ul>
<h2>Lineage DAG <span class="muted">({engine})</span></h2>
<div class="dag">{svg}</div>
<h2>{_esc(plot_title)}</h2>
<div class="plot">{plot}</div>
<h2>Forward transitions</h2>
{"".join(_transition_section(lineage, t, i + 1 if i < len(main) else None) for i, t in enumerate(ordered))}
<h2>Rejected de-optimizations (risk evidence)</h2>
<table class="acts"><tr><th>pass</th><th>anchor</th><th>stage</th><th>failure</th><th>reason</th></tr>{rejected}</table>
</body></html>
"""


def write_report(lineage: Lineage, out_dir: Path, title: str | None = None) -> Path:
    path = Path(out_dir) / "report.html"
    atomic_write_text(path, render(lineage, title or f"KLineage report: {', '.join(lineage.graph.graph['cases'])}"))
    return path
