"""Taichi's Python frontend, made cheaper to run (Taichi 1.7).

Every kernel is traced through Taichi's Python frontend in every process, even when its compiled
code comes from the offline cache (the cache key is computed from the traced IR). Taichi 1.7 builds
an error-message snippet for every AST node it visits — the source lines with a caret line under
them, each wrapped to 80 columns by ``textwrap`` — whether or not an error follows. On our
megakernels that formatting was about half of the frontend's time (measured: 87,720 snippets,
2.4 of 4.8 s while the texture reconstruction traces its kernels). It also reads every function's
source again (``inspect.getsourcelines``: the file tokenised up to the function) at each of its
call sites: 3,948 reads, 1.2 s for the volume task's two kernels.

:func:`install` replaces ``ASTTransformerContext.get_pos_info`` by a version that builds the same
header (file, line, function) with the node's first source line and its caret, without wrapping.
Error messages keep naming the file, line and code; only multi-line nodes show their first line.
It also memoises the frontend's source lookups (``getsourcelines`` / ``getsourcefile``) per function
object: a function's source does not change within a process; and the text clean-up it applies to
that source at each call site (``textwrap.fill`` of every line, ``textwrap.dedent``), per text.
Installed at import of tirender when Taichi's context class has the method (a Taichi without it
keeps its own).

It also binds read-only arguments of inline functions by reference and assigns a new name's value once
(install_arguments_by_reference, below), and builds Taichi's matrix reductions (``sum``, ``dot``, ``max``, ``min``,
``any``, ``all``, ``norm``) and products (``@``) as expressions: Taichi's own helpers assign a local variable per
term (a 4×4 product: 64 statements), and Taichi lowers a kernel in time quadratic in its statements
(docs/performance.md). The same operations in the same order: results are bit-identical (tests/test_frontend.py).
Taichi's check at every ti.func / ti.kernel decoration of whether it sits in a class body reads its one line
through linecache (``_inside_class``). And an inline ti.func's source is parsed once and its tree lent again to
later call sites (``_Ast``: Taichi parses it at every call site it inlines), and each node's position is pushed
as a ``_Pos`` that becomes text only when Taichi reads it (``_builder_call``).
"""
import ast as _ast
import linecache
import sys
import traceback as _traceback

from taichi.lang import impl as _impl
from taichi.lang import kernel_impl as _ki
from taichi.lang.exception import TaichiCompilationError, TaichiSyntaxError

try:
    from taichi.lang.exception import handle_exception_from_cpp
except ImportError:                           # another Taichi: its own Builder stays
    handle_exception_from_cpp = None
from taichi.lang.ast import ast_transformer_utils as _atu

_installed = []


def _pos_info(self, node):
    """File, line and function of an AST node, its first source line and a caret under the node."""
    i = node.lineno - 1
    msg = f'File "{self.file}", line {node.lineno + self.lineno_offset}, in {self.func.func.__name__}:\n'
    if not 0 <= i < len(self.src):
        return msg
    code = self.src[i].rstrip()
    col = self.indent + (node.col_offset or 0)
    end = self.indent + node.end_col_offset if node.end_lineno == node.lineno and node.end_col_offset else len(code)
    return msg + code + "\n" + " " * col + "^" * max(end - col, 1) + "\n"


def _memoised(lookup):
    """lookup(obj), remembered per object (unhashable objects are looked up every time)."""
    cache = {}

    def cached(obj):
        try:
            return cache[obj]
        except KeyError:
            res = cache[obj] = lookup(obj)
            return res
        except TypeError:
            return lookup(obj)
    cached.__wrapped__ = lookup
    return cached


class _Textwrap:
    """Stands in for the ``textwrap`` module inside Taichi's kernel_impl: ``fill`` and ``dedent``
    remembered per (text, options); everything else is the module's."""

    def __init__(self, module):
        self._module = module
        self._fill, self._dedent = {}, {}

    def fill(self, text, **kw):
        key = (text, tuple(sorted(kw.items())))
        try:
            return self._fill[key]
        except KeyError:
            res = self._fill[key] = self._module.fill(text, **kw)
            return res

    def dedent(self, text):
        try:
            return self._dedent[text]
        except KeyError:
            res = self._dedent[text] = self._module.dedent(text)
            return res

    def __getattr__(self, name):
        return getattr(self._module, name)


def _inside_class(level_of_class_stackframe):
    """Taichi's kernel_impl._inside_class (is the decorated function defined in a class body: its frame's current
    line matches Taichi's patterns), reading that one line through linecache instead of inspect.getframeinfo, which
    locates the whole source file at every ti.func / ti.kernel decoration (about 1 ms each: 1.2 s of the 1,068
    decorations of importing tirender)."""
    try:
        frame = sys._getframe(level_of_class_stackframe)
        line = linecache.getline(frame.f_code.co_filename, frame.f_lineno, frame.f_globals).strip()
        return any(pat.match(line) for pat in _ki._KERNEL_CLASS_STACKFRAME_STMT_RES)
    except Exception:  # noqa: BLE001 - as Taichi's: any failure means "not in a class"
        return False


_inside_class._tirender = True


# ----------------------------------------------------------------------------- positions, built when read
class _Pos:
    """An AST node's position (file, line, function, source line and caret: _pos_info), built into text only when
    read: Taichi 1.7 builds it for every node it visits (234,763 of them while prb_attached's gradient kernel is
    traced) and reads it for the few that make a statement's debug information or an error message."""
    __slots__ = ("ctx", "node", "text")

    def __init__(self, ctx, node):
        self.ctx, self.node, self.text = ctx, node, None

    def __str__(self):
        if self.text is None:
            self.text = _pos_info(self.ctx, self.node)
        return self.text


def _builder_call(self, ctx, node):
    """Taichi's Builder.__call__ (build one AST node with its position on Taichi's source-info stack), the position
    pushed as a _Pos; errors handled as Taichi's."""
    method = getattr(self, "build_" + node.__class__.__name__, None)
    try:
        if method is None:
            raise TaichiSyntaxError(f'Unsupported node "{node.__class__.__name__}"')
        stack = _impl.get_runtime().src_info_stack
        stack.append(_Pos(ctx, node) if isinstance(node, _STMT_EXPR) else "")
        try:
            return method(ctx, node)
        finally:
            stack.pop()
    except Exception as e:
        if _impl.get_runtime().print_full_traceback:
            raise e
        if ctx.raised or not isinstance(node, _STMT_EXPR):
            raise e.with_traceback(None)
        ctx.raised = True
        e = handle_exception_from_cpp(e)
        if not isinstance(e, TaichiCompilationError):
            msg = ctx.get_pos_info(node) + _traceback.format_exc()
            raise TaichiCompilationError(msg) from None
        msg = ctx.get_pos_info(node) + str(e)
        raise type(e)(msg) from None


def _current_src_info(self):
    """Taichi's PyTaichi.get_current_src_info, the position's text."""
    return str(self.src_info_stack[-1])


TAICHI_BUILDER = {}                          # Taichi's own, once replaced
_STMT_EXPR = (_ast.stmt, _ast.expr)


def install_lazy_positions():
    """Push positions as _Pos (idempotent; a Taichi without the hooks keeps its own)."""
    b = getattr(_atu, "Builder", None)
    if TAICHI_BUILDER or b is None or not (hasattr(_impl.PyTaichi, "get_current_src_info")
                                            and hasattr(_impl.PyTaichi, "src_info_guard")):
        return
    if handle_exception_from_cpp is None:
        return
    TAICHI_BUILDER.update(call=b.__call__, current_src_info=_impl.PyTaichi.get_current_src_info)
    b.__call__ = _builder_call
    _impl.PyTaichi.get_current_src_info = _current_src_info


# ----------------------------------------------------------------------------- parsed sources, lent again
class _Ast:
    """Stands in for the ``ast`` module inside Taichi's kernel_impl. Taichi parses a ti.func's source (``ast.parse``)
    at every call site it inlines (4,941 parses, 0.62 s of the 5.4-s trace of prb_attached's gradient kernel); while an
    inline ti.func is traced (``depth`` > 0) ``parse`` lends a tree of the same text that an earlier call site has
    finished with, its nodes' values from that trace (``ptr``, and ``caller``, which Taichi tests with hasattr) removed.
    A function inlined within its own trace gets a tree of its own. Everything else is the module's."""

    def __init__(self, module):
        self._module = module
        self.free = {}      # source text -> [(tree, its nodes)] no trace is using
        self.lent = []      # (text, tree, nodes) lent to traces still running
        self.depth = 0      # inline ti.func traces running

    def parse(self, source, *args, **kw):
        if self.depth == 0 or args or kw:
            return self._module.parse(source, *args, **kw)
        free = self.free.get(source)
        if free:
            tree, nodes = free.pop()
        else:
            tree = self._module.parse(source)
            nodes = list(self._module.walk(tree))
        self.lent.append((source, tree, nodes))
        return tree

    def give_back(self, n):
        """Return the trees lent since there were n lent (their traces have ended) to the free lists."""
        while len(self.lent) > n:
            source, tree, nodes = self.lent.pop()
            for node in nodes:
                d = node.__dict__
                d.pop("ptr", None)
                d.pop("caller", None)
            self.free.setdefault(source, []).append((tree, nodes))

    def __getattr__(self, name):
        return getattr(self._module, name)


def _func_call(self, *args, **kwargs):
    """Taichi's Func.__call__; an inline ti.func traced inside a kernel parses its source through _Ast."""
    sh = _ki.ast
    if self.is_real_function or not isinstance(sh, _Ast) or not _impl.inside_kernel():
        return TAICHI_FUNC_CALL[0](self, *args, **kwargs)
    n = len(sh.lent)
    sh.depth += 1
    try:
        return TAICHI_FUNC_CALL[0](self, *args, **kwargs)
    finally:
        sh.depth -= 1
        sh.give_back(n)


TAICHI_FUNC_CALL = []                        # Taichi's Func.__call__, once replaced


def install_parse_lending():
    """Lend parsed ti.func sources again (idempotent; a Taichi without the hooks parses at every call site)."""
    if TAICHI_FUNC_CALL or not (hasattr(_ki, "Func") and getattr(_ki, "ast", None) is not None
                                and hasattr(_ki, "_get_tree_and_ctx")):
        return
    TAICHI_FUNC_CALL.append(_ki.Func.__call__)
    _ki.ast = _Ast(_ki.ast)
    _ki.Func.__call__ = _func_call


def install():
    """Swap in the cheap snippet and the memoised source lookups (idempotent); returns whether
    this Taichi has the hooks (otherwise it keeps its own)."""
    ctx = getattr(_atu, "ASTTransformerContext", None)
    hooks = (ctx is not None and hasattr(ctx, "get_pos_info") and hasattr(_ki, "getsourcelines")
             and hasattr(_ki, "getsourcefile"))
    if hooks and not _installed:
        _installed.append((ctx.get_pos_info, _ki.getsourcelines, _ki.getsourcefile))
        ctx.get_pos_info = _pos_info
        _ki.getsourcelines = _memoised(_ki.getsourcelines)
        _ki.getsourcefile = _memoised(_ki.getsourcefile)
        if getattr(_ki, "textwrap", None) is not None:
            _ki.textwrap = _Textwrap(_ki.textwrap)
    if hasattr(_ki, "_inside_class") and not getattr(_ki._inside_class, "_tirender", False):
        _ki._inside_class = _inside_class
    install_matrix_ops()
    install_arguments_by_reference()
    install_parse_lending()
    if hooks:
        install_lazy_positions()
    return hooks


# ----------------------------------------------------------------------------- matrix algebra as expressions
def _entries(mat):
    """The index tuples of a vector's or matrix's entries, row-major."""
    shape = mat.get_shape()
    if len(shape) == 1:
        return [(i,) for i in range(shape[0])]
    return [(i, j) for i in range(shape[0]) for j in range(shape[1])]


def _reduce(mat, fun):
    """fun folded over mat's entries in Taichi's order, as one expression (Taichi's _reduce assigns a local
    variable per entry)."""
    from taichi.lang import impl
    if not impl.inside_kernel():                # Python scope: Taichi's own
        return TAICHI_MATRIX_OPS["_reduce"](mat, fun)
    idx = _entries(mat)
    r = impl.subscript(None, mat, *idx[0])
    for ix in idx[1:]:
        r = fun(r, impl.subscript(None, mat, *ix))
    return r


def _matmul_helper(mat_x, mat_y):
    """mat_x @ mat_y (matrix @ vector or matrix @ matrix) in Taichi's summation order, one expression per entry
    (Taichi's helper assigns a local variable per product term: 64 for a 4×4 product)."""
    from taichi.lang import impl, ops
    from taichi.lang.matrix import Matrix, Vector
    if not impl.inside_kernel():                # Python scope: Taichi's own
        return TAICHI_MATRIX_OPS["_matmul_helper"](mat_x, mat_y)
    sx, sy = mat_x.get_shape(), mat_y.get_shape()

    def at(m, *ix):
        return impl.subscript(None, m, *ix)

    # Taichi's sums start from 0 · x[0, 0] · y[0, 0] (NaN when either is infinite): kept, for the same bits
    zero = ops.mul(ops.mul(at(mat_x, 0, 0), at(mat_y, 0) if len(sy) == 1 else at(mat_y, 0, 0)), 0)

    def entry(i, j=None):
        z = zero
        for k in range(sx[1]):
            z = ops.add(z, ops.mul(at(mat_x, i, k), at(mat_y, k) if j is None else at(mat_y, k, j)))
        return z

    if len(sy) == 1:
        return Vector([entry(i) for i in range(sx[0])])
    return Matrix([[entry(i, j) for j in range(sy[1])] for i in range(sx[0])])


TAICHI_MATRIX_OPS = {}                       # Taichi's own helpers, once replaced (tests compare against them)
_reduce._is_taichi_function = False          # a compile-time callable for Taichi's AST transformer
_matmul_helper._is_taichi_function = False


def install_matrix_ops():
    """Swap Taichi's matrix reductions (sum, dot, max, min, any, all) and products for the expression builders
    above (idempotent; a Taichi without these helpers keeps its own)."""
    from taichi.lang import matrix_ops
    if getattr(matrix_ops, "_tirender_exprs", False) or not (hasattr(matrix_ops, "_reduce")
                                                           and hasattr(matrix_ops, "_matmul_helper")):
        return
    TAICHI_MATRIX_OPS.update(_reduce=matrix_ops._reduce, _matmul_helper=matrix_ops._matmul_helper)
    matrix_ops._reduce = _reduce
    matrix_ops._matmul_helper = _matmul_helper
    matrix_ops._tirender_exprs = True


# ----------------------------------------------------------------------------- arguments by reference
# Taichi inlines a ``ti.func`` and copies each non-template argument into a fresh local variable (a struct: one per
# member). A megakernel passes the same shading context, vertex and parameter records down many levels, and Taichi
# lowers a kernel in time quadratic in its statements. An argument that is a plain local variable of the caller (or a
# struct of them) and that the callee never writes is bound by reference instead: the callee reads the same values
# (the caller is suspended while it runs), so the kernel computes the same bits. "Never writes": no assignment to the
# parameter or into it, no atomic operation or method call on it other than pure ones (_PURE_METHODS), no
# ti.static(...) of it. The one way left for a callee to change a borrowed variable is to hand it to a template
# parameter of a function that writes that parameter: that is detected as it happens, and the kernel is traced again
# with every argument copied (Taichi's own behaviour).
_PURE_METHODS = frozenset(("norm", "norm_sqr", "normalized", "dot", "cross", "sum", "max", "min", "transpose",
                           "outer_product", "any", "all", "cast", "trace", "determinant", "inverse", "get_shape",
                           "to_list", "norm_inv", "keys"))
_BYREF = {"on": False, "borrowed": set(), "writes": {}, "count": [0, 0], "retraced": []}


class _Retrace(TaichiCompilationError):
    """A borrowed argument reached a template parameter its function writes: trace the kernel again with copies."""


def _root_name(node):
    import ast
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _written_names(fn):
    """Names a function definition (ast.FunctionDef) may write, as in the section's comment."""
    import ast
    out = set()
    for n in ast.walk(fn):
        targets = []
        if isinstance(n, ast.Assign):
            targets = n.targets
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign, ast.For, ast.comprehension, ast.NamedExpr)):
            targets = [n.target]
        elif isinstance(n, ast.withitem) and n.optional_vars is not None:
            targets = [n.optional_vars]
        elif isinstance(n, ast.Delete):
            targets = n.targets
        elif isinstance(n, ast.Call):
            f = n.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if isinstance(f, ast.Attribute) and name not in _PURE_METHODS:
                targets = [f.value]                                   # p.method(...) may change p
            if "atomic" in name or name == "static":
                targets += list(n.args) + [k.value for k in n.keywords]
        for t in targets:
            for x in ast.walk(t):
                r = _root_name(x)
                if r:
                    out.add(r)
    return out


def _writes(ctx, node):
    key = ctx.func.func
    w = _BYREF["writes"].get(key)
    if w is None:
        w = _BYREF["writes"][key] = _written_names(node)
    return w


def _plain(data):
    """Whether data is a local variable (not a field element, not an expression), or a struct of them."""
    from taichi.lang.expr import Expr
    from taichi.lang.struct import Struct
    if isinstance(data, Struct):
        return all(_plain(v) for v in data.entries.values())
    return isinstance(data, Expr) and data.ptr.is_lvalue() and not data.ptr.is_index_expr()


def _ids(data, out):
    """The Python objects data is made of (itself, a struct's members, a container's items)."""
    from taichi.lang.struct import Struct
    out.append(id(data))
    if isinstance(data, Struct):
        for v in data.entries.values():
            _ids(v, out)
    elif isinstance(data, (tuple, list)):
        for v in data:
            _ids(v, out)
    return out


def _build_function_def(ctx, node):
    """Taichi's build_FunctionDef, first checking that no borrowed variable reaches a template parameter the function
    writes (inline functions only); the variables its arguments borrow are returned when it ends."""
    if _BYREF["on"] and not ctx.is_kernel and not ctx.is_real_function and _BYREF["borrowed"]:
        from taichi.types import annotations
        writes = None
        for i, data in enumerate(ctx.argument_data):
            if isinstance(ctx.func.arguments[i].annotation, annotations.template):
                if any(x in _BYREF["borrowed"] for x in _ids(data, [])):
                    writes = _writes(ctx, node) if writes is None else writes
                    if ctx.func.arguments[i].name in writes:
                        raise _Retrace(f"{ctx.func.func.__qualname__}({ctx.func.arguments[i].name})")
    borrowed = set(_BYREF["borrowed"])        # what this function borrows is lent only while it runs
    try:
        return TAICHI_FRONTEND["build_FunctionDef"](ctx, node)
    finally:
        _BYREF["borrowed"] = borrowed


def _expr_init_func(rhs):
    """Taichi's argument copy, or the caller's variable itself where the section's comment allows."""
    if _BYREF["on"]:
        import sys
        f = sys._getframe(1)
        if f.f_code is TAICHI_FRONTEND["build_FunctionDef"].__code__:
            loc = f.f_locals
            arg, ctx, node = loc.get("arg"), loc.get("ctx"), loc.get("node")
            if None not in (arg, ctx, node) and arg.arg not in _writes(ctx, node) and _plain(rhs):
                _BYREF["borrowed"].update(_ids(rhs, []))
                _BYREF["count"][0] += 1
                return rhs
            _BYREF["count"][1] += 1
    return TAICHI_FRONTEND["expr_init_func"](rhs)


def _materialize(self, key=None, args=None, arg_features=None):
    """Taichi's Kernel.materialize with borrowed arguments; traced again with copies if one could be written."""
    _BYREF.update(on=True, borrowed=set())
    try:
        return TAICHI_FRONTEND["materialize"](self, key, args, arg_features)
    except Exception as e:
        if not isinstance(e, _Retrace):      # (Taichi re-raises a frontend error as its own type, with a position)
            raise
        _BYREF["retraced"].append((self.func.__qualname__, str(e).splitlines()[-1]))
    finally:
        _BYREF.update(on=False, borrowed=set())
    return TAICHI_FRONTEND["materialize"](self, key, args, arg_features)


def _new_name(ctx, target):
    """Whether an assignment target is a name not yet declared (nor a kernel argument)."""
    import ast
    return isinstance(target, ast.Name) and target.id not in ctx.kernel_args and not ctx.is_var_declared(target.id)


def _build_assign(ctx, node):
    """Taichi's build_Assign, except that ``name = value`` with one new local name (or ``a, b = values`` with new
    names) binds the name to the fresh variable Taichi has just made of the value (Taichi's build_assign_basic copies
    that copy once more)."""
    import ast
    from taichi.lang import impl
    from taichi.lang.ast.ast_transformer import ASTTransformer, build_stmt
    build_stmt(ctx, node.value)
    is_static = isinstance(node.value, ast.Call) and node.value.func.ptr is impl.static
    once = not is_static and len(node.targets) == 1
    values = node.value.ptr if is_static else impl.expr_init(node.value.ptr)
    for target in node.targets:
        if once and _new_name(ctx, target):
            ctx.create_variable(target.id, values)
        elif (once and isinstance(target, ast.Tuple) and isinstance(values, (tuple, list))
              and len(values) == len(target.elts) and all(_new_name(ctx, t) for t in target.elts)
              and len({t.id for t in target.elts}) == len(target.elts)):
            for t, v in zip(target.elts, values):            # a, b = ...: each element once too
                ctx.create_variable(t.id, v)
        else:
            ASTTransformer.build_assign_unpack(ctx, target, values, is_static)
    return None


TAICHI_FRONTEND = {}                         # Taichi's own functions, once replaced


def install_arguments_by_reference():
    """Bind read-only plain-variable arguments of inline functions by reference (idempotent; a Taichi without the
    hooks keeps its own copies)."""
    from taichi.lang import impl
    from taichi.lang.ast import ast_transformer as at
    if TAICHI_FRONTEND or not (hasattr(impl, "expr_init_func") and hasattr(at.ASTTransformer, "build_FunctionDef")
                               and hasattr(_ki.Kernel, "materialize")):
        return
    TAICHI_FRONTEND.update(expr_init_func=impl.expr_init_func, build_FunctionDef=at.ASTTransformer.build_FunctionDef,
                           materialize=_ki.Kernel.materialize, build_Assign=at.ASTTransformer.build_Assign)
    impl.expr_init_func = _expr_init_func
    at.ASTTransformer.build_FunctionDef = staticmethod(_build_function_def)
    _ki.Kernel.materialize = _materialize
    if hasattr(at, "build_stmt") and hasattr(at.ASTTransformer, "build_assign_unpack"):
        at.ASTTransformer.build_Assign = staticmethod(_build_assign)
