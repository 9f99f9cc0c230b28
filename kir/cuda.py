"""CUDA C++ back-end: tree-sitter with the CUDA grammar -> `Columns`.

Every named tree-sitter node becomes an IR node (anonymous tokens such as punctuation are
dropped; their bytes stay covered by the parent's span). This module is the one adapter over the
py-tree-sitter API; no tree-sitter object escapes it, so nothing holds a tree across an edit.
"""
from __future__ import annotations

import functools
import re
from types import MappingProxyType
from typing import Any

import tree_sitter
import tree_sitter_cuda

from kir import kinds as K
from kir.columns import Columns

_LOOPS = {"for_statement": "for", "for_range_loop": "for", "while_statement": "while",
          "do_statement": "do"}
_BRANCHES = {"if_statement": "if", "switch_statement": "switch"}
_LITERALS = frozenset({"number_literal", "string_literal", "char_literal", "true", "false",
                       "null", "nullptr", "raw_string_literal", "concatenated_string"})
_NAMES = frozenset({"identifier", "field_identifier", "type_identifier", "namespace_identifier",
                    "primitive_type"})
_OPERATOR_EXPRS = frozenset({"binary_expression", "unary_expression", "update_expression",
                             "pointer_expression", "field_expression"})
_CLASSES = frozenset({"struct_specifier", "class_specifier", "union_specifier"})

# callee (last `::`/`.` component) -> kind; recognizable memory traffic, tensor-core math, barriers
_BARRIER_CALLS = re.compile(
    r"^(__syncthreads(_or|_and|_count)?|__syncwarp|__threadfence(_block|_system)?|"
    r"cp_async_wait(_all|_group)?|__pipeline_wait_prior|__barrier_sync|arrive_and_wait|"
    r"sync|wait|wait_prior|fence_view_async_shared|warpgroup_wait|cp_async_fence)$"
)
_LOAD_CALLS = re.compile(
    r"^(__ldg|__ldcg|__ldca|__ldcs|__ldlu|__ldcv|cp_async\w*|__pipeline_memcpy_async|"
    r"memcpy_async|load_matrix_sync|ldmatrix\w*|tex\dD\w*)$"
)
_STORE_CALLS = re.compile(r"^(__stcg|__stcs|__stwb|__stwt|store_matrix_sync|stmatrix\w*)$")
_DOT_CALLS = re.compile(r"(mma|__hmma\w*|__imma\w*|gemm)", re.IGNORECASE)

# PTX mnemonics in inline asm -> kind
_ASM_BARRIER = re.compile(
    r"^(cp\.async\.(wait|commit)|cp\.async\.bulk\.(wait|commit)|bar\.|barrier\.|"
    r"mbarrier\.(try_wait|test_wait|arrive)|fence\.|membar\.|wgmma\.(fence|commit|wait))"
)
_ASM_DOT = re.compile(r"^(w?gmma\.mma|mma\.|wmma\.mma)")
_ASM_LOAD = re.compile(r"^(cp\.async|ld\.|ldmatrix|ldu\.|prefetch\.|tensormap|cp\.reduce)")
_ASM_STORE = re.compile(r"^(st\.|stmatrix|red\.|atom\.)")
_MNEMONIC = re.compile(r"[A-Za-z_][\w.:]*")


# CUDA attribute macros the tree-sitter grammar does not know. They are blanked (same byte
# length, newlines kept) in the bytes handed to tree-sitter, so offsets into the real source
# stay exact; their arguments are read back from the real source into the function's attrs.
_MASKED = re.compile(rb"\b(__align__|__cluster_dims__|__maxnreg__|"
                     rb"[A-Z][A-Z0-9_]*LAUNCH_BOUNDS[A-Z0-9_]*)\s*\([^()]*\)")
_LAUNCH_BOUNDS_MACRO = re.compile(r"\b[A-Z][A-Z0-9_]*LAUNCH_BOUNDS[A-Z0-9_]*\s*\(([^()]*)\)")
_CLUSTER = re.compile(r"__cluster_dims__\s*\(([^()]*)\)")
_MAXNREG = re.compile(r"__maxnreg__\s*\(([^()]*)\)")


# Project qualifier macros (CUTLASS_HOST_DEVICE, C10_DEVICE, CUTE_HOST_DEVICE, ...) read as a
# type to the grammar and derail the declaration after them; they are blanked the same way
# (not on preprocessor lines, where they are being defined) and kept in the function's attrs.
_QUALIFIER_MACRO = re.compile(
    rb"\b[A-Z][A-Z0-9_]*_(?:DEVICE|HOST|INLINE|FORCEINLINE|GLOBAL)\b(?=[ \t\n]+[A-Za-z_:])")


# Every byte but a newline to a space, a table made from integers: a one-byte bytes value
# (`b" "`) is one object shared by the whole process, which a host that lets NVRTC write a
# terminator into `b" " * 1` overwrites (`experts.cudahost.shared_byte`).
_TO_SPACE = bytes(10 if b == 10 else 32 for b in range(256))


def _blank(match: re.Match[bytes]) -> bytes:
    return match.group(0).translate(_TO_SPACE)


def _blank_qualifier(match: re.Match[bytes]) -> bytes:
    src = match.string
    line = src[src.rfind(b"\n", 0, match.start()) + 1 : match.start()]
    if line.lstrip().startswith(b"#"):
        return match.group(0)
    return match.group(0).translate(_TO_SPACE)


_MACRO_PREFIX = re.compile(
    rb"(?:(?:\b[A-Z][A-Z0-9_]*_(?:DEVICE|HOST|INLINE|FORCEINLINE|GLOBAL)|"
    rb"\b[A-Z][A-Z0-9_]*LAUNCH_BOUNDS[A-Z0-9_]*\s*\([^()]*\))[ \t\n]+)+$")


def _macro_prefix(source: bytes, start: int) -> bytes:
    """Blanked qualifier macros right before a function (they belong to its span)."""
    if start == 0 or source[start - 1] not in b" \t\n":
        return b""
    found = _MACRO_PREFIX.search(source, max(0, start - 256), start)
    return found.group(0) if found else b""


def mask_for_grammar(source: bytes) -> bytes:
    """`source` with the constructs the grammar does not know blanked (same length)."""
    if b"__" in source or b"LAUNCH_BOUNDS" in source:
        source = _MASKED.sub(_blank, source)
    return _QUALIFIER_MACRO.sub(_blank_qualifier, source)


@functools.cache
def _parser() -> tree_sitter.Parser:
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_cuda.language()))


def _last_component(callee: str) -> str:
    callee = callee.split("<", 1)[0]
    return re.split(r"::|\.|->", callee)[-1].strip()


def asm_mnemonics(template: str) -> tuple[str, ...]:
    """PTX instruction mnemonics in an inline-asm template (labels and braces skipped)."""
    ops: list[str] = []
    for stmt in re.split(r"[;\n{}]|\\n", template):
        stmt = stmt.strip()
        if not stmt or stmt.startswith(("//", ".reg", ".pred")) or stmt.endswith(":"):
            continue
        if stmt.startswith("@"):  # predicated instruction: `@p ld.global ...`
            stmt = stmt.split(None, 1)[1] if " " in stmt else ""
        m = _MNEMONIC.match(stmt)
        if m:
            ops.append(m.group(0))
    return tuple(ops)


def asm_kind(ops: tuple[str, ...]) -> str:
    """Normalized kind of an asm statement from its mnemonics (dot > barrier > load > store)."""
    for pattern, kind in ((_ASM_DOT, K.DOT), (_ASM_BARRIER, K.BARRIER), (_ASM_LOAD, K.LOAD),
                          (_ASM_STORE, K.STORE)):
        if any(pattern.match(op) for op in ops):
            return kind
    return K.ASM


def call_kind(callee: str) -> str:
    last = _last_component(callee)
    if _BARRIER_CALLS.match(last):
        return K.BARRIER
    if _LOAD_CALLS.match(last):
        return K.LOAD
    if _STORE_CALLS.match(last):
        return K.STORE
    if _DOT_CALLS.search(last):
        return K.DOT
    return K.CALL


def _text(src: bytes, node: tree_sitter.Node) -> str:
    return src[node.start_byte : node.end_byte].decode("utf-8", "replace")


def _declarator_name(src: bytes, node: tree_sitter.Node | None) -> str | None:
    """The declared name under a (possibly nested) declarator."""
    while node is not None:
        t = node.type
        if t in ("identifier", "field_identifier", "qualified_identifier", "operator_name",
                 "destructor_name", "type_identifier"):
            return _text(src, node)
        if t == "template_function":
            return _declarator_name(src, node.child_by_field_name("name"))
        inner = node.child_by_field_name("declarator")
        if inner is None:
            # e.g. array/pointer/reference declarators without a field, or parenthesized ones
            inner = next((c for c in node.named_children if c.type != "type_qualifier"), None)
        node = inner
    return None


def _base_name(src: bytes, node: tree_sitter.Node | None) -> str | None:
    """The variable an assignment target writes: `smem[i][j]` -> `smem`, `p->x` -> `p->x`."""
    while node is not None and node.type in ("subscript_expression", "pointer_expression",
                                             "parenthesized_expression"):
        node = node.child_by_field_name("argument") or (
            node.named_children[0] if node.named_children else None)
    return None if node is None else _text(src, node)


def _classify(
    src: bytes, node: tree_sitter.Node, t: str, in_template_params: bool
) -> tuple[str, str | None, dict[str, Any] | None]:
    """(kind, name, attrs) of one named node."""
    if t in _NAMES:
        return K.NAME, _text(src, node), None
    if t in _LITERALS:
        return K.LITERAL, None, None
    if t == "call_expression":
        fn = node.child_by_field_name("function")
        callee = _text(src, fn) if fn is not None else ""
        if fn is not None and fn.type == "template_function":
            name_node = fn.child_by_field_name("name")
            callee = _text(src, name_node) if name_node is not None else callee
        callee = "".join(callee.split())
        attrs: dict[str, Any] = {}
        if "<" in callee and "operator" not in callee:
            # `ns::kernel<Shape, 3>` is a call of `ns::kernel`; the arguments stay in attrs
            callee, targs = callee.split("<", 1)
            attrs["template_args"] = "<" + targs
        attrs["callee"] = callee
        if any(c.type == "kernel_call_syntax" for c in node.children):
            return K.LAUNCH, callee, attrs
        return call_kind(callee), callee, attrs
    if t in _LOOPS:
        return K.LOOP, None, {"flavor": _LOOPS[t]}
    if t in _BRANCHES:
        return K.BRANCH, None, {"flavor": _BRANCHES[t]}
    if t == "function_definition":
        quals = tuple(c.type for c in node.children
                      if not c.is_named and c.type.startswith("__"))
        name = _declarator_name(src, node.child_by_field_name("declarator"))
        if name and " " in name and "operator" not in name:
            # an unknown macro or type before the name was read as part of it
            name = name.split()[-1]
        attrs = {"qualifiers": quals}
        lb = next((c for c in node.named_children if c.type == "launch_bounds"), None)
        if lb is not None:
            attrs["launch_bounds"] = tuple(_text(src, a) for a in lb.named_children)
        body = node.child_by_field_name("body")
        head = src[node.start_byte : body.start_byte if body is not None else node.end_byte]
        prefix = _macro_prefix(src, node.start_byte)
        head = prefix + head
        macros = tuple(m.decode() for m in _QUALIFIER_MACRO.findall(head))
        lb_macro = _LAUNCH_BOUNDS_MACRO.search(head.decode("utf-8", "replace"))
        if lb_macro and "launch_bounds" not in attrs:
            attrs["launch_bounds"] = tuple(a.strip() for a in lb_macro.group(1).split(","))
        if macros:
            attrs["macros"] = macros
            if any(m.endswith("_GLOBAL") for m in macros):
                quals = (*quals, "__global__")
                attrs["qualifiers"] = quals
        if b"__cluster_dims__" in head or b"__maxnreg__" in head:
            head_text = head.decode("utf-8", "replace")
            for key, pattern in (("cluster_dims", _CLUSTER), ("maxnreg", _MAXNREG)):
                found = pattern.search(head_text)
                if found:
                    attrs[key] = tuple(a.strip() for a in found.group(1).split(","))
        return (K.KERNEL if "__global__" in quals else K.FUNCTION), name, attrs
    if t == "declaration":
        quals = [_text(src, c) for c in node.named_children if c.type == "type_qualifier"]
        decl = node.child_by_field_name("declarator")
        name = _declarator_name(src, decl)
        if "__shared__" in quals:
            return K.SHARED_DECL, name, {"extern": any(
                c.type == "storage_class_specifier" and _text(src, c) == "extern"
                for c in node.named_children)}
        if decl is not None and decl.type == "init_declarator":
            return K.ASSIGN, name, None
        return K.DECL, name, None
    if t in _OPERATOR_EXPRS:
        # the operator token is anonymous; keep it as the name so a diff sees `+` -> `*`
        op = node.child_by_field_name("operator")
        return K.OTHER, _text(src, op) if op is not None else None, None
    if t == "assignment_expression":
        op = node.child_by_field_name("operator")
        return K.ASSIGN, _base_name(src, node.child_by_field_name("left")), {
            "op": _text(src, op) if op is not None else "="}
    if t == "return_statement":
        return K.RETURN, None, None
    if t == "gnu_asm_expression" or t == "asm_statement":
        lit = node.child_by_field_name("assembly_code")
        template = _text(src, lit) if lit is not None else _text(src, node)
        ops = asm_mnemonics(template.replace('"', " "))
        return asm_kind(ops), ops[0] if ops else None, {"ops": ops, "volatile": any(
            c.type == "gnu_asm_qualifier" for c in node.named_children)}
    if t == "preproc_call":
        directive = node.child_by_field_name("directive")
        if directive is not None and _text(src, directive).strip() == "#pragma":
            arg = node.child_by_field_name("argument")
            words = _text(src, arg).split() if arg is not None else []
            return K.PRAGMA, words[0] if words else None, {"args": tuple(words[1:])}
        return K.OTHER, None, None
    if t == "parameter_declaration" or t == "optional_parameter_declaration":
        name = _declarator_name(src, node.child_by_field_name("declarator"))
        return (K.CONSTEXPR_PARAM if in_template_params else K.PARAM), name, None
    if t in ("type_parameter_declaration", "optional_type_parameter_declaration",
             "variadic_type_parameter_declaration"):
        ident = next((c for c in node.named_children if c.type == "type_identifier"), None)
        return K.PARAM, _text(src, ident) if ident is not None else None, {"template": True}
    if t in _CLASSES:
        body = node.child_by_field_name("body")
        if body is not None:
            nm = node.child_by_field_name("name")
            return K.CLASS, _text(src, nm) if nm is not None else None, None
        return K.OTHER, None, None
    if t == "namespace_definition":
        nm = node.child_by_field_name("name")
        return K.NAMESPACE, _text(src, nm) if nm is not None else "(anonymous)", None
    if t == "template_declaration":
        return K.TEMPLATE, None, None
    if t == "translation_unit":
        return K.MODULE, None, None
    if t == "ERROR":
        return K.ERROR, None, None
    return K.OTHER, None, None


def build(source: bytes) -> tuple[Columns, int]:
    """Parse CUDA C++ bytes; returns the node table and the number of ERROR/MISSING nodes."""
    tree = _parser().parse(mask_for_grammar(source))
    cols = Columns()
    # local appends instead of Columns.add: this loop runs once per node of every file
    kinds_, gtypes, names, starts, ends, parents = (
        cols.kinds, cols.gtypes, cols.names, cols.starts, cols.ends, cols.parents)
    attrs_of = cols.attrs
    errors = 0
    cursor = tree.walk()
    # stack of (ir id to use as parent for children, inside template parameter list?)
    stack: list[tuple[int, bool]] = [(-1, False)]
    while True:
        node = cursor.node
        assert node is not None
        parent, in_tparams = stack[-1]
        nid = parent
        t = node.type
        if node.is_missing or node.is_named:
            if node.is_missing:
                errors += 1
                kind, name, attrs, t = K.ERROR, t, None, "MISSING"
            else:
                if t == "ERROR":
                    errors += 1
                kind, name, attrs = _classify(source, node, t, in_tparams)
            start = node.start_byte
            if t == "function_definition":
                start -= len(_macro_prefix(source, start))
            nid = len(kinds_)
            kinds_.append(kind)
            gtypes.append(t)
            names.append(name)
            starts.append(start)
            ends.append(node.end_byte)
            parents.append(parent)
            if attrs:
                attrs_of[nid] = MappingProxyType(attrs)
        if cursor.goto_first_child():
            stack.append((nid, t == "template_parameter_list" or (
                in_tparams and t not in ("parameter_list", "template_argument_list"))))
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                # the root must cover the whole file so unparse/edits see every byte
                cols.starts[0], cols.ends[0] = 0, len(source)
                return cols, errors
            stack.pop()
