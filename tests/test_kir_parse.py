"""kir: parsing both languages into one lossless IR, kinds, attrs, spans, edits, bad input."""
from __future__ import annotations

import pytest

import kir
from kir import kinds as K
from kir.errors import BadInputError, ParseError
from test_kir_support import CORPUS, CUDA_CORPUS, EXAMPLES, KERNELS, TRITON_CORPUS


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_corpus_round_trips_and_nodes_nest(path):
    text = path.read_text()
    ir = kir.parse_file(path)
    assert ir.unparse() == text
    assert ir.language is (kir.Language.TRITON if path.suffix == ".py" else kir.Language.CUDA)
    assert ir.error_nodes == 0
    assert ir.root.span == kir.Span(0, len(text.encode()))
    for node in ir.nodes:
        if node.parent is not None:
            parent = ir.node(node.parent)
            assert parent.span.contains(node.span), (node, parent)
            assert node.id > parent.id  # pre-order
        for a, b in zip(node.children, node.children[1:]):
            assert ir.span_of(a).end <= ir.span_of(b).start  # siblings in source order
        assert node.kind in K.ALL


def test_triton_kinds_and_attrs():
    ir = kir.parse_file(KERNELS / "flash_attention_fwd.py")
    (kernel,) = ir.find(K.KERNEL)
    assert kernel.name == "attn_fwd"
    assert kernel.attrs["decorators"] == ("triton.heuristics", "triton.autotune", "triton.jit")
    assert ir.node_text(kernel).startswith("@triton.heuristics")  # span covers decorators
    assert [d.name for d in ir.find(K.DECORATOR)] == list(kernel.attrs["decorators"])
    assert {p.name for p in ir.find(K.CONSTEXPR_PARAM)} == {
        "HEAD_DIM", "BLOCK_M", "BLOCK_N", "CAUSAL", "EVEN_N"}
    (loop,) = ir.find(K.LOOP)
    assert loop.attrs["iterator"] == "tl.range" and loop.attrs["target"] == "start_n"
    assert [ir.node_text(d) for d in ir.find(K.DOT)] == [
        "tl.dot(q, k)", "tl.dot(p.to(v.dtype), v, acc)"]
    assert len(ir.find(K.LOAD)) == 4 and len(ir.find(K.STORE)) == 1
    (launch,) = ir.find(K.LAUNCH)
    assert launch.name == "attn_fwd" and "CAUSAL" in launch.attrs["keywords"]
    assert ir.find(K.FUNCTION, name="run")


def test_triton_barrier_while_static_range_and_descriptors():
    ir = kir.parse_file(KERNELS / "layernorm_fused.py")
    assert [n.name for n in ir.find(K.BARRIER)] == ["tl.debug_barrier"]
    flavors = [(n.attrs["flavor"], n.attrs.get("iterator")) for n in ir.find(K.LOOP)]
    assert flavors == [("while", None), ("for", "range"), ("for", "range"),
                       ("for", "tl.static_range")]
    desc = kir.parse_file(KERNELS / "vector_add_desc.py")
    assert [n.name for n in desc.find(K.LOAD)] == ["x_desc.load", "y_desc.load"]
    assert [n.name for n in desc.find(K.STORE)] == ["out_desc.store"]


def test_cuda_kinds_and_attrs():
    ir = kir.parse_file(KERNELS / "tiled_mma.cuh")
    (kernel,) = ir.find(K.KERNEL)
    assert kernel.name == "gemm_kernel"
    assert kernel.attrs["launch_bounds"] == ("128", "2")
    assert {n.name for n in ir.find(K.SHARED_DECL)} == {"smem_raw", "epilogue"}
    assert [n.name for n in ir.find(K.PRAGMA)] == ["once", "unroll", "unroll"]
    assert ir.find(K.PRAGMA)[2].attrs["args"] == ("4",)
    asms = [n for n in ir.nodes if n.grammar_type == "gnu_asm_expression"]
    by_kind = {n.attrs["ops"][0]: n.kind for n in asms}
    assert by_kind["mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"] == K.DOT
    assert by_kind["ldmatrix.sync.aligned.m8n8.x4.shared.b16"] == K.LOAD
    assert by_kind["cp.async.commit_group"] == K.BARRIER
    assert by_kind["cp.async.wait_group"] == K.BARRIER
    assert any(n.kind == K.LOAD and "cp.async.cg.shared.global" in n.attrs["ops"] for n in asms)
    assert [n.name for n in ir.find(K.BARRIER) if n.grammar_type == "call_expression"] == ["cp_async_wait",
        "__syncthreads", "__syncthreads"]
    (launch,) = ir.find(K.LAUNCH)
    assert launch.name == "klt::gemm::gemm_kernel"
    assert {n.name for n in ir.find(K.CONSTEXPR_PARAM)} >= {"M", "N", "K", "Stages"}
    assert {n.name for n in ir.find(K.CLASS)} == {"GemmShape", "MmaPipelined", "SharedStorage"}


def test_cuda_unknown_attribute_macros_keep_offsets():
    ir = kir.parse_file(KERNELS / "wgmma_tma.cuh")
    assert ir.error_nodes == 0
    (kernel,) = ir.find(K.KERNEL)
    assert kernel.attrs["cluster_dims"] == ("1", "1", "1")
    assert kernel.attrs["launch_bounds"] == ("384",)
    assert ir.node_text(kernel).startswith("template") is False
    assert "__cluster_dims__(1, 1, 1)" in ir.node_text(kernel)  # real bytes, not the blanks
    wgmma = [n for n in ir.find(K.DOT) if n.grammar_type == "gnu_asm_expression"]
    assert wgmma and wgmma[0].attrs["ops"][0].startswith("wgmma.mma_async")


def test_non_ascii_byte_spans():
    src = 'import triton\n# σ and μ — ü\nX = "é"\n\n@triton.jit\ndef k(x):\n    y = x  # ε\n'
    ir = kir.parse(src, "triton")
    (assign,) = [n for n in ir.find(K.ASSIGN) if n.name == "y"]
    assert ir.node_text(assign) == "y = x"
    assert ir.source[assign.span.start:assign.span.end] == b"y = x"
    assert assign.line == 7
    cu = "// ü\n__global__ void k(float* x) { x[0] = 1.f; }  // é\n"
    cir = kir.parse(cu, "cuda")
    (kernel,) = cir.find(K.KERNEL)
    assert cir.node_text(kernel) == "__global__ void k(float* x) { x[0] = 1.f; }"


def test_language_detection_and_override(tmp_path):
    assert kir.detect_language("a.cuh") is kir.Language.CUDA
    assert kir.detect_language("a.py") is kir.Language.TRITON
    p = tmp_path / "kernel.txt"
    p.write_text("@triton.jit\ndef k(x):\n    pass\n")
    with pytest.raises(BadInputError, match="unknown suffix"):
        kir.parse_file(p)
    assert kir.parse_file(p, language="triton").find(K.KERNEL)
    with pytest.raises(BadInputError, match="cannot tell the language"):
        kir.parse("x = 1\n")
    with pytest.raises(BadInputError, match="unknown language"):
        kir.parse("x = 1\n", language="rust")


@pytest.mark.parametrize(
    "name, data, message",
    [
        ("missing.cu", None, "no such file"),
        ("empty.py", b"  \n\n", "empty file"),
        ("binary.cu", b"\x7fELF\x00\x01\x02", "binary"),
        ("latin1.py", "x = 'caf\xe9'\n".encode("latin-1"), "not UTF-8"),
        ("syntax.py", b"def k(:\n  pass\n", "Python syntax error"),
        ("garbage.cu", b"}}}} )))) ;;;; ((((\n", "not CUDA C++"),
    ],
)
def test_bad_input_raises_bad_input_error(tmp_path, name, data, message):
    p = tmp_path / name
    if data is not None:
        p.write_bytes(data)
    with pytest.raises(BadInputError, match=message):
        kir.parse_file(p)


def test_triton_syntax_error_is_parse_error():
    with pytest.raises(ParseError):
        kir.parse("for x in :\n", "triton")


def test_cuda_recoverable_errors_still_parse():
    src = "int f() { return 1 +; }\n__global__ void k(int* x) { x[0] = 1; __syncthreads(); }\n"
    ir = kir.parse(src, "cuda")
    assert ir.error_nodes >= 1
    assert ir.unparse() == src
    assert ir.find(K.FUNCTION, name="f")
    assert ir.find(K.BARRIER)


def test_apply_edits_returns_new_ir_and_keeps_old():
    path = EXAMPLES / "matmul_naive.py"
    ir = kir.parse_file(path)
    (dot,) = ir.find(K.DOT)
    (store,) = ir.find(K.STORE)
    new = ir.apply([kir.Edit(dot.span, "tl.dot(a, b, allow_tf32=False)"),
                    kir.Edit(kir.Span(store.span.start, store.span.start), "pass\n    ")])
    assert "tl.dot(a, b, allow_tf32=False)" in new.text
    assert "    pass\n    tl.store(" in new.text
    assert new.find(K.DOT)[0].attrs["keywords"] == ("allow_tf32",)
    assert ir.text == path.read_text()  # the old IR is untouched
    assert ir.node_text(dot) == "tl.dot(a, b)"
    assert new.path == ir.path and new.language is ir.language


def test_apply_rejects_overlapping_or_out_of_range_edits():
    ir = kir.parse_file(EXAMPLES / "matmul_naive.py")
    with pytest.raises(BadInputError, match="overlap"):
        ir.apply([kir.Edit(kir.Span(10, 20), "x"), kir.Edit(kir.Span(15, 25), "y")])
    with pytest.raises(BadInputError, match="outside"):
        ir.apply([kir.Edit(kir.Span(0, len(ir.source) + 1), "")])


def test_apply_that_breaks_syntax_raises_parse_error():
    ir = kir.parse_file(EXAMPLES / "matmul_naive.py")
    (loop,) = ir.find(K.LOOP)
    with pytest.raises(ParseError):
        ir.apply([kir.Edit(kir.Span(loop.span.start, loop.span.start + 3), "fro")])


def test_find_walk_and_node_accessors_agree():
    ir = kir.parse_file(CUDA_CORPUS[0])
    loops = ir.find(K.LOOP)
    assert loops and all(n.kind == K.LOOP for n in loops)
    first = loops[0]
    sub = list(ir.walk(first))
    assert sub[0] == first and len(sub) == ir.subtree_end(first.id) - first.id
    assert all(first.span.contains(n.span) for n in sub)
    assert ir.parent_of(first.id) == first.parent
    assert list(ir.ancestors(first))[-1] == 0


def test_triton_spans_match_libcst_provider():
    import libcst as cst
    from libcst.metadata import ByteSpanPositionProvider, MetadataWrapper

    from kir.triton_cst import byte_spans

    for path in TRITON_CORPUS:
        text = path.read_text()
        module = cst.parse_module(text)
        ref = MetadataWrapper(module, unsafe_skip_copy=True).resolve(ByteSpanPositionProvider)
        got = byte_spans(module, text.isascii())
        for node, span in ref.items():
            if not isinstance(node, cst.Module):  # the module span is set to the whole file
                assert got[id(node)] == (span.start, span.start + span.length)


@pytest.mark.parametrize("prefix, newline", [("\ufeff", "\n"), ("", "\r\n"), ("", "\n")])
def test_bom_and_crlf_keep_spans_exact(prefix, newline):
    src = prefix + newline.join(["import triton", "@triton.jit", "def k(x):",
                                 "    y = tl.load(x)  # é", "    return y", ""])
    ir = kir.parse(src, "triton")
    assert ir.unparse() == src
    (kernel,) = ir.find(K.KERNEL)
    assert ir.node_text(kernel).startswith("@triton.jit")
    assert ir.node_text(ir.find(K.LOAD)[0]) == "tl.load(x)"
    assert ir.find(K.LOAD)[0].line == 4


def test_pathologically_deep_nesting_is_a_parse_error_not_a_crash():
    with pytest.raises(ParseError, match="nests too deeply"):
        kir.parse("x = " + "-" * 1000 + "1\n", "triton")


def test_cutlass_style_qualifier_macros_are_recovered():
    ir = kir.parse_file(KERNELS / "epilogue_macros.h")
    assert ir.error_nodes == 0
    (kernel,) = ir.find(K.KERNEL)
    assert kernel.name == "apply_epilogue"
    assert kernel.attrs["macros"] == ("KLT_GLOBAL",)
    assert kernel.attrs["launch_bounds"] == ("256",)
    assert ir.node_text(kernel).startswith("KLT_GLOBAL void")  # the macro is in the span
    ops = [f for f in ir.find(K.FUNCTION) if f.name == "operator()"]
    assert ops and ops[0].attrs["macros"] == ("KLT_DEVICE",)
    # a value macro that merely contains DEVICE is left alone
    (tiles,) = [n for n in ir.find(K.ASSIGN) if n.name == "tiles"]
    assert ir.node_text(tiles) == "int tiles = KLT_MAX_DEVICE_TILES;"


def test_launch_bounds_macro_is_read_back():
    src = ("template <int nt, typename R>\nC10_LAUNCH_BOUNDS_2(nt, 4)\n"
           "__global__ void reduce_kernel(R reduction) {\n  reduction.run();\n}\n")
    ir = kir.parse(src, "cuda")
    assert ir.error_nodes == 0
    (kernel,) = ir.find(K.KERNEL)
    assert kernel.attrs["launch_bounds"] == ("nt", "4")
    assert ir.node_text(kernel).startswith("C10_LAUNCH_BOUNDS_2(nt, 4)\n__global__")
