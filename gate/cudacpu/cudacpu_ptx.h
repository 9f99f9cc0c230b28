// cudacpu_ptx.h: the inline PTX the emulator runs (included by cudacpu.h).
//
// `gate.cudacpu.prepass` turns each `asm(...)` statement into `cudacpu::ptx::exec(template,
// operands)`; the template is parsed once (cached by its address) into instructions that run
// on the operands' values. Supported instructions are listed in `SUPPORTED` of
// gate/cudacpu/prepass.py (which refuses other asm before compiling when it can read the
// template) and implemented below by their PTX ISA definitions; any other instruction ends the
// launch with a message naming it.
#pragma once

namespace cudacpu {
namespace ptx {

struct Operand {
  char cls;       // constraint letter: r, l, h, f, d, n
  bool out;
  void* ptr;      // the output's storage
  int size;       // bytes of the C++ object
  uint64_t bits;  // the value (inputs, read-write outputs on entry, outputs on exit)
};
template <class T>
inline Operand in(char c, const T& v) {
  Operand o{c, false, nullptr, (int)sizeof(T), 0};
  if constexpr (std::is_pointer<T>::value) {
    o.bits = (uint64_t)(uintptr_t)v;
  } else if constexpr (std::is_array<T>::value) {
    o.bits = (uint64_t)(uintptr_t)&v[0];
  } else if constexpr (std::is_integral<T>::value && std::is_signed<T>::value) {
    o.bits = (uint64_t)(int64_t)v;  // sign-extended, as a wider register would hold it
  } else {
    std::memcpy(&o.bits, &v, sizeof(T) < 8 ? sizeof(T) : 8);
  }
  return o;
}
// A pointer by value: an address computed from a `__restrict__` pointer in a template has a
// type that a `const T&` will not bind to in g++.
template <class T>
inline Operand in(char c, T* v) {
  Operand o{c, false, nullptr, (int)sizeof(T*), 0};
  o.bits = (uint64_t)(uintptr_t)v;
  return o;
}
template <class T>
inline Operand out(char c, T& r, bool read) {
  static_assert(sizeof(T) <= 8, "an asm output operand holds at most 8 bytes");
  Operand o{c, true, (void*)&r, (int)sizeof(T), 0};
  if (read) std::memcpy(&o.bits, &r, sizeof(T));
  return o;
}

enum Kind { A_OP, A_LOCAL, A_IMM, A_SPECIAL, A_VEC, A_MEM, A_SINK };
struct Arg {
  int kind = A_IMM;
  int index = 0;
  int64_t imm = 0;
  std::vector<Arg> elems;  // vector elements; A_MEM: elems[0] is the base
};
enum Code { C_NOP, C_MMA, C_LDMATRIX, C_STMATRIX, C_CP_ASYNC, C_CP_COMMIT, C_CP_WAIT, C_CP_WAIT_ALL, C_CVT,
            C_CVTA, C_MOV, C_SETP, C_BAR, C_LD, C_ST, C_ALU, C_FUNARY, C_FMA, C_SELP, C_BRA, C_MBARRIER,
            C_BULK, C_BULK_NOP, C_TENSOR, C_WGMMA, C_CP_ARRIVE };
struct Instr {
  int code = C_NOP;
  std::string op;
  std::vector<std::string> mods;  // op split at '.'
  std::vector<Arg> args;
  int pred = -1;
  bool pred_neg = false;
  int d[4] = {0, 0, 0, 0};  // decoded once at parse time (per code: see decode())
  bool has(const char* m) const {
    for (const std::string& s : mods)
      if (s == m) return true;
    return false;
  }
};
struct Program {
  std::vector<Instr> code;
  int nlocals = 0;
  std::vector<bool> local_pred;
  std::unordered_map<std::string, int> labels;  // label -> index of the instruction it marks
  std::vector<std::string> label_names;         // branch targets, by Instr::d[0]
};

inline std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}
inline std::vector<std::string> split_top(const std::string& s, char sep) {
  std::vector<std::string> out;
  int depth = 0;
  std::string curr;
  for (char c : s) {
    if (c == '{' || c == '[') depth++;
    if (c == '}' || c == ']') depth--;
    if (c == sep && depth == 0) {
      out.push_back(trim(curr));
      curr.clear();
    } else {
      curr += c;
    }
  }
  if (!trim(curr).empty() || !out.empty()) out.push_back(trim(curr));
  return out;
}

struct Parser {
  Program& p;
  bool extended;
  std::unordered_map<std::string, int> names;
  const char* tmpl;

  [[noreturn]] void bad(const std::string& what) {
    fail("inline PTX is not emulated: %s (in \"%.120s\")", what.c_str(), tmpl);
  }
  Arg arg(const std::string& text) {
    std::string s = trim(text);
    Arg a;
    if (s.empty()) bad("an empty operand");
    if (s[0] == '{') {
      a.kind = A_VEC;
      for (const std::string& e : split_top(s.substr(1, s.size() - 2), ',')) a.elems.push_back(arg(e));
      return a;
    }
    if (s[0] == '[') {
      a.kind = A_MEM;
      std::string inner = trim(s.substr(1, s.size() - 2));
      std::vector<std::string> parts = split_top(inner, ',');
      if (parts.size() == 2) {  // a tensor operand: [tensor map, {coordinates}]
        a.elems.push_back(arg(parts[0]));
        a.elems.push_back(arg(parts[1]));
        return a;
      }
      size_t plus = inner.find_first_of("+-", 1);
      a.elems.push_back(arg(plus == std::string::npos ? inner : inner.substr(0, plus)));
      if (plus != std::string::npos) {
        a.imm = std::strtoll(trim(inner.substr(plus + 1)).c_str(), nullptr, 0);
        if (inner[plus] == '-') a.imm = -a.imm;
      }
      return a;
    }
    if (s[0] == '%') {
      if (extended && s.size() > 1 && s[1] >= '0' && s[1] <= '9') {
        a.kind = A_OP;
        a.index = std::atoi(s.c_str() + 1);
        return a;
      }
      std::string name = s.substr(extended && s.size() > 1 && s[1] == '%' ? 2 : 1);
      static const char* const specials[] = {"laneid", "warpid", "tid.x", "tid.y", "tid.z", "ntid.x", "ntid.y",
                                             "ntid.z", "ctaid.x", "ctaid.y", "ctaid.z", "nctaid.x", "nctaid.y",
                                             "nctaid.z", "lanemask_lt", "lanemask_le", "lanemask_eq",
                                             "lanemask_ge", "lanemask_gt", "nwarpid", "smid", "clock", "clock64"};
      for (int i = 0; i < (int)(sizeof(specials) / sizeof(specials[0])); ++i)
        if (name == specials[i]) {
          a.kind = A_SPECIAL;
          a.index = i;
          return a;
        }
      bad("special register %" + name);
    }
    if ((s[0] >= '0' && s[0] <= '9') || s[0] == '-') {
      a.kind = A_IMM;
      if (s.size() > 2 && s[0] == '0' && (s[1] == 'f' || s[1] == 'F'))
        a.imm = (int64_t)std::strtoull(s.c_str() + 2, nullptr, 16);
      else
        a.imm = std::strtoll(s.c_str(), nullptr, 0);
      return a;
    }
    if (s == "_") {
      a.kind = A_SINK;
      return a;
    }
    auto it = names.find(s);
    if (it == names.end()) bad("undeclared register " + s);
    a.kind = A_LOCAL;
    a.index = it->second;
    return a;
  }
  void declare(const std::string& decl) {
    // .reg .TYPE a, b<4>;
    std::string rest = trim(decl.substr(4));
    size_t sp = rest.find_first_of(" \t");
    if (sp == std::string::npos) bad("a register declaration without names");
    bool pred = rest.compare(0, 5, ".pred") == 0;
    for (const std::string& n : split_top(rest.substr(sp), ',')) {
      size_t lt = n.find('<');
      int count = lt == std::string::npos ? 0 : std::atoi(n.c_str() + lt + 1);
      std::string base = trim(lt == std::string::npos ? n : n.substr(0, lt));
      for (int i = 0; i < (count ? count : 1); ++i) {
        names[count ? base + std::to_string(i) : base] = p.nlocals++;
        p.local_pred.push_back(pred);
      }
    }
  }
  static int code_of(const Instr& in) {
    const std::string& h = in.mods[0];
    if (h == "mma") return C_MMA;
    if (h == "ldmatrix") return C_LDMATRIX;
    if (h == "stmatrix") return C_STMATRIX;
    if (h == "cp" && in.mods.size() > 2 && in.mods[1] == "async" && in.mods[2] == "bulk") {
      if (in.mods.size() > 3 && in.mods[3] == "tensor") return C_TENSOR;
      if (in.mods.size() > 3 && in.mods[3] == "reduce") return -1;
      if (in.mods.size() > 3 && (in.mods[3] == "commit_group" || in.mods[3] == "wait_group" ||
                                 in.mods[3] == "prefetch"))
        return C_BULK_NOP;
      return C_BULK;
    }
    if (h == "cp" && in.mods.size() > 1 && in.mods[1] == "async") {
      if (in.mods.size() > 2 && in.mods[2] == "commit_group") return C_CP_COMMIT;
      if (in.mods.size() > 2 && in.mods[2] == "wait_group") return C_CP_WAIT;
      if (in.mods.size() > 2 && in.mods[2] == "wait_all") return C_CP_WAIT_ALL;
      if (in.mods.size() > 2 && (in.mods[2] == "ca" || in.mods[2] == "cg")) return C_CP_ASYNC;
      if (in.mods.size() > 3 && in.mods[2] == "mbarrier" && in.mods[3] == "arrive") return C_CP_ARRIVE;
      return -1;
    }
    if (h == "cvt") return C_CVT;
    if (h == "cvta") return C_CVTA;
    if (h == "mov") return C_MOV;
    if (h == "setp") return C_SETP;
    if (h == "selp") return C_SELP;
    if (h == "bar" || h == "barrier")
      return in.has("sync") || in.has("arrive") || in.mods.size() == 1 ? C_BAR : -1;
    if (h == "membar" || h == "fence" || h == "prefetch" || h == "griddepcontrol") return C_NOP;
    if (h == "bra") return C_BRA;
    if (h == "setmaxnreg") return C_NOP;  // register budgets do not change what a kernel computes
    if (h == "wgmma") {
      if (in.mods.size() > 1 && in.mods[1] == "mma_async") return C_WGMMA;
      if (in.mods.size() > 1 && (in.mods[1] == "fence" || in.mods[1] == "commit_group" || in.mods[1] == "wait_group"))
        return C_NOP;  // wgmma runs when issued: its results are there before any wait
      return -1;
    }
    if (h == "mbarrier") return C_MBARRIER;
    if (h == "ld") return C_LD;
    if (h == "st") return C_ST;
    if (h == "add" || h == "sub" || h == "mul" || h == "and" || h == "or" || h == "xor" || h == "shl" ||
        h == "shr" || h == "min" || h == "max")
      return C_ALU;
    if (h == "fma" || h == "mad") return C_FMA;
    if (h == "ex2" || h == "rcp" || h == "rsqrt" || h == "sqrt" || h == "lg2" || h == "sin" || h == "cos" ||
        h == "tanh" || h == "neg" || h == "abs")
      return C_FUNARY;
    return -1;
  }
  void statement(std::string s) {
    s = trim(s);
    while (!s.empty() && (s[0] == '{' || s[0] == '}')) s = trim(s.substr(1));
    // a scope's closing brace, not the one closing a vector operand ({%0, %1, ...} last)
    while (!s.empty() && s.back() == '}' &&
           std::count(s.begin(), s.end(), '}') > std::count(s.begin(), s.end(), '{'))
      s = trim(s.substr(0, s.size() - 1));
    if (s.empty()) return;
    if (s.compare(0, 4, ".reg") == 0) {
      declare(s);
      return;
    }
    // labels (`NAME:`) mark the next instruction; a statement may start with several
    for (;;) {
      size_t colon = s.find(':');
      size_t word = 0;
      while (word < s.size() && (std::isalnum((unsigned char)s[word]) || s[word] == '_' || s[word] == '$')) ++word;
      if (colon == std::string::npos || word == 0 || trim(s.substr(word, colon - word)) != "" ||
          (colon + 1 < s.size() && s[colon + 1] == ':'))
        break;
      p.labels[s.substr(0, word)] = (int)p.code.size();
      s = trim(s.substr(colon + 1));
      if (s.empty()) return;
    }
    Instr in;
    if (s[0] == '@') {
      size_t sp = s.find_first_of(" \t");
      std::string pr = s.substr(1, sp - 1);
      if (!pr.empty() && pr[0] == '!') {
        in.pred_neg = true;
        pr = pr.substr(1);
      }
      Arg a = arg(pr);
      if (a.kind != A_LOCAL) bad("a predicate that is not a declared register");
      in.pred = a.index;
      s = trim(s.substr(sp));
    }
    size_t sp = s.find_first_of(" \t\r\n");
    in.op = s.substr(0, sp);
    size_t start = 0;
    while (start <= in.op.size()) {
      size_t dot = in.op.find('.', start);
      if (dot == std::string::npos) dot = in.op.size();
      in.mods.push_back(in.op.substr(start, dot - start));
      start = dot + 1;
    }
    in.code = code_of(in);
    if (in.code < 0) bad("instruction " + in.op);
    if (in.code == C_BRA) {  // the operand is a label, not a register
      if (sp == std::string::npos) bad("a branch without its label");
      in.d[0] = (int)p.label_names.size();
      p.label_names.push_back(trim(s.substr(sp)));
      p.code.push_back(std::move(in));
      return;
    }
    if (sp != std::string::npos)
      for (const std::string& a : split_top(s.substr(sp), ',')) in.args.push_back(arg(a));
    decode(in);
    p.code.push_back(std::move(in));
  }
  void decode(Instr& in);
  void run(const char* t) {
    tmpl = t;
    std::string text(t);
    size_t start = 0;
    for (;;) {
      size_t semi = text.find(';', start);
      statement(text.substr(start, semi == std::string::npos ? std::string::npos : semi - start));
      if (semi == std::string::npos) break;
      start = semi + 1;
    }
  }
};

struct Frame {
  Operand* ops;
  int nops;
  uint64_t* locals;
  const char* tmpl;
};

inline uint64_t special(int i) {
  Thread* t = cur;
  switch (i) {
    case 0: return t->lane;
    case 1: return t->warp;
    case 2: return t->tid.x;
    case 3: return t->tid.y;
    case 4: return t->tid.z;
    case 5: return L->block.x;
    case 6: return L->block.y;
    case 7: return L->block.z;
    case 8: return L->block_idx.x;
    case 9: return L->block_idx.y;
    case 10: return L->block_idx.z;
    case 11: return L->grid.x;
    case 12: return L->grid.y;
    case 13: return L->grid.z;
    case 14: return (1u << t->lane) - 1u;
    case 15: return (2ull << t->lane) - 1u;
    case 16: return 1u << t->lane;
    case 17: return ~((1u << t->lane) - 1u);
    case 18: return ~(uint32_t)((2ull << t->lane) - 1u);
    case 19: return (L->nthreads + 31) / 32;
    case 20: return 0;
    default: return (uint64_t)clock64();
  }
}
inline uint64_t get(Frame& f, const Arg& a) {
  switch (a.kind) {
    case A_OP:
      if (a.index >= f.nops) fail("inline PTX operand %%%d does not exist (in \"%.80s\")", a.index, f.tmpl);
      return f.ops[a.index].bits;
    case A_LOCAL: return f.locals[a.index];
    case A_SPECIAL: return special(a.index);
    case A_IMM: return (uint64_t)a.imm;
    default: fail("inline PTX: a vector or memory operand where a value is read (in \"%.80s\")", f.tmpl);
  }
}
inline void set(Frame& f, const Arg& a, uint64_t v) {
  if (a.kind == A_OP) {
    if (a.index >= f.nops) fail("inline PTX operand %%%d does not exist (in \"%.80s\")", a.index, f.tmpl);
    f.ops[a.index].bits = v;
  } else if (a.kind == A_LOCAL) {
    f.locals[a.index] = v;
  } else if (a.kind != A_SINK) {
    fail("inline PTX writes to an operand that is not a register (in \"%.80s\")", f.tmpl);
  }
}
inline float getf(Frame& f, const Arg& a) { return u2f((uint32_t)get(f, a)); }
inline void setf(Frame& f, const Arg& a, float v) { set(f, a, f2u(v)); }
inline std::vector<const Arg*> elems(const Arg& a) {
  std::vector<const Arg*> r;
  if (a.kind == A_VEC)
    for (const Arg& e : a.elems) r.push_back(&e);
  else
    r.push_back(&a);
  return r;
}
// The address a memory operand names: a shared-window offset under .shared, else a pointer.
inline unsigned char* address(Frame& f, const Instr& in, const Arg& a, bool shared) {
  if (a.kind != A_MEM) fail("inline PTX: expected a memory operand in %s", in.op.c_str());
  uint64_t base = get(f, a.elems[0]) + (uint64_t)a.imm;
  if (shared) {
    if (base >= sizeof(shared_window)) fail("%s: shared address 0x%llx outside shared memory", in.op.c_str(), (unsigned long long)base);
    return shared_base() + base;
  }
  return (unsigned char*)(uintptr_t)base;
}
inline bool has_prefix(const Instr& in, const char* prefix) {
  for (const std::string& m : in.mods)
    if (m.compare(0, std::strlen(prefix), prefix) == 0) return true;
  return false;
}
inline bool shared_space(const Instr& in) { return has_prefix(in, "shared"); }

// ---- mma.sync ----
enum { T_F16, T_BF16, T_F32 };
struct MmaIn {
  int k, atype, ctype, dtype;
  uint32_t a[4], b[2], c[4];
};
struct MmaOut { uint32_t d[4]; };
inline float elem16(uint32_t reg, int half, int type) {
  unsigned short h = (unsigned short)(reg >> (16 * half));
  return type == T_BF16 ? bf16_to_float(h) : half_to_float(h);
}
inline void mma_resolve(Thread** lanes, unsigned) {
  const MmaIn& p = *(const MmaIn*)lanes[0]->in;
  float A[16][16], B[16][8], C[16][8];
  for (int l = 0; l < 32; ++l) {
    const MmaIn& q = *(const MmaIn*)lanes[l]->in;
    int g = l >> 2, t = l & 3;
    int nregs = p.k / 4;
    for (int i = 0; i < 2 * nregs; ++i) {
      int row = g + 8 * ((i >> 1) & 1), col = t * 2 + (i & 1) + 8 * (i >> 2);
      A[row][col] = elem16(q.a[i >> 1], i & 1, p.atype);
    }
    for (int i = 0; i < p.k / 4; ++i) {
      int krow = t * 2 + (i & 1) + 8 * (i >> 1);
      B[krow][g] = elem16(q.b[i >> 1], i & 1, p.atype);
    }
    for (int i = 0; i < 4; ++i) {
      int row = g + 8 * (i >> 1), col = t * 2 + (i & 1);
      C[row][col] = p.ctype == T_F32 ? u2f(q.c[i]) : elem16(q.c[i >> 1], i & 1, T_F16);
    }
  }
  for (int l = 0; l < 32; ++l) {
    MmaOut& o = *(MmaOut*)lanes[l]->out;
    int g = l >> 2, t = l & 3;
    float d[4];
    for (int i = 0; i < 4; ++i) {
      int row = g + 8 * (i >> 1), col = t * 2 + (i & 1);
      float acc = C[row][col];
      for (int kk = 0; kk < p.k; ++kk) acc += A[row][kk] * B[kk][col];
      d[i] = acc;
    }
    if (p.dtype == T_F32) {
      for (int i = 0; i < 4; ++i) o.d[i] = f2u(d[i]);
    } else {
      o.d[0] = float_to_half(d[0]) | ((uint32_t)float_to_half(d[1]) << 16);
      o.d[1] = float_to_half(d[2]) | ((uint32_t)float_to_half(d[3]) << 16);
    }
  }
  (void)p;
}
inline int type_of(const std::string& s) {
  if (s == "f16") return T_F16;
  if (s == "bf16") return T_BF16;
  if (s == "f32") return T_F32;
  return -1;
}
inline void decode_mma(Instr& in) {
  // mma.sync.aligned.m16n8k{8,16}.row.col.dtype.atype.btype.ctype d, a, b, c
  const std::vector<std::string>& m = in.mods;
  if (m.size() != 10 || m[1] != "sync" || m[2] != "aligned" || m[4] != "row" || m[5] != "col" ||
      (m[3] != "m16n8k16" && m[3] != "m16n8k8"))
    fail("inline PTX is not emulated: %s (mma.sync.aligned.m16n8k16/m16n8k8.row.col only)", in.op.c_str());
  int k = m[3] == "m16n8k16" ? 16 : 8, dtype = type_of(m[6]), atype = type_of(m[7]), ctype = type_of(m[9]);
  if (atype == T_F32 || atype < 0 || type_of(m[8]) != atype || dtype < 0 || ctype < 0 || ctype == T_BF16 ||
      dtype == T_BF16 || ((dtype == T_F16 || ctype == T_F16) && atype != T_F16))
    fail("inline PTX is not emulated: %s (f16 or bf16 inputs, f32 or f16 accumulators)", in.op.c_str());
  if (in.args.size() != 4) fail("%s: expected 4 operands", in.op.c_str());
  size_t na = k / 4, nb = k / 8, nc = ctype == T_F32 ? 4 : 2, nd = dtype == T_F32 ? 4 : 2;
  if (elems(in.args[1]).size() != na || elems(in.args[2]).size() != nb || elems(in.args[3]).size() != nc ||
      elems(in.args[0]).size() != nd)
    fail("%s: operand vectors of the wrong length", in.op.c_str());
  in.d[0] = k;
  in.d[1] = atype;
  in.d[2] = ctype;
  in.d[3] = dtype;
}
inline void do_mma(Frame& f, const Instr& in) {
  MmaIn p{};
  p.k = in.d[0];
  p.atype = in.d[1];
  p.ctype = in.d[2];
  p.dtype = in.d[3];
  const Arg& d = in.args[0];
  const Arg& a = in.args[1];
  const Arg& b = in.args[2];
  const Arg& c = in.args[3];
  for (size_t i = 0; i < a.elems.size(); ++i) p.a[i] = (uint32_t)get(f, a.elems[i]);
  for (size_t i = 0; i < b.elems.size(); ++i) p.b[i] = (uint32_t)get(f, b.elems[i]);
  if (b.kind != A_VEC) p.b[0] = (uint32_t)get(f, b);
  for (size_t i = 0; i < c.elems.size(); ++i) p.c[i] = (uint32_t)get(f, c.elems[i]);
  MmaOut o{};
  warp_collective(OP_CUSTOM, 0xffffffffu, 0, 0, 32, mma_resolve, &p, &o);
  for (size_t i = 0; i < d.elems.size(); ++i) set(f, d.elems[i], o.d[i]);
}

// ---- ldmatrix / stmatrix (m8n8, 16-bit elements) ----
struct MatIn {
  unsigned char* row;  // this lane's row address (lanes 8i..8i+7 give matrix i's rows)
  int num;
  bool trans;
  uint32_t r[4];  // stmatrix: this lane's fragments
};
struct MatOut { uint32_t r[4]; };
inline unsigned short* mat_elem(Thread** lanes, int matrix, int row, int col) {
  return (unsigned short*)((const MatIn*)lanes[matrix * 8 + row]->in)->row + col;
}
inline void ldmatrix_resolve(Thread** lanes, unsigned) {
  const MatIn& p = *(const MatIn*)lanes[0]->in;
  for (int l = 0; l < 32; ++l) {
    MatOut& o = *(MatOut*)lanes[l]->out;
    for (int i = 0; i < p.num; ++i) {
      uint32_t lo, hi;
      if (p.trans) {
        lo = *mat_elem(lanes, i, 2 * (l & 3), l >> 2);
        hi = *mat_elem(lanes, i, 2 * (l & 3) + 1, l >> 2);
      } else {
        lo = *mat_elem(lanes, i, l >> 2, 2 * (l & 3));
        hi = *mat_elem(lanes, i, l >> 2, 2 * (l & 3) + 1);
      }
      o.r[i] = lo | (hi << 16);
    }
  }
}
inline void stmatrix_resolve(Thread** lanes, unsigned) {
  const MatIn& p = *(const MatIn*)lanes[0]->in;
  for (int l = 0; l < 32; ++l) {
    const MatIn& q = *(const MatIn*)lanes[l]->in;
    for (int i = 0; i < p.num; ++i) {
      unsigned short lo = (unsigned short)q.r[i], hi = (unsigned short)(q.r[i] >> 16);
      if (p.trans) {
        *mat_elem(lanes, i, 2 * (l & 3), l >> 2) = lo;
        *mat_elem(lanes, i, 2 * (l & 3) + 1, l >> 2) = hi;
      } else {
        *mat_elem(lanes, i, l >> 2, 2 * (l & 3)) = lo;
        *mat_elem(lanes, i, l >> 2, 2 * (l & 3) + 1) = hi;
      }
    }
  }
}
inline void decode_matrix(Instr& in, bool load) {
  int num = in.has("x4") ? 4 : in.has("x2") ? 2 : in.has("x1") ? 1 : 0;
  if (num == 0 || !in.has("m8n8") || !(in.has("b16")) || in.args.size() != 2)
    fail("inline PTX is not emulated: %s (m8n8 .x1/.x2/.x4 .b16 only)", in.op.c_str());
  if ((int)elems(in.args[load ? 0 : 1]).size() != num) fail("%s: expected %d registers", in.op.c_str(), num);
  in.d[0] = num;
  in.d[1] = in.has("trans");
}
inline void do_matrix(Frame& f, const Instr& in, bool load) {
  MatIn p{};
  p.num = in.d[0];
  p.trans = in.d[1] != 0;
  const Arg& mem = in.args[load ? 1 : 0];
  std::vector<const Arg*> regs = elems(in.args[load ? 0 : 1]);
  p.row = address(f, in, mem, true);
  MatOut o{};
  if (load) {
    warp_collective(OP_CUSTOM, 0xffffffffu, 0, 0, 32, ldmatrix_resolve, &p, &o);
    for (int i = 0; i < p.num; ++i) set(f, *regs[i], o.r[i]);
  } else {
    for (int i = 0; i < p.num; ++i) p.r[i] = (uint32_t)get(f, *regs[i]);
    warp_collective(OP_CUSTOM, 0xffffffffu, 0, 0, 32, stmatrix_resolve, &p, &o);
  }
}

// ---- cp.async ----
inline void do_cp_async(Frame& f, const Program& prog, const Instr& in) {
  // cp.async.{ca,cg}.shared{::cta}.global{.L2::..} [dst], [src], cp-size{, src-size | ignore-src}{, policy}
  size_t n = in.args.size();
  bool hint = in.d[0] != 0;
  unsigned char* dst = address(f, in, in.args[0], true);
  unsigned char* src = address(f, in, in.args[1], false);
  unsigned bytes = (unsigned)get(f, in.args[2]);
  unsigned src_bytes = bytes;
  if (n >= 4 && !(hint && n == 4)) {
    const Arg& extra = in.args[3];
    if (extra.kind == A_LOCAL && prog.local_pred[extra.index])
      src_bytes = get(f, extra) ? 0 : bytes;  // ignore-src
    else
      src_bytes = (unsigned)get(f, extra);
  }
  if (bytes != 4 && bytes != 8 && bytes != 16) fail("%s: copy size %u (4, 8 or 16)", in.op.c_str(), bytes);
  if (src_bytes > bytes) fail("%s: source size %u above the copy size %u", in.op.c_str(), src_bytes, bytes);
  if (((uintptr_t)dst | (uintptr_t)(src_bytes ? (uintptr_t)src : 0)) % bytes != 0)
    fail("%s: misaligned address (a %u-byte copy)", in.op.c_str(), bytes);
  cp_async(dst, src, bytes, src_bytes);
}

// ---- cvt / mov / setp / ld / st / arithmetic ----
inline void do_cvt(Frame& f, const Instr& in) {
  const std::vector<std::string>& m = in.mods;
  std::string to, from;
  for (size_t i = 1; i < m.size(); ++i) {
    if (m[i] == "rn" || m[i] == "rz" || m[i] == "satfinite" || m[i] == "ftz" || m[i] == "relu") continue;
    (to.empty() ? to : from) = m[i];
  }
  if (in.args.size() == 3 && (to == "bf16x2" || to == "f16x2") && from == "f32") {
    float hi = getf(f, in.args[1]), lo = getf(f, in.args[2]);
    uint32_t h = to == "bf16x2" ? float_to_bf16(hi) : float_to_half(hi);
    uint32_t l = to == "bf16x2" ? float_to_bf16(lo) : float_to_half(lo);
    set(f, in.args[0], l | (h << 16));
  } else if (in.args.size() == 2 && (to == "bf16" || to == "f16") && from == "f32") {
    float v = getf(f, in.args[1]);
    set(f, in.args[0], to == "bf16" ? float_to_bf16(v) : float_to_half(v));
  } else if (in.args.size() == 2 && to == "f32" && (from == "bf16" || from == "f16")) {
    unsigned short v = (unsigned short)get(f, in.args[1]);
    setf(f, in.args[0], from == "bf16" ? bf16_to_float(v) : half_to_float(v));
  } else {
    fail("inline PTX is not emulated: %s (cvt between f32 and f16/bf16/f16x2/bf16x2 only)", in.op.c_str());
  }
}
inline int type_bits(const Instr& in) {
  for (size_t i = in.mods.size(); i-- > 1;) {
    const std::string& t = in.mods[i];
    if (t.size() >= 2 && (t[0] == 'b' || t[0] == 'u' || t[0] == 's' || t[0] == 'f') && std::isdigit((unsigned char)t[1]))
      return std::atoi(t.c_str() + 1);
  }
  return 32;
}
inline bool type_signed(const Instr& in) {
  for (const std::string& t : in.mods)
    if (t.size() >= 2 && t[0] == 's' && std::isdigit((unsigned char)t[1])) return true;
  return false;
}
inline bool type_float(const Instr& in) {
  for (const std::string& t : in.mods)
    if (t.size() >= 2 && t[0] == 'f' && std::isdigit((unsigned char)t[1])) return true;
  return false;
}
inline void do_mov(Frame& f, const Instr& in) {
  if (in.args.size() != 2) fail("%s: expected 2 operands", in.op.c_str());
  int bits = type_bits(in);
  const Arg& d = in.args[0];
  const Arg& s = in.args[1];
  if (s.kind == A_VEC) {  // pack
    int w = bits / (int)s.elems.size();
    uint64_t v = 0;
    for (size_t i = 0; i < s.elems.size(); ++i) v |= (get(f, s.elems[i]) & ((w == 64 ? 0 : (1ull << w)) - 1)) << (w * i);
    set(f, d, v);
  } else if (d.kind == A_VEC) {  // unpack
    int w = bits / (int)d.elems.size();
    uint64_t v = get(f, s);
    for (size_t i = 0; i < d.elems.size(); ++i) set(f, d.elems[i], (v >> (w * i)) & ((w == 64 ? 0 : (1ull << w)) - 1));
  } else {
    set(f, d, get(f, s));
  }
}
inline bool compare(const Instr& in, uint64_t a, uint64_t b) {
  const std::string& c = in.mods.size() > 1 ? in.mods[1] : std::string();
  int bits = type_bits(in);
  if (type_float(in)) {
    double x = bits == 64 ? __longlong_as_double((long long)a) : u2f((uint32_t)a);
    double y = bits == 64 ? __longlong_as_double((long long)b) : u2f((uint32_t)b);
    if (c == "eq") return x == y;
    if (c == "ne") return x != y;
    if (c == "lt") return x < y;
    if (c == "le") return x <= y;
    if (c == "gt") return x > y;
    if (c == "ge") return x >= y;
  } else if (type_signed(in)) {
    int64_t x = bits == 64 ? (int64_t)a : (int64_t)(int32_t)a, y = bits == 64 ? (int64_t)b : (int64_t)(int32_t)b;
    if (c == "eq") return x == y;
    if (c == "ne") return x != y;
    if (c == "lt") return x < y;
    if (c == "le") return x <= y;
    if (c == "gt") return x > y;
    if (c == "ge") return x >= y;
  } else {
    uint64_t x = bits == 64 ? a : (uint32_t)a, y = bits == 64 ? b : (uint32_t)b;
    if (c == "eq") return x == y;
    if (c == "ne") return x != y;
    if (c == "lt" || c == "lo") return x < y;
    if (c == "le" || c == "ls") return x <= y;
    if (c == "gt" || c == "hi") return x > y;
    if (c == "ge" || c == "hs") return x >= y;
  }
  fail("inline PTX is not emulated: %s", in.op.c_str());
}
inline void decode_ldst(Instr& in) {
  if (in.args.size() != 2) fail("%s: expected 2 operands", in.op.c_str());
  if (in.has("param") || in.has("local") || in.has("const")) fail("inline PTX is not emulated: %s", in.op.c_str());
  in.d[0] = type_bits(in);
  in.d[1] = in.has("v4") ? 4 : in.has("v2") ? 2 : 1;
  in.d[2] = shared_space(in);
  in.d[3] = type_signed(in);
}
inline void do_ldst(Frame& f, const Instr& in, bool load) {
  int bits = in.d[0], vec = in.d[1];
  bool is_signed = in.d[3] != 0;
  unsigned char* p = address(f, in, in.args[load ? 1 : 0], in.d[2] != 0);
  std::vector<const Arg*> regs = elems(in.args[load ? 0 : 1]);
  if ((int)regs.size() != vec) fail("%s: expected %d registers", in.op.c_str(), vec);
  int bytes = bits / 8;
  if ((uintptr_t)p % (uintptr_t)(bytes * vec) != 0) fail("%s: misaligned address", in.op.c_str());
  for (int i = 0; i < vec; ++i) {
    if (load) {
      uint64_t v = 0;
      std::memcpy(&v, p + i * bytes, bytes);
      if (is_signed && bits < 64 && (v >> (bits - 1)) & 1) v |= ~0ull << bits;
      set(f, *regs[i], v);
    } else {
      uint64_t v = get(f, *regs[i]);
      std::memcpy(p + i * bytes, &v, bytes);
    }
  }
}
inline void do_alu(Frame& f, const Instr& in) {
  if (in.args.size() != 3) fail("%s: expected 3 operands", in.op.c_str());
  const std::string& h = in.mods[0];
  int bits = type_bits(in);
  uint64_t a = get(f, in.args[1]), b = get(f, in.args[2]), r = 0;
  if (type_float(in) && bits == 32) {
    float x = u2f((uint32_t)a), y = u2f((uint32_t)b), z;
    if (h == "add") z = x + y;
    else if (h == "sub") z = x - y;
    else if (h == "mul") z = x * y;
    else if (h == "min") z = fminf(x, y);
    else if (h == "max") z = fmaxf(x, y);
    else fail("inline PTX is not emulated: %s", in.op.c_str());
    setf(f, in.args[0], z);
    return;
  }
  if (h == "add") r = a + b;
  else if (h == "sub") r = a - b;
  else if (h == "mul") {
    if (in.has("wide")) r = type_signed(in) ? (uint64_t)((int64_t)(int32_t)a * (int64_t)(int32_t)b) : (uint64_t)(uint32_t)a * (uint32_t)b;
    else if (in.has("hi")) r = bits == 64 ? __umul64hi(a, b) : ((uint64_t)(uint32_t)a * (uint32_t)b) >> 32;
    else r = a * b;
  }
  else if (h == "and") r = a & b;
  else if (h == "or") r = a | b;
  else if (h == "xor") r = a ^ b;
  else if (h == "shl") r = b >= (uint64_t)bits ? 0 : a << b;
  else if (h == "shr") {
    if (type_signed(in)) r = bits == 64 ? (uint64_t)((int64_t)a >> (b > 63 ? 63 : b)) : (uint64_t)(uint32_t)((int32_t)a >> (b > 31 ? 31 : b));
    else r = b >= (uint64_t)bits ? 0 : (bits == 64 ? a : (uint32_t)a) >> b;
  }
  else if (h == "min") r = type_signed(in) ? (uint64_t)std::min((int64_t)(int32_t)a, (int64_t)(int32_t)b) : std::min(a, b);
  else if (h == "max") r = type_signed(in) ? (uint64_t)std::max((int64_t)(int32_t)a, (int64_t)(int32_t)b) : std::max(a, b);
  if (bits == 32 && !in.has("wide")) r &= 0xffffffffull;
  set(f, in.args[0], r);
}
inline void do_funary(Frame& f, const Instr& in) {
  if (!type_float(in) || type_bits(in) != 32 || in.args.size() != 2)
    fail("inline PTX is not emulated: %s (f32 only)", in.op.c_str());
  const std::string& h = in.mods[0];
  float x = getf(f, in.args[1]), r;
  if (h == "ex2") r = exp2f(x);
  else if (h == "rcp") r = 1.0f / x;
  else if (h == "rsqrt") r = 1.0f / sqrtf(x);
  else if (h == "sqrt") r = sqrtf(x);
  else if (h == "lg2") r = log2f(x);
  else if (h == "sin") r = sinf(x);
  else if (h == "cos") r = cosf(x);
  else if (h == "tanh") r = tanhf(x);
  else if (h == "neg") r = -x;
  else r = fabsf(x);
  setf(f, in.args[0], r);
}

// ---- mbarrier and 1-D bulk copies (cp.async.bulk, not .tensor) ----
// An mbarrier is kept beside shared memory, by its shared address: expected and pending
// arrivals, the transaction bytes still to come, and the phase. A bulk copy lands when it is
// issued and completes its bytes on its barrier at once (a legal schedule of the hardware's).
struct Mbarrier {
  unsigned long block = 0;  // the block that initialized it (`block_seq`)
  unsigned expected = 0, pending = 0;
  long long tx = 0;
  unsigned phase = 0;
};
inline std::unordered_map<uint64_t, Mbarrier>& mbarriers() {
  static std::unordered_map<uint64_t, Mbarrier> table;
  return table;
}
inline Mbarrier& mbarrier_at(const Instr& in, uint64_t addr) {
  auto it = mbarriers().find(addr);
  if (it == mbarriers().end() || it->second.block != block_seq)
    fail("%s on an mbarrier this block never initialized", in.op.c_str());
  return it->second;
}
inline void mbarrier_progress(Mbarrier& b) {
  if (b.pending == 0 && b.tx <= 0) {
    b.phase ^= 1u;
    b.pending = b.expected;
    b.tx = 0;
  }
}
inline uint64_t bar_address(Frame& f, const Instr& in, const Arg& a) {
  if (a.kind != A_MEM) fail("%s: expected [mbarrier]", in.op.c_str());
  return get(f, a.elems[0]) + (uint64_t)a.imm;
}
inline bool do_mbarrier(Frame& f, const Instr& in) {
  // returns false when a try_wait / test_wait finds the phase not yet complete
  const std::string& what = in.mods.size() > 1 ? in.mods[1] : std::string();
  if (what != "try_wait" && what != "test_wait") ++progress;
  if (what == "init") {
    Mbarrier b;
    b.block = block_seq;
    b.expected = b.pending = (unsigned)get(f, in.args.at(1));
    mbarriers()[bar_address(f, in, in.args.at(0))] = b;
  } else if (what == "inval") {
    mbarriers().erase(bar_address(f, in, in.args.at(0)));
  } else if (what == "expect_tx" || what == "complete_tx") {
    Mbarrier& b = mbarrier_at(in, bar_address(f, in, in.args.at(0)));
    long long bytes = (long long)get(f, in.args.at(1));
    b.tx += what == "expect_tx" ? bytes : -bytes;
    if (what == "complete_tx") mbarrier_progress(b);
  } else if (what == "arrive") {
    // mbarrier.arrive{.expect_tx}{.release.cta}.shared{::cta}.b64 state|_, [bar]{, count|tx}
    bool expect = in.has("expect_tx");
    const Arg& bar = in.args.size() > 1 && in.args[1].kind == A_MEM ? in.args[1] : in.args.at(0);
    bool has_state = in.args.size() > 1 && in.args[1].kind == A_MEM;
    Mbarrier& b = mbarrier_at(in, bar_address(f, in, bar));
    size_t extra = has_state ? 2 : 1;
    unsigned count = 1;
    if (expect) b.tx += (long long)get(f, in.args.at(extra));
    else if (in.args.size() > extra) count = (unsigned)get(f, in.args[extra]);
    if (has_state) set(f, in.args[0], b.phase);
    if (count > b.pending) fail("%s: more arrivals than the mbarrier expects", in.op.c_str());
    b.pending -= count;
    mbarrier_progress(b);
  } else if (what == "try_wait" || what == "test_wait") {
    // mbarrier.try_wait{.parity}.shared{::cta}.b64 p, [bar], state|parity
    Mbarrier& b = mbarrier_at(in, bar_address(f, in, in.args.at(1)));
    unsigned want = (unsigned)get(f, in.args.at(2)) & 1u;
    bool done = b.phase != want;  // the phase of parity `want` (or token) has completed
    set(f, in.args[0], done);
    if (done) ++progress;
    else lockstep(true);  // a wait loop around it: let the other threads run first
    return done;
  } else {
    fail("inline PTX is not emulated: %s", in.op.c_str());
  }
  return true;
}
// cp.async.mbarrier.arrive{.noinc}.shared{::cta}.b64 [bar]: the thread's earlier cp.async copies
// complete now (a legal schedule: they may land any time before the arrive-on), then the arrive-on
// counts against the barrier's expected arrivals (.noinc) or is balanced by its own increment
inline void do_cp_arrive(Frame& f, const Instr& in) {
  ++progress;
  Mbarrier& b = mbarrier_at(in, bar_address(f, in, in.args.at(0)));
  cp_wait_all();
  if (!in.has("noinc")) return;
  if (b.pending == 0) fail("%s: more arrivals than the mbarrier expects", in.op.c_str());
  b.pending -= 1;
  mbarrier_progress(b);
}
inline void do_bulk(Frame& f, const Instr& in) {
  ++progress;
  // cp.async.bulk.shared::{cluster,cta}.global.mbarrier::complete_tx::bytes [dst], [src], size, [bar]
  // cp.async.bulk.global.shared::cta.bulk_group [dst], [src], size
  bool to_shared = in.mods.size() > 3 && in.mods[3].compare(0, 6, "shared") == 0;
  if (in.args.size() < 3 || has_prefix(in, "multicast")) fail("inline PTX is not emulated: %s", in.op.c_str());
  unsigned char* dst = address(f, in, in.args[0], to_shared);
  unsigned char* src = address(f, in, in.args[1], !to_shared);
  unsigned bytes = (unsigned)get(f, in.args[2]);
  if (bytes % 16 != 0 || (uintptr_t)dst % 16 != 0 || (uintptr_t)src % 16 != 0)
    fail("%s: sizes and addresses must be multiples of 16 bytes", in.op.c_str());
  std::memcpy(dst, src, bytes);
  if (to_shared) {
    if (in.args.size() < 4) fail("%s: expected its mbarrier", in.op.c_str());
    Mbarrier& b = mbarrier_at(in, bar_address(f, in, in.args[3]));
    b.tx -= bytes;
    mbarrier_progress(b);
  }
}

// ---- TMA tensor copies (tile mode) ----
// The tensor map a host encodes through cuTensorMapEncodeTiled (answered by gate.cudacpu.host):
// 16 u64 words: magic, global address, rank | element size << 8 | swizzle << 16, global
// dimensions [3..7], global strides in bytes of dimensions 1.. [8..11], box dimensions
// (16 bits each) [12..13].
constexpr uint64_t TENSOR_MAP_MAGIC = 0x3150434144554343ull;  // "CUDACPU1"
struct TensorMap {
  const uint64_t* w;
  unsigned rank() const { return (unsigned)(w[2] & 0xff); }
  unsigned esize() const { return (unsigned)((w[2] >> 8) & 0xff); }
  unsigned swizzle() const { return (unsigned)((w[2] >> 16) & 0xff); }  // 0 none, 1 32 B, 2 64 B, 3 128 B
  uint64_t dim(unsigned i) const { return w[3 + i]; }
  uint64_t stride(unsigned i) const { return i == 0 ? esize() : w[8 + i - 1]; }
  unsigned box(unsigned i) const { return (unsigned)((w[12 + i / 4] >> (16 * (i % 4))) & 0xffff); }
};
// The shared address a swizzle mode puts a 16-byte chunk at (the GPU's address-bit XOR).
inline uint32_t swizzled(uint32_t addr, unsigned bits) {
  return bits == 0 ? addr : addr ^ (((addr >> 7) & ((1u << bits) - 1u)) << 4);
}
inline unsigned swizzle_bits(unsigned mode) { return mode == 3 ? 3u : mode == 2 ? 2u : mode == 1 ? 1u : 0u; }
inline void do_tensor(Frame& f, const Instr& in) {
  ++progress;
  // load: cp.async.bulk.tensor.Nd.shared::cluster.global{.tile}.mbarrier::complete_tx::bytes
  //       [dst], [map, {c0, ...}], [mbar]
  // store: cp.async.bulk.tensor.Nd.global.shared::cta{.tile}.bulk_group [map, {c0, ...}], [src]
  bool load = in.mods.size() > 5 && in.mods[5].compare(0, 6, "shared") == 0;
  if (has_prefix(in, "im2col") || has_prefix(in, "multicast") || has_prefix(in, "gather") ||
      has_prefix(in, "scatter"))
    fail("inline PTX is not emulated: %s (tile mode only)", in.op.c_str());
  const Arg& tensor = in.args.at(load ? 1 : 0);
  const Arg& smem = in.args.at(load ? 0 : 1);
  if (tensor.kind != A_MEM || tensor.elems.size() != 2) fail("%s: expected [map, {coordinates}]", in.op.c_str());
  TensorMap map{(const uint64_t*)(uintptr_t)get(f, tensor.elems[0])};
  if (map.w[0] != TENSOR_MAP_MAGIC) fail("%s: the tensor map was not encoded by the emulated driver", in.op.c_str());
  std::vector<const Arg*> coords = elems(tensor.elems[1]);
  unsigned rank = map.rank();
  if (coords.size() != rank) fail("%s: %zu coordinates for a rank-%u tensor map", in.op.c_str(), coords.size(), rank);
  int64_t c[5] = {0, 0, 0, 0, 0};
  for (unsigned i = 0; i < rank; ++i) c[i] = (int64_t)(int32_t)get(f, *coords[i]);
  unsigned es = map.esize(), bits = swizzle_bits(map.swizzle());
  uint32_t base = (uint32_t)(address(f, in, smem, true) - shared_base());
  unsigned row_bytes = map.box(0) * es;
  if (bits && row_bytes != (16u << bits)) fail("%s: a box row of %u bytes under a %u-byte swizzle", in.op.c_str(), row_bytes, 16u << bits);
  unsigned box_elems = 1;
  for (unsigned i = 0; i < rank; ++i) box_elems *= map.box(i);
  const unsigned char* g = (const unsigned char*)(uintptr_t)map.w[1];
  for (unsigned e = 0; e < box_elems; ++e) {
    unsigned rest = e;
    bool inside = true;
    uint64_t goff = 0;
    for (unsigned i = 0; i < rank; ++i) {
      int64_t at = c[i] + rest % map.box(i);
      rest /= map.box(i);
      if (at < 0 || (uint64_t)at >= map.dim(i)) inside = false;
      else goff += (uint64_t)at * map.stride(i);
    }
    unsigned char* s = shared_base() + swizzled(base + e * es, bits);
    if (load) {
      if (inside) std::memcpy(s, g + goff, es);
      else std::memset(s, 0, es);
    } else if (inside) {
      std::memcpy(const_cast<unsigned char*>(g) + goff, s, es);
    }
  }
  if (load) {
    if (in.args.size() < 3) fail("%s: expected its mbarrier", in.op.c_str());
    Mbarrier& b = mbarrier_at(in, bar_address(f, in, in.args[2]));
    b.tx -= (long long)box_elems * es;
    mbarrier_progress(b);
  }
}

// ---- wgmma.mma_async (m64nNk16, f32 accumulators, f16 / bf16 operands from descriptors) ----
struct WgIn {
  uint64_t desc_a, desc_b;
  int n, type, scale_a, scale_b, trans_a, trans_b;
  bool accumulate;
  uint32_t* acc;  // this thread's N/2 accumulators (f32 bits), read and written
};
// The 16-bit element (mn, k) of a descriptor's operand: start address, leading / stride byte
// offsets, swizzle mode (bits 62-63: 0 none, 1 128 B, 2 64 B, 3 32 B), K- or MN-major.
inline float desc_element(uint64_t desc, unsigned mn, unsigned k, bool mn_major, int type) {
  uint32_t start = (uint32_t)(desc & 0x3fff) << 4, lbo = (uint32_t)((desc >> 16) & 0x3fff) << 4,
           sbo = (uint32_t)((desc >> 32) & 0x3fff) << 4;
  unsigned mode = (unsigned)(desc >> 62) & 3u;
  unsigned bits = mode == 1 ? 3u : mode == 2 ? 2u : mode == 3 ? 1u : 0u;
  uint32_t addr;
  if (bits == 0) {  // 8 x 8 core matrices of 16-byte rows
    addr = mn_major ? start + (mn / 8) * sbo + (mn % 8) * 2 + (k / 8) * lbo + (k % 8) * 16
                    : start + (mn / 8) * sbo + (mn % 8) * 16 + (k / 8) * lbo + (k % 8) * 2;
  } else {  // atoms of 8 rows of (16 << bits) bytes
    uint32_t row = 16u << bits, per_row = row / 2;
    addr = mn_major ? start + (mn / per_row) * lbo + (mn % per_row) * 2 + (k / 8) * sbo + (k % 8) * row
                    : start + (mn / 8) * sbo + (mn % 8) * row + k * 2;
    addr = swizzled(addr, bits);
  }
  if (addr + 2 > sizeof(shared_window)) fail("wgmma: a descriptor addresses past shared memory");
  unsigned short v;
  std::memcpy(&v, shared_base() + addr, 2);
  return type == T_BF16 ? bf16_to_float(v) : half_to_float(v);
}
inline void wgmma_resolve(Thread** lanes, unsigned) {
  const WgIn* p = nullptr;
  for (int i = 0; i < 128 && p == nullptr; ++i)
    if (lanes[i] != nullptr && lanes[i]->state == AT_WARP) p = (const WgIn*)lanes[i]->in;
  int n = p->n;
  std::vector<float> A(64 * 16), B(16 * (size_t)n);
  for (unsigned m = 0; m < 64; ++m)
    for (unsigned k = 0; k < 16; ++k) A[m * 16 + k] = p->scale_a * desc_element(p->desc_a, m, k, p->trans_a != 0, p->type);
  for (unsigned k = 0; k < 16; ++k)
    for (unsigned j = 0; j < (unsigned)n; ++j)
      B[k * n + j] = p->scale_b * desc_element(p->desc_b, j, k, p->trans_b != 0, p->type);
  for (int t = 0; t < 128; ++t) {
    if (lanes[t] == nullptr || lanes[t]->state != AT_WARP) continue;
    const WgIn& q = *(const WgIn*)lanes[t]->in;
    int w = t / 32, lane = t % 32, g = lane >> 2, c = lane & 3;
    for (int j = 0; j < n / 8; ++j)
      for (int i = 0; i < 4; ++i) {
        int row = 16 * w + g + 8 * (i >> 1), col = 8 * j + 2 * c + (i & 1);
        float acc = q.accumulate ? u2f(q.acc[4 * j + i]) : 0.0f;
        for (int k = 0; k < 16; ++k) acc += A[row * 16 + k] * B[k * n + col];
        q.acc[4 * j + i] = f2u(acc);
      }
  }
}
inline void decode_wgmma(Instr& in) {
  // wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}.{f16,bf16} d, a-desc, b-desc, scale-d,
  //   imm-scale-a, imm-scale-b, imm-trans-a, imm-trans-b
  const std::vector<std::string>& m = in.mods;
  if (m.size() != 8 || m[2] != "sync" || m[3] != "aligned" || m[4].compare(0, 3, "m64") != 0 || m[5] != "f32" ||
      (m[6] != "f16" && m[6] != "bf16") || m[7] != m[6])
    fail("inline PTX is not emulated: %s (m64nNk16 with f32 accumulators, f16 / bf16 operands)", in.op.c_str());
  int n = std::atoi(m[4].c_str() + m[4].find('n') + 1);
  if (m[4].find("k16") == std::string::npos || n < 8 || n > 256 || n % 8 != 0)
    fail("inline PTX is not emulated: %s", in.op.c_str());
  if (in.args.size() != 8) fail("%s: expected both operands from descriptors (8 operands)", in.op.c_str());
  if ((int)elems(in.args[0]).size() != n / 2) fail("%s: expected %d accumulators", in.op.c_str(), n / 2);
  in.d[0] = n;
  in.d[1] = type_of(m[6]);
}
inline void do_wgmma(Frame& f, const Instr& in) {
  WgIn p{};
  p.n = in.d[0];
  p.type = in.d[1];
  p.desc_a = get(f, in.args[1]);
  p.desc_b = get(f, in.args[2]);
  p.accumulate = get(f, in.args[3]) != 0;
  p.scale_a = (int)(int32_t)get(f, in.args[4]) < 0 ? -1 : 1;
  p.scale_b = (int)(int32_t)get(f, in.args[5]) < 0 ? -1 : 1;
  p.trans_a = (int)get(f, in.args[6]);
  p.trans_b = (int)get(f, in.args[7]);
  const Arg& d = in.args[0];
  uint32_t acc[128];
  for (int i = 0; i < p.n / 2; ++i) acc[i] = (uint32_t)get(f, d.elems[i]);
  p.acc = acc;
  warp_collective(OP_WARPGROUP, 0xffffffffu, 0, 0, 32, wgmma_resolve, &p, nullptr);
  for (int i = 0; i < p.n / 2; ++i) set(f, d.elems[i], acc[i]);
}

inline void Parser::decode(Instr& in) {
  switch (in.code) {
    case C_MMA: decode_mma(in); break;
    case C_LDMATRIX: decode_matrix(in, true); break;
    case C_STMATRIX: decode_matrix(in, false); break;
    case C_CP_ASYNC:
      if (in.args.size() < 3) fail("%s: expected [dst], [src], size", in.op.c_str());
      in.d[0] = has_prefix(in, "L2::cache_hint");
      break;
    case C_LD: case C_ST: decode_ldst(in); break;
    case C_WGMMA: decode_wgmma(in); break;
    default: break;
  }
}

inline Program& program(const char* tmpl, bool extended) {
  static std::unordered_map<const char*, Program> cache;
  auto it = cache.find(tmpl);
  if (it != cache.end()) return it->second;
  Program p;
  Parser parser{p, extended, {}, tmpl};
  parser.run(tmpl);
  return cache.emplace(tmpl, std::move(p)).first->second;
}

inline void exec(const char* tmpl, Operand* ops, int nops, bool extended) {
  Program& prog = program(tmpl, extended);
  uint64_t small[16] = {0};
  std::vector<uint64_t> large(prog.nlocals > 16 ? (size_t)prog.nlocals : 0, 0);
  uint64_t* locals = prog.nlocals > 16 ? large.data() : small;
  Frame f{ops, nops, locals, tmpl};
  long spins = 0;
  for (size_t pc = 0; pc < prog.code.size(); ++pc) {
    const Instr& in = prog.code[pc];
    if (in.pred >= 0 && ((locals[in.pred] != 0) == in.pred_neg)) continue;
    switch (in.code) {
      case C_BRA: {
        auto it = prog.labels.find(prog.label_names.at((size_t)in.d[0]));
        if (it == prog.labels.end()) fail("inline PTX: a branch to an unknown label (in \"%.80s\")", tmpl);
        if ((size_t)it->second <= pc) {  // a backward branch: a wait loop lets the others run
          if (++spins > 10000000) fail("inline PTX: a wait loop that never ends (in \"%.80s\")", tmpl);
          lockstep(true);
        }
        pc = (size_t)it->second - 1;
        break;
      }
      case C_MBARRIER: do_mbarrier(f, in); break;
      case C_BULK: do_bulk(f, in); break;
      case C_BULK_NOP: break;
      case C_TENSOR: do_tensor(f, in); break;
      case C_WGMMA: do_wgmma(f, in); break;
      case C_NOP: break;
      case C_MMA: do_mma(f, in); break;
      case C_LDMATRIX: do_matrix(f, in, true); break;
      case C_STMATRIX: do_matrix(f, in, false); break;
      case C_CP_ASYNC: do_cp_async(f, prog, in); break;
      case C_CP_COMMIT: cp_commit(); break;
      case C_CP_WAIT: cp_wait((unsigned)get(f, in.args.at(0))); break;
      case C_CP_WAIT_ALL: cp_wait_all(); break;
      case C_CP_ARRIVE: do_cp_arrive(f, in); break;
      case C_CVT: do_cvt(f, in); break;
      case C_CVTA: {
        uint64_t v = get(f, in.args.at(1));
        bool to = in.has("to");
        if (!shared_space(in)) { set(f, in.args.at(0), v); break; }
        if (to) {
          if (!is_shared((void*)(uintptr_t)v)) fail("cvta.to.shared of an address outside shared memory");
          set(f, in.args.at(0), (uint64_t)((unsigned char*)(uintptr_t)v - shared_base()));
        } else {
          set(f, in.args.at(0), (uint64_t)(uintptr_t)(shared_base() + v));
        }
        break;
      }
      case C_MOV: do_mov(f, in); break;
      case C_SETP: {
        if (in.args.size() != 3) fail("%s: expected 3 operands", in.op.c_str());
        set(f, in.args[0], compare(in, get(f, in.args[1]), get(f, in.args[2])));
        break;
      }
      case C_SELP: {
        if (in.args.size() != 4) fail("%s: expected 4 operands", in.op.c_str());
        set(f, in.args[0], get(f, in.args[3]) ? get(f, in.args[1]) : get(f, in.args[2]));
        break;
      }
      case C_BAR: {
        // bar.sync / barrier.sync{.aligned} id{, count}; bar.arrive / barrier.arrive id, count
        if (in.has("red")) fail("inline PTX is not emulated: %s", in.op.c_str());
        unsigned id = in.args.empty() ? 0u : (unsigned)get(f, in.args[0]);
        unsigned count = in.args.size() >= 2 ? (unsigned)get(f, in.args[1]) : L->nthreads;
        if (count == 0 || count % 32 != 0 && count != L->nthreads)
          fail("%s: a thread count of %u (a multiple of 32)", in.op.c_str(), count);
        if (in.has("arrive")) named_barrier_arrive(id, count);
        else if (id == 0 && count == L->nthreads) block_barrier();
        else named_barrier_sync(id, count);
        break;
      }
      case C_LD: do_ldst(f, in, true); break;
      case C_ST: do_ldst(f, in, false); break;
      case C_ALU: do_alu(f, in); break;
      case C_FMA: {
        if (in.args.size() != 4 || !type_float(in) || type_bits(in) != 32)
          fail("inline PTX is not emulated: %s (f32 only)", in.op.c_str());
        setf(f, in.args[0], fmaf(getf(f, in.args[1]), getf(f, in.args[2]), getf(f, in.args[3])));
        break;
      }
      case C_FUNARY: do_funary(f, in); break;
      default: fail("inline PTX is not emulated: %s", in.op.c_str());
    }
  }
  for (int i = 0; i < nops; ++i)
    if (ops[i].out) std::memcpy(ops[i].ptr, &ops[i].bits, (size_t)ops[i].size);
}

}  // namespace ptx
}  // namespace cudacpu
