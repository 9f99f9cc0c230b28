"""Reading CUDA C++ through its syntax tree (`KernelIR` nodes of the tree-sitter CUDA grammar).

- `block_items`: the statements of a block, each with its leading comments and pragmas and a
  comment that ends its line;
- `Scope`: what a function declares and writes, which functions and macros of the translation
  unit issue asynchronous copies, and which statements touch nothing but the thread's own
  registers (`thread_local`);
- `Scope.threads`: how an expression varies across the threads of a block, as the size of the
  aligned groups of consecutive threads (linear index `threadIdx.x`) on which it is constant:
  `UNIFORM` for the whole block, 32 (or a multiple) for a warp-uniform value, 1 for a value
  that may differ from thread to thread.

Positions are byte offsets of `KernelIR.source`.
"""
from __future__ import annotations

import ast
import math
import operator
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kir import kinds as K
from passes.cuda._c import code_view, tokens

if TYPE_CHECKING:
    from kir import KernelIR

UNIFORM = 0
"""`Scope.threads` of a value every thread of the block holds alike."""

_TRIVIA = frozenset({"comment", "preproc_call"})
_DECLARATORS = frozenset({"init_declarator", "array_declarator", "pointer_declarator",
                          "reference_declarator", "parenthesized_declarator"})
_LOOP_TYPES = frozenset({"for_statement", "for_range_loop", "while_statement", "do_statement"})
_BLOCK_INDEX = re.compile(r"^(blockIdx|blockDim|gridDim|warpSize)$")
_THREAD_INDEX = "threadIdx"
_THREAD_ASM = re.compile(r"%(?:tid|laneid|warpid|lanemask)")
# cooperative_groups calls whose value may differ between the threads of a block: a thread's
# rank in its group, its tile's rank, a tile's collectives (unless the unit defines the name)
_GROUP_THREAD_CALL = re.compile(r"thread_rank|thread_index|meta_group_rank|reduce|"
                                r"(?:inclusive|exclusive)_scan|shfl(?:_up|_down|_xor)?|ballot|"
                                r"any|all|match_any|match_all")
# library calls with effects beyond the thread's registers (memory, synchronization, I/O)
_IMPURE_CALL = re.compile(r"atomic|sync|shfl|ballot|vote|match_|activemask|printf|malloc|free|"
                          r"mem(?:cpy|set)|__ld|__st|cp_async|pipeline|barrier|fence|trap|"
                          r"sleep|clock|globaltimer|arrive|wait|elect|cluster|tensormap")
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(\([^)]*\))?((?:[^\n\\]|\\.)*)$", re.M | re.S)
_ASYNC_COPY = re.compile(r"\bcp(?:\.reduce)?\.async\b")
_ASYNC_COPY_CALL = re.compile(r"^(?:__pipeline_memcpy_async|memcpy_async|cp_async_bulk\w*)$")
# An asynchronous copy whose destination is shared memory (the state space right after the
# copy's own qualifiers): what a producer issues; a bulk store shared -> global is not one.
_ASYNC_LOAD = re.compile(r"\bcp\.async(?:\.bulk)?(?:\.tensor\.\dd)?(?:\.ca|\.cg)?\.shared\b")


@dataclass(frozen=True, slots=True)
class Item:
    """One statement of a block: `node` and the bytes `[start, end)` that carry it (leading
    comments and pragmas from `start`, a comment ending its last line up to `end`)."""

    node: int
    start: int
    end: int


def children(ir: KernelIR, nid: int, grammar_type: str | None = None) -> list[int]:
    kids = ir.children_of(nid)
    return [c for c in kids if grammar_type is None or ir.grammar_type_of(c) == grammar_type]


def subtree(ir: KernelIR, nid: int) -> range:
    """The ids of `nid` and its descendants (pre-order ids are contiguous)."""
    return range(nid, ir.subtree_end(nid))


def text(ir: KernelIR, nid: int) -> str:
    span = ir.span_of(nid)
    return ir.source[span.start:span.end].decode("utf-8", "replace")


def key(ir: KernelIR, nid: int) -> str:
    """Whitespace- and comment-free token text of a node (equal for the same code)."""
    return " ".join(tokens(code_view(text(ir, nid))))


def block_items(ir: KernelIR, nid: int) -> list[Item]:
    """The statements of the block `nid` (a compound statement; any other statement is a block
    of one), in order."""
    if ir.grammar_type_of(nid) != "compound_statement":
        span = ir.span_of(nid)
        return [Item(nid, span.start, span.end)]
    out: list[Item] = []
    lead: int | None = None
    src = ir.source
    for c in ir.children_of(nid):
        gtype, span = ir.grammar_type_of(c), ir.span_of(c)
        if gtype == "comment" and out and b"\n" not in src[out[-1].end:span.start] and lead is None:
            out[-1] = Item(out[-1].node, out[-1].start, span.end)  # a comment ending the line
            continue
        if gtype in _TRIVIA:
            lead = span.start if lead is None else lead
            continue
        out.append(Item(c, span.start if lead is None else lead, span.end))
        lead = None
    return out


def if_parts(ir: KernelIR, nid: int) -> tuple[int, int, int | None]:
    """(condition expression, then-statement, else-statement or None) of an if statement."""
    kids = [c for c in ir.children_of(nid) if ir.grammar_type_of(c) not in _TRIVIA]
    cond = children(ir, kids[0])[-1]
    other = next((c for c in kids[2:] if ir.grammar_type_of(c) == "else_clause"), None)
    alt = None
    if other is not None:
        alt = [c for c in ir.children_of(other) if ir.grammar_type_of(c) not in _TRIVIA][0]
    return cond, kids[1], alt


def loop_body(ir: KernelIR, nid: int) -> int:
    """The body statement of a `for`/`while` loop (its last non-comment child)."""
    return [c for c in ir.children_of(nid) if ir.grammar_type_of(c) not in _TRIVIA][-1]


def declared_names(ir: KernelIR, decl: int) -> list[tuple[str, int, int | None]]:
    """(name, identifier node, initializer node or None) for each declarator of a
    declaration."""
    out = []
    for c in children(ir, decl):
        gtype = ir.grammar_type_of(c)
        if gtype == "identifier":
            out.append((ir.name_of(c), c, None))
        elif gtype in _DECLARATORS:
            init = children(ir, c)[-1] if gtype == "init_declarator" else None
            node = c
            while ir.grammar_type_of(node) != "identifier":
                inner = [k for k in children(ir, node) if ir.grammar_type_of(k) != "type_qualifier"]
                if not inner:
                    break
                node = inner[0]
            if ir.grammar_type_of(node) == "identifier":
                out.append((ir.name_of(node), node, init))
    return out


def _is_array(ir: KernelIR, ident: int, decl: int) -> bool:
    node = ir.parent_of(ident)
    while node is not None and node != decl:
        if ir.grammar_type_of(node) == "array_declarator":
            return True
        if ir.grammar_type_of(node) == "init_declarator":
            return False
        node = ir.parent_of(node)
    return False


def escapes(ir: KernelIR, nid: int) -> str | None:
    """Why control can leave the statement `nid` other than by running to its end (a
    `return`, a `goto`, or a `break`/`continue` bound to a loop around it), else None."""
    for c in subtree(ir, nid):
        gtype = ir.grammar_type_of(c)
        if gtype in ("return_statement", "goto_statement"):
            return gtype.split("_")[0]
        if gtype in ("break_statement", "continue_statement"):
            bound = False
            for a in ir.ancestors(c):
                if a == nid:
                    break
                at = ir.grammar_type_of(a)
                if at in _LOOP_TYPES or (at == "switch_statement" and gtype == "break_statement"):
                    bound = True
                    break
            if not bound:
                return gtype.split("_")[0]
    return None


def callee(ir: KernelIR, call: int) -> str:
    """The called name of a call expression (the last `::`/`.` component, no template args)."""
    name = ir.attrs_of(call).get("callee") or ir.name_of(call) or ""
    return re.split(r"::|\.|->", name)[-1]


class Scope:
    """A translation unit's functions and macros, and one function's names."""

    def __init__(self, ir: KernelIR) -> None:
        self.ir = ir
        self.functions: dict[str, int] = {}
        for n in ir.find(kind=(K.FUNCTION, K.KERNEL)):
            if n.name and children(ir, n.id, "compound_statement"):
                self.functions.setdefault(n.name.split("::")[-1], n.id)
        code = code_view(ir.text)
        self.macros: dict[str, str] = {}
        self.function_macros: dict[str, str] = {}
        self.macro_params: dict[str, list[str]] = {}
        for m in _DEFINE.finditer(ir.text):
            if not code[m.start():m.end()].strip():
                continue
            body = m.group(3).replace("\\\n", " ")
            (self.function_macros if m.group(2) else self.macros)[m.group(1)] = body
            if m.group(2):
                self.macro_params[m.group(1)] = [p.strip() for p in m.group(2)[1:-1].split(",")
                                                 if p.strip()]

    def expansion(self, name: str, args: list[str]) -> str | None:
        """The text a call of the function-like macro `name` with `args` expands to (each
        parameter replaced by its parenthesized argument), or None (no such macro, or another
        number of arguments)."""
        if name not in self.function_macros or len(self.macro_params[name]) != len(args):
            return None
        body = self.function_macros[name]
        for p, a in zip(self.macro_params[name], args):
            body = re.sub(rf"\b{re.escape(p)}\b", f"({a})", body)
        return body.strip()

    # ---- the function in view -------------------------------------------------------------
    def enter(self, fn: int) -> None:
        """Read the names of function `fn` (declarations, writes, parameters)."""
        ir = self.ir
        self.decls: dict[str, list[tuple[int, int | None]]] = {}
        self.arrays: set[str] = set()
        self.params: set[str] = set()
        self.writes: dict[str, list[int]] = {}
        for nid in subtree(ir, fn):
            gtype = ir.grammar_type_of(nid)
            if gtype == "declaration" or (gtype == "parameter_declaration"):
                for name, ident, init in declared_names(ir, nid):
                    if gtype == "parameter_declaration":
                        self.params.add(name)
                        continue
                    self.decls.setdefault(name, []).append((ident, init))
                    if _is_array(ir, ident, nid) and ir.kind_of(nid) != K.SHARED_DECL:
                        self.arrays.add(name)
            for name in self.written(nid):
                self.writes.setdefault(name, []).append(nid)

    def fn_of(self, nid: int) -> int | None:
        """The function definition holding `nid`."""
        for a in self.ir.ancestors(nid):
            if self.ir.grammar_type_of(a) == "function_definition":
                return a
        return None

    def written(self, nid: int) -> list[str]:
        """Names the node itself writes: an assignment's or update's target variable, an
        identifier passed to a reference parameter of a function of the unit (or by address),
        an asm output operand."""
        ir = self.ir
        gtype = ir.grammar_type_of(nid)
        if gtype in ("assignment_expression", "update_expression"):
            base = _base(ir, children(ir, nid)[0])
            return [base] if base else []
        if gtype == "gnu_asm_output_operand":
            base = _base(ir, children(ir, nid)[-1])
            return [base] if base else []
        if gtype == "call_expression":
            args = children(ir, nid, "argument_list")
            if not args:
                return []
            refs = self._reference_params(callee(ir, nid))
            out = []
            for i, arg in enumerate(children(ir, args[0])):
                if i in refs or (ir.grammar_type_of(arg) == "pointer_expression"
                                 and ir.name_of(arg) == "&"):
                    base = _base(ir, arg)
                    if base:
                        out.append(base)
            return out
        return []

    def _reference_params(self, name: str) -> set[int]:
        fn = self.functions.get(name)
        if fn is None:
            return set()
        ir = self.ir
        plist = next((c for c in subtree(ir, fn)
                      if ir.grammar_type_of(c) == "parameter_list"), None)
        if plist is None:
            return set()
        return {i for i, p in enumerate(children(ir, plist))
                if any(ir.grammar_type_of(c) == "reference_declarator" for c in subtree(ir, p))}

    def returned(self, name: str) -> tuple[list[str], str] | None:
        """(parameter names, returned expression) of a function of the unit whose body is one
        `return expr;` over value parameters (an index helper: `int row_of(int t) { return t /
        W; }`), or None."""
        fn = self.functions.get(name)
        if fn is None:
            return None
        ir = self.ir
        body = children(ir, fn, "compound_statement")
        items = block_items(ir, body[0]) if body else []
        if len(items) != 1 or ir.grammar_type_of(items[0].node) != "return_statement":
            return None
        value = [c for c in children(ir, items[0].node) if ir.grammar_type_of(c) not in
                 ("comment", "return", ";")]
        plist = next((c for c in subtree(ir, fn) if ir.grammar_type_of(c) == "parameter_list"), None)
        if len(value) != 1 or plist is None:
            return None
        params = []
        for p in children(ir, plist):
            if ir.grammar_type_of(p) != "parameter_declaration":
                continue
            if any(ir.grammar_type_of(c) in ("reference_declarator", "pointer_declarator",
                                             "array_declarator") for c in subtree(ir, p)):
                return None
            names = declared_names(ir, p)
            if len(names) != 1:
                return None
            params.append(names[0][0])
        return params, text(ir, value[0])

    # ---- asynchronous copies --------------------------------------------------------------
    def issues_copies(self, nid: int) -> bool:
        """Whether the statement `nid` issues an asynchronous copy (cp.async, TMA, the pipeline
        primitives), itself or through functions and macros of the unit it calls."""
        return self._copies(nid, _ASYNC_COPY, frozenset())

    def issues_loads(self, nid: int) -> bool:
        """Whether the statement `nid` issues an asynchronous copy into shared memory (as
        `issues_copies`, less bulk stores to global memory and bulk-group waits)."""
        return self._copies(nid, _ASYNC_LOAD, frozenset())

    def _copies(self, nid: int, pattern: re.Pattern[str], seen: frozenset[str]) -> bool:
        ir = self.ir
        for c in subtree(ir, nid):
            if ir.grammar_type_of(c) == "gnu_asm_expression":
                if any(pattern.match(op) for op in ir.attrs_of(c).get("ops", ())):
                    return True
            elif ir.grammar_type_of(c) == "call_expression":
                name = callee(ir, c)
                if _ASYNC_COPY_CALL.match(name):
                    return True
                if name in seen:
                    continue
                if name in self.function_macros and pattern.search(self.function_macros[name]):
                    return True
                if name in self.functions and self._copies(self.functions[name], pattern, seen | {name}):
                    return True
        return False

    # ---- what a statement touches -----------------------------------------------------------
    def thread_local(self, nid: int) -> str | None:
        """Why running the statement `nid` in any thread could have an effect beyond that
        thread's registers or could fault (a store, a memory read, inline asm, a call with
        effects), else None. Local arrays and variables of the function are registers here."""
        return self._local(nid, self.arrays, frozenset())

    def _local(self, nid: int, arrays: set[str], seen: frozenset[str]) -> str | None:
        ir = self.ir
        for c in subtree(ir, nid):
            gtype = ir.grammar_type_of(c)
            if gtype in ("gnu_asm_expression", "asm_statement"):
                return "inline asm"
            if gtype == "subscript_expression":
                base = _base(ir, c)
                if base not in arrays:
                    return f"a memory access through {text(ir, children(ir, c)[0])}"
            elif gtype == "pointer_expression" and ir.name_of(c) == "*":
                return f"a memory access through {text(ir, c)}"
            elif gtype == "field_expression" and ir.name_of(c) == "->":
                return f"a memory access through {text(ir, c)}"
            elif gtype == "call_expression":
                name = callee(ir, c)
                if name in seen:
                    continue
                if name in self.functions:
                    why = self._local(self.functions[name], set(), seen | {name})
                    if why is not None:
                        return f"a call of {name} ({why})"
                elif name in self.function_macros or _IMPURE_CALL.search(name):
                    return f"a call of {name}"
        return None

    # ---- how values vary across threads -----------------------------------------------------
    def threads(self, nid: int) -> int:
        """The size of the aligned groups of consecutive threads on which the expression `nid`
        is constant: `UNIFORM` (the whole block), a multiple of 32 (whole warps), ... 1.
        Parameters count as uniform; a variable counts with every value assigned to it."""
        return _granularity(self._value(nid, frozenset()))

    def _value(self, nid: int, busy: frozenset[str]) -> tuple:
        """An expression's value class: ("u",) uniform, ("id",) the thread index itself,
        ("mod", m) the thread index modulo m, ("g", g) constant on aligned groups of g."""
        ir = self.ir
        gtype = ir.grammar_type_of(nid)
        kids = [c for c in children(ir, nid) if ir.grammar_type_of(c) not in _TRIVIA]
        if gtype in ("number_literal", "true", "false", "char_literal", "string_literal",
                     "sizeof_expression", "nullptr", "type_descriptor"):
            return ("u",)
        if gtype == "field_expression" and ir.name_of(nid) == ".":
            base = text(ir, kids[0]).strip()
            if base == _THREAD_INDEX:
                return ("id",) if text(ir, kids[-1]).strip() == "x" else ("g", 1)
            if _BLOCK_INDEX.match(base):
                return ("u",)
        if gtype == "identifier":
            return self._name_value(ir.name_of(nid) or "", busy)
        if gtype == "binary_expression":
            left, right = self._value(kids[0], busy), self._value(kids[-1], busy)
            const = self.constant(kids[-1])
            op = ir.name_of(nid)
            if op in ("/", ">>") and const is not None and const > 0 and right == ("u",):
                return _divided(left, const if op == "/" else 1 << min(const, 62))
            if op in ("%", "&") and const is not None and const > 0 and right == ("u",):
                m = const if op == "%" else const + 1
                if op == "%" or m & (m - 1) == 0:
                    return _modulo(left, m)
            return _combine([left, right])
        if gtype == "call_expression":
            name = callee(ir, nid)
            args = children(ir, kids[-1]) if kids else []
            values = [self._value(a, busy) for a in args]
            if re.fullmatch(r"__shfl_sync", name) and len(values) >= 3 and values[2] == ("u",):
                return ("g", 32)  # a broadcast from one lane of the warp
            if name not in self.functions and _GROUP_THREAD_CALL.fullmatch(name):
                return ("g", 1)
            fn = self.functions.get(name)
            if fn is not None and self._reads_thread(fn, frozenset({name})):
                return ("g", 1)
            return _combine(values)
        if gtype in ("gnu_asm_expression", "asm_statement"):
            return ("g", 1)
        return _combine([self._value(c, busy) for c in kids])

    def _name_value(self, name: str, busy: frozenset[str]) -> tuple:
        if name in busy or name in self.params or name in self.macros or name not in self.decls:
            return ("g", 1) if name == _THREAD_INDEX else ("u",)
        busy = busy | {name}
        values = [self._value(init, busy) for _, init in self.decls[name] if init is not None]
        for w in self.writes.get(name, ()):
            gtype = self.ir.grammar_type_of(w)
            if gtype == "assignment_expression":
                values.append(self._value(children(self.ir, w)[-1], busy))
            elif gtype != "update_expression":  # asm outputs, writes through references
                values.append(("g", 1))
        return _combine(values)

    def _reads_thread(self, fn: int, seen: frozenset[str]) -> bool:
        ir = self.ir
        for c in subtree(ir, fn):
            gtype = ir.grammar_type_of(c)
            if gtype == "identifier" and ir.name_of(c) == _THREAD_INDEX:
                return True
            if gtype == "gnu_asm_expression" and _THREAD_ASM.search(text(ir, c)):
                return True
            if gtype == "call_expression":
                name = callee(ir, c)
                if name not in self.functions and _GROUP_THREAD_CALL.fullmatch(name):
                    return True
                if name in self.functions and name not in seen and \
                        self._reads_thread(self.functions[name], seen | {name}):
                    return True
        return False

    def constant(self, nid: int) -> int | None:
        """The integer value of a constant expression (literals and object-like macros), or
        None."""
        return _evaluate(text(self.ir, nid), self.macros, 0)


def _base(ir: KernelIR, nid: int) -> str | None:
    """The variable an lvalue expression names: `a[i][j]` -> `a`, `&x` -> `x`, `(x)` -> `x`."""
    while ir.grammar_type_of(nid) in ("subscript_expression", "pointer_expression",
                                      "parenthesized_expression", "field_expression"):
        kids = children(ir, nid)
        if not kids:
            return None
        nid = kids[0]
    return ir.name_of(nid) if ir.grammar_type_of(nid) == "identifier" else None


def _granularity(value: tuple) -> int:
    return {"u": UNIFORM, "id": 1, "mod": 1}.get(value[0], value[-1])


def _combine(values: list[tuple]) -> tuple:
    sizes = [_granularity(v) for v in values if v != ("u",)]
    return ("g", math.gcd(*sizes)) if sizes else ("u",)


def _divided(value: tuple, c: int) -> tuple:
    if value[0] == "id" or (value[0] == "mod" and value[1] % c == 0):
        return ("g", c)
    return value if value[0] in ("u", "g") else ("g", 1)


def _modulo(value: tuple, m: int) -> tuple:
    if value[0] == "id":
        return ("mod", m)
    if value[0] == "mod" and value[1] % m == 0:
        return ("mod", m)
    return value if value[0] in ("u", "g") else ("g", 1)


_CONST_TOKEN = re.compile(r"\s*(?:(0[xX][0-9a-fA-F]+|\d+)[uUlL]*|([A-Za-z_]\w*)"
                          r"|(<<|>>|[-+*/%()~&|^]))")
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.LShift: operator.lshift,
           ast.RShift: operator.rshift, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
           ast.BitXor: operator.xor}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}


def _evaluate(expr: str, macros: dict[str, str], depth: int) -> int | None:
    """An integer constant expression over literals and object-like macros, or None."""
    if depth > 8:
        return None
    out: list[str] = []
    pos = 0
    expr = code_view(expr).strip()
    while pos < len(expr):
        m = _CONST_TOKEN.match(expr, pos)
        if m is None:
            return None
        pos = m.end()
        if m.group(1):
            out.append(str(int(m.group(1), 0)))
        elif m.group(2):
            if m.group(2) not in macros:
                return None
            value = _evaluate(macros[m.group(2)], macros, depth + 1)
            if value is None:
                return None
            out.append(f"({value})")
        else:
            out.append("//" if m.group(3) == "/" else m.group(3))
    try:
        return _fold(ast.parse(" ".join(out), mode="eval").body)
    except (SyntaxError, ZeroDivisionError, ValueError):
        return None


def _fold(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _fold(node.left), _fold(node.right)
        if left is None or right is None:
            return None
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        value = _fold(node.operand)
        return None if value is None else _UNARY[type(node.op)](value)
    return None

