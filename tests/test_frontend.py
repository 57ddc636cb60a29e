"""tirender/frontend.py: the cheaper error snippets and memoised source lookups keep Taichi's
compile errors pointing at the file, line and code."""
import inspect

import pytest
import taichi as ti
from taichi.lang import kernel_impl
from taichi.lang.ast import ast_transformer_utils

from tirender import frontend


def test_installed_on_this_taichi():
    assert frontend.install()
    assert ast_transformer_utils.ASTTransformerContext.get_pos_info is frontend._pos_info
    assert kernel_impl.getsourcelines.__wrapped__ is not None


def test_memoised_lookups_match_inspect():
    def probe(x):
        return x + 1
    lines, start = kernel_impl.getsourcelines(probe)
    assert (lines, start) == inspect.getsourcelines(probe)
    assert kernel_impl.getsourcelines(probe) is kernel_impl.getsourcelines(probe)   # remembered
    assert kernel_impl.getsourcefile(probe) == inspect.getsourcefile(probe)


def test_compile_error_names_file_line_and_code():
    @ti.func
    def helper(x):
        return x * undefined_name_xyz  # noqa: F821

    @ti.kernel
    def broken() -> ti.f32:
        return helper(2.0)

    with pytest.raises(ti.TaichiCompilationError) as e:
        broken()
    msg = str(e.value)
    line = inspect.getsourcelines(helper)[1] + 2
    assert f'test_frontend.py", line {line}, in helper' in msg, msg
    assert "return x * undefined_name_xyz" in msg, msg
    assert "^" in msg and 'Name "undefined_name_xyz" is not defined' in msg, msg


def test_remembered_text_cleanup_matches_textwrap():
    import textwrap
    tw = kernel_impl.textwrap
    assert isinstance(tw, frontend._Textwrap)
    for line in ("\tx = 1  # tab\n", "    y = f(a, b)\n", "z" * 200 + "\n", ""):
        assert tw.fill(line, tabsize=4, width=9999) == textwrap.fill(line, tabsize=4, width=9999)
        assert tw.fill(line, tabsize=4, width=9999) is tw.fill(line, tabsize=4, width=9999)
    src = "    def f(x):\n        return x\n"
    assert tw.dedent(src) == textwrap.dedent(src)
    assert tw.wrap is textwrap.wrap


def _algebra_kernel(out):
    @ti.kernel
    def k(a: ti.types.matrix(4, 4, ti.f32), b: ti.types.matrix(4, 4, ti.f32), v: ti.types.vector(4, ti.f32),
          w: ti.types.vector(3, ti.f32)):
        m = a @ b
        mv = a @ v
        vm = v @ a
        for i in ti.static(range(4)):
            for j in ti.static(range(4)):
                out[i * 4 + j] = m[i, j]
            out[16 + i] = mv[i]
            out[20 + i] = vm[i]
        out[24] = v.sum()
        out[25] = v.dot(v)
        out[26] = v.max()
        out[27] = v.min()
        out[28] = a.sum()
        out[29] = w.norm()
        out[30] = ti.cast(v.any(), ti.f32)
        out[31] = ti.cast((v > 0).all(), ti.f32)
        c = w.cross(w * 2.0 + 1.0)
        out[32] = c[0] + c[1] * 3.0 + c[2] * 7.0
        out[33] = (a.transpose() @ a)[1, 2]
        out[34] = ti.math.length(w)
        out[35] = ti.math.dot(w, w / 3.0)
    return k


def test_matrix_algebra_as_expressions_is_bit_identical(monkeypatch):
    """The expression-built reductions and products (frontend.install_matrix_ops) give Taichi's own bits, inf
    and NaN included, with fewer frontend statements."""
    import numpy as np
    from taichi.lang import matrix_ops
    assert matrix_ops._reduce is frontend._reduce and matrix_ops._matmul_helper is frontend._matmul_helper
    rng = np.random.default_rng(3)
    cases = [(rng.normal(size=(4, 4)), rng.normal(size=(4, 4)), rng.normal(size=4), rng.normal(size=3))
             for _ in range(3)]
    cases[2][0][1, 1] = np.inf          # Taichi's products start from 0 · a[0, 0] · b[0, 0]: NaN propagates
    cases[2][2][3] = -np.inf
    out = ti.field(ti.f32, shape=36)
    ours = _algebra_kernel(out)
    with monkeypatch.context() as m:
        m.setattr(matrix_ops, "_reduce", frontend.TAICHI_MATRIX_OPS["_reduce"])
        m.setattr(matrix_ops, "_matmul_helper", frontend.TAICHI_MATRIX_OPS["_matmul_helper"])
        theirs = _algebra_kernel(out)
        for case in cases:                      # compiles with Taichi's helpers
            theirs(*case)
    for case in cases:
        theirs(*case)
        ref = out.to_numpy()
        ours(*case)
        got = out.to_numpy()
        np.testing.assert_array_equal(got, ref)
    assert not np.isfinite(ref).all()           # the inf case reached the outputs


def test_matrix_algebra_in_python_scope_is_taichis():
    a = ti.Matrix([[1.0, 2.0], [3.0, 4.0]])
    v = ti.Vector([1.0, -1.0])
    assert (a @ a).to_list() == [[7.0, 10.0], [15.0, 22.0]]
    assert (a @ v).to_list() == [-1.0, -1.0]
    assert v.dot(v) == 2.0 and a.sum() == 10.0 and v.max() == 1.0


# ----------------------------------------------------------------------------- arguments by reference
_Rec = ti.types.struct(a=ti.f32, v=ti.types.vector(2, ti.f32))


@ti.func
def _reads(s, x):
    return s.a + s.v[1] * x


@ti.func
def _writes(s, x):
    s.a += x                     # into its own copy: the caller's s is unchanged
    return s.a


@ti.func
def _bump(s: ti.template()):
    s.a += 100.0


@ti.func
def _hands_on(s):                # reads s, but hands it to a template parameter that writes it
    _bump(s)
    return s.a


@ti.func
def _atomic(x):
    ti.atomic_add(x, 5.0)
    return x


@ti.func
def _method(v):
    v.fill(9.0)                  # a method that changes its object
    return v[0]


def _by_reference_kernel(out, hand_on):
    @ti.kernel
    def k(a: ti.f32):
        s = _Rec(a=a, v=ti.Vector([2.0, 3.0]))
        x = 2.0
        w = ti.Vector([1.0, 1.0])
        out[0] = _reads(s, x)
        out[1] = _writes(s, x)
        out[2] = s.a
        out[3] = _atomic(x)
        out[4] = x
        out[5] = _method(w)
        out[6] = w[1]
        if ti.static(hand_on):
            out[7] = _hands_on(s)
            out[8] = s.a
    return k


def test_read_only_arguments_by_reference_keep_copy_semantics(monkeypatch):
    """Arguments that are plain variables and that the callee never writes are borrowed, not copied
    (frontend.install_arguments_by_reference); a callee that writes its parameter, changes it by an atomic or a
    method, or hands it to a template parameter that writes it, still works on a copy (the last by tracing the kernel
    again with copies): the caller's variables read as with Taichi's own copies."""
    import numpy as np
    from taichi.lang import impl
    assert impl.expr_init_func is frontend._expr_init_func
    out = ti.field(ti.f32, shape=9)
    expect = [7.0, 3.0, 1.0, 7.0, 2.0, 9.0, 1.0, 101.0, 1.0]
    n0 = list(frontend._BYREF["count"])
    _by_reference_kernel(out, False)(1.0)
    assert out.to_numpy()[:7].tolist() == expect[:7]
    borrowed, copied = (frontend._BYREF["count"][i] - n0[i] for i in range(2))
    assert borrowed >= 2 and copied >= 3, (borrowed, copied)        # _reads' two; _writes' s, _atomic's, _method's
    retraced = len(frontend._BYREF["retraced"])
    _by_reference_kernel(out, True)(1.0)
    assert out.to_numpy().tolist() == expect
    assert len(frontend._BYREF["retraced"]) == retraced + 1 and "_bump(s)" in frontend._BYREF["retraced"][-1][1]
    with monkeypatch.context() as m:                  # Taichi's own copies give the same values
        m.setattr(impl, "expr_init_func", frontend.TAICHI_FRONTEND["expr_init_func"])
        _by_reference_kernel(out, True)(1.0)
        np.testing.assert_array_equal(out.to_numpy(), expect)


def _assignment_kernel(out):
    @ti.func
    def make(x):
        return _Rec(a=x, v=ti.Vector([x, 2.0 * x]))

    @ti.func
    def same(x):                 # returns its (borrowed) argument: not a fresh value
        return x

    @ti.func
    def twice(x):
        r = x * 2.0
        return r, r              # one variable twice: not fresh

    @ti.kernel
    def k(x0: ti.f32):
        a = x0
        b = a                    # a copy: later changes of a do not reach b
        a += 1.0
        c = d = a                # chained: two variables
        c += 5.0
        s = make(a)
        t = s
        s.a += 10.0
        u, w = a, b
        u += 100.0
        m = ti.Vector([a, b])
        n = m
        m[0] = -1.0
        out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7] = a, b, c, d, s.a, t.a, u, w
        out[8] = n[0]
        out[9] = m[0]
        for i in range(2):
            q = a + i            # a new name in a loop body: bound afresh each iteration
            out[10 + i] = q
        y = same(a)
        y += 1.0
        r1, r2 = twice(a)
        r1 += 1.0
        out[12], out[13], out[14], out[15] = y, a, r1, r2
    return k


def test_new_names_bind_the_assigned_value_once(monkeypatch):
    """``name = value`` for a new name binds the variable Taichi makes of the value, without Taichi's second copy
    (frontend._build_assign); chained, unpacking and repeated assignments, a function returning its argument or one
    variable twice keep their meaning."""
    from taichi.lang.ast import ast_transformer as at
    assert at.ASTTransformer.build_Assign is frontend._build_assign
    out = ti.field(ti.f32, shape=16)
    expect = [2.0, 1.0, 7.0, 2.0, 12.0, 2.0, 102.0, 1.0, 2.0, -1.0, 2.0, 3.0, 3.0, 2.0, 5.0, 4.0]
    _assignment_kernel(out)(1.0)
    assert out.to_numpy().tolist() == expect
    with monkeypatch.context() as m:
        m.setattr(at.ASTTransformer, "build_Assign", staticmethod(frontend.TAICHI_FRONTEND["build_Assign"]))
        _assignment_kernel(out)(1.0)
        assert out.to_numpy().tolist() == expect


@ti.data_oriented
class _HasSum:
    """A template argument with a ``sum`` method of its own: ``a.sum()`` on it is not Taichi's matrix sum."""

    @ti.func
    def sum(self):
        return 40.0


@ti.func
def _total(a: ti.template()):
    return a.sum()


@ti.func
def _plus_one(x):
    return x + 1.0


@ti.func
def _nested(x, depth: ti.template()):
    r = x + 1.0
    if ti.static(depth > 0):
        r = _nested(r, depth - 1)          # traced inside its own trace
    return r


def test_parsed_sources_are_lent_again(monkeypatch):
    """An inline ti.func's source is parsed once and its tree lent to later call sites (frontend._Ast), also across
    kernels; a function traced within its own trace (a compile-time recursion) gets a tree of its own; a reused tree keeps nothing of
    its last trace: ``a.sum()`` traced on a vector (Taichi binds its matrix sum to the vector, ``caller``), then on an
    object with its own ``sum``, calls that object's method. Values equal Taichi's own parse-at-every-site."""
    from taichi.lang import kernel_impl as ki
    assert isinstance(ki.ast, frontend._Ast) and ki.Func.__call__ is frontend._func_call
    out = ti.field(ti.f32, shape=4)
    obj = _HasSum()

    def kernel():
        @ti.kernel
        def k(x: ti.f32):
            out[0] = _plus_one(x) + _plus_one(2.0 * x)           # two call sites: one parse
            out[1] = _nested(x, 2) + _plus_one(_plus_one(x))     # 3 traces at once; arguments: one after another
            out[2] = _total(ti.Vector([x, 2.0, 3.0]))           # caller = the vector
            out[3] = _total(obj)                                # the object's own sum
        return k

    parses = []
    real = ki.ast._module.parse
    monkeypatch.setattr(ki.ast, "_module", type("M", (), {"parse": staticmethod(
        lambda s, *a, **kw: parses.append(s) or real(s, *a, **kw)), "walk": staticmethod(__import__("ast").walk),
        "__getattr__": lambda self, n: getattr(__import__("ast"), n)})())
    ki.ast.free.clear()
    kernel()(1.0)
    expect = [2.0 + 3.0, 4.0 + 3.0, 6.0, 40.0]
    assert out.to_numpy().tolist() == expect
    n = {f: sum(f"def {f}(" in s for s in parses) for f in ("_plus_one", "_nested", "_total")}
    assert n == {"_plus_one": 1, "_nested": 3, "_total": 1}, n
    out.fill(0)
    funcs = len(parses) - 1                    # (the kernel's own source is parsed once per kernel)
    kernel()(1.0)                              # another kernel: every tree lent again
    assert out.to_numpy().tolist() == expect and len(parses) - 2 == funcs
    assert not ki.ast.lent
    with monkeypatch.context() as m:           # Taichi's own parse at every call site: the same values
        m.setattr(ki.Func, "__call__", frontend.TAICHI_FUNC_CALL[0])
        out.fill(0)
        kernel()(1.0)
        assert out.to_numpy().tolist() == expect


@pytest.mark.filterwarnings("ignore:.*Calling non-taichi function")   # probe calls Python at compile time
def test_positions_become_text_when_read():
    """Taichi's builder pushes each node's position as a frontend._Pos (its text built only when read); a statement's
    debug information and Taichi's get_current_src_info read the same text as Taichi's own get_pos_info."""
    from taichi.lang import impl
    from taichi.lang.ast import ast_transformer_utils as atu
    assert atu.Builder.__call__ is frontend._builder_call
    seen = []

    @ti.func
    def probe(x):
        seen.append(impl.get_runtime().get_current_src_info())
        return x * 2.0

    @ti.kernel
    def k(x: ti.f32) -> ti.f32:
        return probe(x)

    assert k(1.5) == 3.0
    line = inspect.getsourcelines(probe)[1] + 2
    assert len(seen) == 1 and isinstance(seen[0], str)
    assert f'line {line}, in probe' in seen[0] and "seen.append(" in seen[0], seen[0]
    assert not impl.get_runtime().src_info_stack          # every position popped
