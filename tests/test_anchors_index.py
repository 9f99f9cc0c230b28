"""anchors: the id scheme on concrete kernels (Triton and CUDA)."""
from __future__ import annotations

import anchors
import kir
from test_kir_support import EXAMPLES, KERNELS


def _ids(path) -> list[str]:
    return [a.id for a in anchors.build_index(kir.parse_file(path))]


def test_triton_ids_follow_the_documented_scheme():
    index = anchors.build_index(kir.parse_file(EXAMPLES / "matmul_naive.py"))
    dot = index.get("triton:matmul_kernel/for[0]/call:tl.dot[0]")
    assert dot is not None and dot.kind == "dot" and dot.name == "tl.dot"
    assert dot.parent == "triton:matmul_kernel/for[0]"
    assert index.get(dot.parent).kind == "loop"
    loads = [a.id for a in index if a.kind == "load"]
    assert loads == ["triton:matmul_kernel/for[0]/call:tl.load[0]",
                     "triton:matmul_kernel/for[0]/call:tl.load[1]"]
    assert index.get("triton:matmul_kernel/decorator:triton.jit[0]").kind == "decorator"
    assert index.get("triton:matmul_kernel/param:BLOCK_K[0]").kind == "constexpr_param"
    assert index.get("triton:run/launch:matmul_kernel[0]").kind == "launch"
    assert index.get("triton:@module").kind == "module"
    assert index.get("triton:nope") is None
    # a call inside an assignment is the assignment's sibling, under the same container
    assert index.get("triton:matmul_kernel/for[0]/assign:a[0]").parent == dot.parent


def test_cuda_ids_qualify_namespaces_and_classes():
    index = anchors.build_index(kir.parse_file(KERNELS / "tiled_mma.cuh"))
    kernel = index.get("cuda:klt::gemm::gemm_kernel")
    assert kernel is not None and kernel.kind == "kernel"
    # template parameters hang under the templated function
    assert index.get("cuda:klt::gemm::gemm_kernel/param:Stages[0]").kind == "constexpr_param"
    op = index.get("cuda:klt::gemm::MmaPipelined::operator()")
    assert op is not None and op.parent == "cuda:klt::gemm::MmaPipelined"
    assert index.get("cuda:klt::gemm::MmaPipelined::operator()/for[1]/call:cp_async_wait[0]")
    assert index.get("cuda:klt::gemm::gemm_kernel/shared:epilogue[0]").kind == "shared_decl"
    assert index.get("cuda:klt::gemm::gemm_kernel/pragma:unroll[0]").kind == "pragma"
    assert index.get("cuda:launch_gemm/launch:klt::gemm::gemm_kernel[0]").kind == "launch"
    asm = index.get("cuda:klt::gemm::mma_m16n8k16/asm[0]")
    assert asm is not None and asm.kind == "dot"


def test_repeated_scope_names_get_suffixes():
    src = ("namespace a { void f(int x) {} }\nnamespace a { void f(float x) {} }\n"
           "void f() {}\n")
    ids = _ids_from(src, "cuda")
    assert "cuda:a" in ids and "cuda:a[1]" in ids
    assert "cuda:a::f" in ids and "cuda:a::f[1]" in ids and "cuda:f" in ids


def _ids_from(src: str, lang: str) -> list[str]:
    return [a.id for a in anchors.build_index(kir.parse(src, lang))]


def test_indices_count_same_step_siblings_only():
    base = ("@triton.jit\ndef k(x, y):\n    a = tl.load(x)\n    acc = tl.dot(a, a)\n"
            "    tl.store(y, acc)\n")
    extra = base.replace("    acc =", "    b = tl.load(y)\n    c = tl.program_id(0)\n    acc =")
    old, new = set(_ids_from(base, "triton")), set(_ids_from(extra, "triton"))
    assert old <= new  # nothing renumbered: the new load is tl.load[1], after the old one
    assert new - old == {"triton:k/assign:b[0]", "triton:k/call:tl.load[1]",
                         "triton:k/assign:c[0]", "triton:k/call:tl.program_id[0]"}


def test_ids_are_unique_on_the_corpus():
    for path in sorted(KERNELS.iterdir()):
        ids = _ids(path)
        assert len(ids) == len(set(ids)), path


def test_index_navigation():
    index = anchors.build_index(kir.parse_file(EXAMPLES / "matmul_tiled.py"))
    kernel = index.get("triton:matmul_kernel")
    desc = list(index.descendants(kernel))
    assert desc and all(a.id.startswith("triton:matmul_kernel/") for a in desc)
    assert [a.id for a in index.children(kernel)][:2] == [
        "triton:matmul_kernel/decorator:triton.jit[0]", "triton:matmul_kernel/param:a_ptr[0]"]
    dot = index.get("triton:matmul_kernel/for[0]/call:tl.dot[0]")
    ir = index.ir
    inner = next(c for c in ir.children_of(dot.node))  # a node below the call
    assert index.enclosing(inner) == dot
    assert index.of_node(dot.node) == dot
    rows = index.to_json([dot])
    assert rows == [{"id": dot.id, "kind": "dot", "grammar_type": "Call", "name": "tl.dot",
                     "span": [dot.span.start, dot.span.end], "line": dot.line,
                     "parent": "triton:matmul_kernel/for[0]"}]


def test_resolution_by_hash_after_a_rename_and_gone_after_a_delete():
    path = EXAMPLES / "matmul_naive.py"
    old = kir.parse_file(path)
    old_index = anchors.build_index(old)
    deleted = old.apply([kir.Edit(old.find(name="matmul_kernel", kind="kernel")[0].span, "")])
    gone_index = anchors.build_index(deleted)
    r = gone_index.resolve("triton:matmul_kernel/for[0]/call:tl.dot[0]", old_index)
    assert r.status == "gone" and r.anchor is None
    text = old.text.replace("def matmul_kernel(", "def mm_kernel(")
    new_index = anchors.build_index(kir.parse(text, "triton"))
    r = new_index.resolve("triton:matmul_kernel/for[0]/call:tl.dot[0]", old_index)
    assert r.status == "hash" and r.anchor.id == "triton:mm_kernel/for[0]/call:tl.dot[0]"
    r = new_index.resolve("triton:run", old_index)
    assert r.status == "exact"
    # without the old index only exact ids resolve
    assert new_index.resolve("triton:matmul_kernel").status == "gone"
